"""Helpers for the SDK tests: a TCP proxy that can really drop sockets, and polling.

The proxy sits between the SDK and the service. ``sever()`` closes both
TCP sockets of every link (a real drop: the SDK sees its stream die, the
server sees its peer vanish); ``retarget(port)`` points new links at a
restarted service; ``freeze()`` holds every byte (a partition: the sockets
stay open, nothing arrives); ``half_open()`` holds every byte of the links
open now, for good, while new links pass (a half-open TCP path: no FIN, no
RST, and the worker can come back); ``hold_when(predicate)`` holds server→worker
chunks from the first one the predicate matches until ``release()``, which
sends them in one write (frames the worker then reads at once);
``drop_when(predicate)`` severs a link instead
of forwarding a server→worker chunk the predicate matches (server frames
are unmasked, so an ack can be recognised on the wire: a lost ack), optionally freezing every link from
then on (the worker cannot come back until the test thaws the proxy).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.from_thread
import trio

from pulse_trio.client import Client
from pulse_trio.sdk import Backoff, Registry, TaskContext, Worker

FAST_POLL_S = 0.02
FAST_BACKOFF = Backoff(initial=0.05, factor=2.0, maximum=0.4)


class Proxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.links = 0
        self._scopes: set[trio.CancelScope] = set()
        self._thawed = trio.Event()
        self._thawed.set()
        self._drop_when: Callable[[bytes], bool] | None = None
        self._freeze_on_drop = False
        self._drop_every = False
        self._half_open_links = 0  # links numbered up to this hold every byte for good
        self.dropped_chunks: list[bytes] = []
        self._hold_when: Callable[[bytes], bool] | None = None
        self.held_chunks: list[bytes] = []
        self._released = trio.Event()
        self.link_times: list[float] = []  # when each link was accepted, on the test's Trio clock

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/worker"

    async def serve(self, task_status: trio.TaskStatus[Proxy] = trio.TASK_STATUS_IGNORED) -> None:
        await serve_locally(self, self._link, task_status)

    def sever(self) -> None:
        for scope in list(self._scopes):
            scope.cancel()

    def retarget(self, port: int) -> None:
        self.target_port = port

    def freeze(self) -> None:
        self._thawed = trio.Event()

    def thaw(self) -> None:
        self._thawed.set()

    def half_open(self) -> None:
        self._half_open_links = self.links

    def hold_when(self, predicate: Callable[[bytes], bool]) -> None:
        """Hold server→worker chunks from the first one ``predicate`` matches until :meth:`release`."""
        self._hold_when, self.held_chunks, self._released = predicate, [], trio.Event()

    def release(self) -> None:
        """Send the held chunks, in one write, and forward as usual from then on."""
        self._hold_when = None
        self._released.set()

    def drop_when(self, predicate: Callable[[bytes], bool] | None, *, then_freeze: bool = False,
                  every: bool = False) -> None:
        """Sever the link instead of forwarding the first matching chunk (``every``: each one, on every link);
        ``then_freeze`` also holds new links."""
        self._drop_when = predicate
        self._freeze_on_drop = then_freeze
        self._drop_every = every

    async def _link(self, client: trio.SocketStream) -> None:
        self.links += 1
        number = self.links
        self.link_times.append(trio.current_time())
        try:
            upstream = await trio.open_tcp_stream("127.0.0.1", self.target_port)
        except OSError:
            await trio.aclose_forcefully(client)
            return
        with trio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, client, upstream, None, scope, number)
                    nursery.start_soon(self._pump, upstream, client, self, scope, number)
            finally:
                self._scopes.discard(scope)
        await trio.aclose_forcefully(client)
        await trio.aclose_forcefully(upstream)

    async def _hold(self, source: trio.SocketStream, first: bytes) -> bytes:
        """Keep reading ``source`` into ``held_chunks`` until :meth:`release`; all of it, joined."""
        self.held_chunks = [first]

        async def gather() -> None:
            while data := await source.receive_some(65536):  # a cancelled receive takes no bytes
                self.held_chunks.append(data)
            await trio.sleep_forever()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(gather)
            await self._released.wait()
            nursery.cancel_scope.cancel()
        return b"".join(self.held_chunks)

    async def _pump(self, source: trio.SocketStream, sink: trio.SocketStream, inspect: Proxy | None,
                    scope: trio.CancelScope, number: int) -> None:
        try:
            while True:
                data = await source.receive_some(65536)
                if not data:
                    break
                await self._thawed.wait()
                if number <= self._half_open_links:
                    await trio.sleep_forever()
                if inspect is not None and self._hold_when is not None and self._hold_when(data):
                    data = await self._hold(source, data)
                if inspect is not None and self._drop_when is not None and self._drop_when(data):
                    self.dropped_chunks.append(data)
                    if not self._drop_every:
                        self._drop_when = None
                    if self._freeze_on_drop:
                        self.freeze()
                    break
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()


async def serve_locally(server: Any, handler: Callable[[trio.SocketStream], Any],
                        task_status: trio.TaskStatus[Any]) -> None:
    """Serve ``handler`` on a free port of 127.0.0.1, set as ``server.port``; started with ``server``."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    server.port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        task_status.started(server)
        await trio.serve_listeners(handler, listeners, handler_nursery=nursery)


def url_of(service: Any) -> str:
    return f"ws://127.0.0.1:{service.worker_port}/v1/worker"


def ack_of(command: str) -> Callable[[bytes], bool]:
    """Matches a server chunk carrying the ack of ``command`` (task.finish, ...)."""
    needle = f'"command":"{command}"'.encode()
    return lambda data: needle in data


async def in_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Blocking producer calls run off the Trio thread that also runs the service."""
    return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs))


async def wait_for(predicate: Callable[[], Any], *, timeout: float = 15.0, what: str = "condition") -> Any:
    with trio.move_on_after(timeout):
        while True:
            value = predicate()
            if value:
                return value
            await trio.sleep(FAST_POLL_S)
    raise AssertionError(f"timed out waiting for {what}")


async def wait_state(client: Client, task_id: str, states: set[str] | str, *, timeout: float = 15.0) -> dict:
    wanted = {states} if isinstance(states, str) else set(states)
    view: dict = {}
    with trio.move_on_after(timeout):
        while True:
            view = await in_thread(client.get, task_id)
            if view["state"] in wanted:
                return view
            await trio.sleep(FAST_POLL_S * 2)
    raise AssertionError(f"task {task_id} never reached {wanted}: {json.dumps(view)[:600]}")


#: The event loops a test worker may run on: each SDK test that runs a worker runs on each of them.
WORKER_BACKENDS = ("asyncio", "trio")


class Gate:
    """An event any thread and any event loop may set and wait for.

    Handlers run on the worker's loop, which for an asyncio worker is
    another thread than the test's Trio loop (the service's); neither
    loop's own events may cross, so both sides poll a thread-safe flag.
    """

    def __init__(self) -> None:
        self._flag = threading.Event()

    def set(self) -> None:
        self._flag.set()

    def is_set(self) -> bool:
        return self._flag.is_set()

    async def wait(self) -> None:
        while not self._flag.is_set():
            await anyio.sleep(0.005)


class RunningWorker:
    """A :class:`Worker` running on its backend, as the test sees it.

    Attribute reads go to the worker (stats, credentials, url ... are
    plain values, safe to read from the test's thread); ``drain`` and
    ``stop`` are called on the worker's own loop. ``returned`` is set
    once ``run()`` has returned (``error`` is what it raised, if anything).
    """

    def __init__(self, worker: Worker, backend: str) -> None:
        self.worker = worker
        self.backend = backend
        self.returned = Gate()
        self.error: BaseException | None = None
        self.portal: anyio.from_thread.BlockingPortal | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.worker, name)

    def _on_loop(self, fn: Callable[[], Any]) -> None:
        if self.portal is None:
            fn()
        elif not self.returned.is_set():
            self.portal.call(fn)

    def drain(self) -> None:
        self._on_loop(self.worker.drain)

    def stop(self) -> None:
        self._on_loop(self.worker.stop)

    def set_capacity(self, capacity: int) -> None:
        self._on_loop(lambda: self.worker.set_capacity(capacity))

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the worker to its end (in its loop); never raises: see ``error``."""
        try:
            await self.worker.run(task_status=task_status)
        except BaseException as exc:  # noqa: BLE001 - kept for the test to assert on
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                raise
            self.error = exc
        finally:
            self.returned.set()


async def start_worker(nursery: trio.Nursery, worker: Worker, backend: str, *, wait: bool = True,
                       portals: list | None = None) -> RunningWorker:
    """Run ``worker`` on ``backend``: "trio" in the test's own nursery, "asyncio"/"uvloop" on a loop in a thread."""
    handle = RunningWorker(worker, backend)
    if backend == "trio":
        if wait:
            await nursery.start(handle.run)
        else:
            nursery.start_soon(handle.run)
        return handle
    options = {"use_uvloop": True} if backend == "uvloop" else {}
    manager = anyio.from_thread.start_blocking_portal("asyncio", options)
    handle.portal = await trio.to_thread.run_sync(manager.__enter__)
    assert portals is not None
    portals.append((handle, manager))
    if wait:
        await trio.to_thread.run_sync(handle.portal.start_task, handle.run)
    else:
        handle.portal.start_task_soon(handle.run)
    return handle


async def stop_workers(portals: list) -> None:
    """Stop every worker in a thread and close its loop (the service is still up meanwhile)."""
    for handle, manager in portals:
        handle.stop()
        await trio.to_thread.run_sync(lambda: manager.__exit__(None, None, None))


def gated_registry(started: Gate, release: Gate, calls: list[str]) -> Registry:
    """billing/invoice.send handlers that record their task, say they started, then wait for ``release``."""
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext) -> dict:
        calls.append(task.task_id)
        started.set()
        await release.wait()
        return {"sent": True}

    return registry
