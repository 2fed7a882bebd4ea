"""An SDK worker on its own event loop in a background thread: for tests and scripts whose loop is another.

A test written with pytest-asyncio, AnyIO's plugin or pytest-trio runs on
its own loop; the worker that serves it runs here on a loop of its own
(``anyio.run`` in that thread), so neither cares which the other uses. It uses
the SDK's public API only (``Worker``, ``Registry``)::

    with BackgroundWorker(url, token, registry, capacity=4) as worker:
        ...   # submit tasks; the worker runs them
    # leaving drains it: running tasks finish, then its loop ends
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import threading

import anyio
import anyio.to_thread

from pulse_trio.sdk import Registry, Worker

START_TIMEOUT_S = 30.0
DRAIN_TIMEOUT_S = 10.0
#: How long past the drain a stop waits for the thread before leaving it (a daemon) behind.
STOP_SLACK_S = 5.0


def registry_for(queue: str, handlers: Registry | Mapping[str, Callable[..., Any]]) -> Registry:
    """``handlers`` as a registry: a Registry as it is, or ``{kind: handler}`` for ``queue`` (``def`` in a thread)."""
    if isinstance(handlers, Registry):
        return handlers
    registry = Registry()
    for kind, fn in handlers.items():
        registry.add(queue, kind, fn)
    return registry


class _FirstConnection:
    """What ``Worker.run`` reports its first connection to (its ``task_status``): a thread-safe event."""

    def __init__(self, connected: threading.Event) -> None:
        self.connected = connected

    def started(self, value: object = None) -> None:
        self.connected.set()


class BackgroundWorker:
    """A :class:`~pulse_trio.sdk.Worker` running in a thread until :meth:`stop` (or the ``with`` ends).

    The thread runs its own event loop (``anyio.run``); the caller and the
    loop meet only through thread-safe events, never a call into the other's
    loop, so the caller may itself be inside any event loop (a test's).
    """

    def __init__(self, url: str, token: str, registry: Registry, *, backend: str = "asyncio",
                 **options: Any) -> None:
        self.url, self.token, self.registry = url, token, registry
        self.backend = backend
        self.options = options
        self.worker: Worker | None = None
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._connected = threading.Event()
        self._stop_asked = threading.Event()
        self._drain = True
        self._drain_timeout = DRAIN_TIMEOUT_S

    def start(self, timeout: float = START_TIMEOUT_S) -> BackgroundWorker:
        """Start the thread and the worker; return once it is connected (RuntimeError if it cannot be)."""
        self._thread = threading.Thread(target=self._main, name="pulse-background-worker", daemon=True)
        self._thread.start()
        try:
            connected = self._connected.wait(timeout)
        except BaseException:  # interrupted (a test's time cap, Ctrl-C): the thread must not go on reconnecting
            self._end(drain=False, timeout=DRAIN_TIMEOUT_S)
            raise
        if isinstance(self.error, ValueError):  # an option the Worker refused as it was made: nothing ran
            self._end(drain=False, timeout=DRAIN_TIMEOUT_S)
            raise self.error
        if not connected or self.error is not None:
            self.stop(drain=False)
            raise RuntimeError(f"the worker did not connect to {self.url} within {timeout:g} s") from self.error
        return self

    def _main(self) -> None:
        try:
            anyio.run(self._serve, backend=self.backend)
        except BaseException as exc:  # kept for the caller: raised by stop()
            self.error = exc
            self._connected.set()

    async def _serve(self) -> None:
        # Built on its own loop's thread: the worker's primitives belong to that loop.
        worker = self.worker = Worker(self.url, self.token, self.registry, **self.options)
        ran = anyio.Event()

        async def run() -> None:
            try:
                await worker.run(task_status=_FirstConnection(self._connected))
            finally:
                ran.set()

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            # A stop is heard from the start, connected or not: a start that gave up stops the worker too.
            await anyio.to_thread.run_sync(self._stop_asked.wait, abandon_on_cancel=True)
            if self._drain and self._connected.is_set():
                worker.drain()
                with anyio.move_on_after(self._drain_timeout):
                    await ran.wait()
            worker.stop()

    def stop(self, *, drain: bool = True, timeout: float = DRAIN_TIMEOUT_S) -> None:
        """Drain (running tasks finish) or stop at once, end the loop; a failure of the worker is raised.

        A thread still alive after the wait (an ``async def`` handler that
        blocks the loop hears no stop) is raised too, never left to run on
        into whatever comes next; a later ``stop()`` waits for it again.
        """
        thread = self._thread
        if not self._end(drain=drain, timeout=timeout):
            return
        assert thread is not None
        if thread.is_alive():
            self._thread = thread
            raise RuntimeError(f"the background worker did not stop within {timeout + STOP_SLACK_S:g} s: "
                               "a handler may block its event loop")
        if self.error is not None:
            raise RuntimeError("the background worker failed") from self.error

    def _end(self, *, drain: bool, timeout: float) -> bool:
        """Ask the loop to end and wait for its thread; False if it was not running."""
        thread, self._thread = self._thread, None
        if thread is None:
            return False
        self._drain, self._drain_timeout = drain, timeout
        self._stop_asked.set()
        thread.join(timeout + STOP_SLACK_S)
        return True

    def __enter__(self) -> BackgroundWorker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_all(workers: Iterable[BackgroundWorker]) -> None:
    """Stop every one of ``workers``, even past one that failed; then raise: one failure as it is, several grouped.

    A worker left running after another's failure would go on reconnecting
    into whatever runs next (a test's later tests).
    """
    failures: list[Exception] = []
    for worker in workers:
        try:
            worker.stop()
        except Exception as exc:
            failures.append(exc)
    if len(failures) == 1:
        raise failures[0]
    if failures:
        raise ExceptionGroup("background workers failed", failures)
