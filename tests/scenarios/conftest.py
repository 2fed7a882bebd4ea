"""Scenario tests: real sessions, real database, Trio's virtual clock.

Each scenario service gets a virtual ``ServiceClock`` (one origin per test,
so every instance in a test agrees about "now"), so with a
``MockClock`` every timeout — offer lapse, lease expiry, cancel grace,
permit quarantine, backoff, promotion — happens in virtual time while the
database, the sockets and the transactions are real.

The clock only jumps when the service is really idle: ``autojump_threshold``
is a little above zero (frames on loopback sockets are not "idle"), and
:func:`settled_clock` refuses to jump while any transaction is in a worker
thread (a service's store, the producer client, the test's own threads).
Without that guard a slow commit on a loaded machine lets virtual seconds
pass in the middle of a request, and a 5 s start timeout can lapse between
an offer and its start.
"""

from __future__ import annotations

import contextlib
import itertools
import json

import pytest
import trio
import trio.testing
import trio_websocket

from pulse_trio.client import Client
from pulse_trio.client.producer import build_task
from pulse_trio.server.clock import ServiceClock, virtual_origin

AUTOJUMP_THRESHOLD_S = 0.03
RECEIVE_TIMEOUT_S = 300.0

# Scenario modules share helpers (``from scenario_support import ...``): this folder is on the pythonpath.
from ownership_support import session_owners  # noqa: F401  (autouse: only its own tasks change a session)
from scenario_support import eventually, offered, running


def settled_clock(threshold: float = AUTOJUMP_THRESHOLD_S) -> trio.testing.MockClock:
    """A MockClock that autojumps only while no thread is running a transaction.

    ``clock.limiters`` holds the CapacityLimiters of the services' stores
    (added by ``scenario_service``); Trio's default thread limiter covers the
    producer client and everything else sent through ``trio.to_thread``.
    MockClock is final, so the guard wraps the one hook the run loop calls
    when it has been idle for the threshold (``_autojump``, trio 0.35).
    """
    clock = trio.testing.MockClock(autojump_threshold=threshold)
    clock.limiters = []
    jump = clock._autojump

    def threads_busy() -> bool:
        if trio.to_thread.current_default_thread_limiter().borrowed_tokens:
            return True
        return any(limiter.borrowed_tokens for limiter in clock.limiters)

    def guarded_autojump() -> None:
        if not threads_busy():
            jump()

    clock.threads_busy = threads_busy
    clock._autojump = guarded_autojump
    return clock


@pytest.fixture
def virtual_clock() -> trio.testing.MockClock:
    return settled_clock()


class Worker:
    """A raw pulse.worker.v1 client for scenarios: frames in, frames out, nothing hidden."""

    def __init__(self, ws: trio_websocket.WebSocketConnection) -> None:
        self.ws = ws
        self.session_id: str | None = None
        self.welcome: dict | None = None
        self._ids = itertools.count(1)
        self._sequence = itertools.count(1)
        self.pushes: list[dict] = []

    async def send(self, type_: str, body: dict) -> str:
        frame_id = f"c{next(self._ids)}"
        frame = {"protocol_version": "1", "type": type_, "id": frame_id, "body": body}
        if self.session_id is not None:
            frame["session_id"] = self.session_id
        await self.ws.send_message(json.dumps(frame))
        return frame_id

    async def receive(self) -> dict:
        # Virtual seconds: a scenario that waits this long for a frame is stuck, not slow.
        with trio.fail_after(RECEIVE_TIMEOUT_S):
            return json.loads(await self.ws.get_message())

    async def answer(self, frame_id: str) -> dict:
        """The ack or error for ``frame_id``; pushes that arrive first are kept in ``pushes``."""
        while True:
            frame = await self.receive()
            if frame.get("reply_to") == frame_id:
                return frame
            self.pushes.append(frame)

    async def push(self, type_: str) -> dict:
        """The next push of ``type_`` (task.assign / task.cancel)."""
        for i, frame in enumerate(self.pushes):
            if frame["type"] == type_:
                return self.pushes.pop(i)
        while True:
            frame = await self.receive()
            if frame["type"] == type_:
                return frame
            self.pushes.append(frame)

    async def listen(self, seconds: float) -> list[dict]:
        """Keep reading for ``seconds`` (virtual); everything that arrived is kept in ``pushes``."""
        with trio.move_on_after(seconds):
            while True:
                self.pushes.append(json.loads(await self.ws.get_message()))
        return self.pushes

    def pushed(self, type_: str) -> list[dict]:
        """The kept pushes of ``type_`` (not consumed)."""
        return [f for f in self.pushes if f["type"] == type_]

    async def hello(self, queues=("q",), **options) -> dict:
        body = {"worker_name": "scenario", "subscriptions": [{"queue": q} for q in queues], **options}
        reply = await self.answer(await self.send("worker.hello", body))
        assert reply["type"] == "worker.welcome", reply
        self.session_id, self.welcome = reply["session_id"], reply["body"]
        return reply

    async def capacity(self, capacity: int, drain: bool = False) -> dict:
        return await self.answer(await self.send("worker.capacity", {
            "sequence": str(next(self._sequence)), "capacity": capacity, "drain": drain}))

    async def command(self, type_: str, lease: dict, revision: str, **extra) -> dict:
        body = {"task_id": lease["task_id"], "lease_id": lease["lease_id"], "lease_secret": lease["lease_secret"],
                "revision": revision, **extra}
        return await self.answer(await self.send(type_, body))

    async def resume(self, old: Worker, lease: dict) -> dict:
        return await self.answer(await self.send("worker.resume", {
            "instance_id": old.welcome["instance_id"], "instance_secret": old.welcome["instance_secret"],
            "task_id": lease["task_id"], "lease_id": lease["lease_id"], "lease_secret": lease["lease_secret"]}))


#: Timers and the dispatcher poll every ``poll_interval`` of *virtual* time;
#: at 0.5 s the clock can jump in big steps, so a 30 s timeout costs a second
#: of real time, while every deadline is still met within half a second.
SCENARIO_SETTINGS = {"poll_interval": 0.5}


@pytest.fixture
def scenario_service(start_service, virtual_clock):
    """``await scenario_service(**settings)``: an instance for the virtual clock.

    pytest-trio only runs a test on a clock that the *test function itself*
    takes as an argument: every scenario test must list ``virtual_clock``.
    """

    origin = []  # one per test: every instance of the test agrees about "now", whenever it started

    async def start(**overrides):
        if not origin:
            origin.append(virtual_origin())
        handle = await start_service(clock=ServiceClock(virtual=True, origin=origin[0]),
                                     **{**SCENARIO_SETTINGS, **overrides})
        virtual_clock.limiters.append(handle.store.limiter)
        return handle

    return start


@pytest.fixture
def connect_worker(token_factory):
    """``async with connect_worker(service, queues=...) as worker``: hello'd, capacity not yet declared."""
    token = token_factory("worker")

    def connect(service, queues=("q",), **hello):
        class _Ctx:
            async def __aenter__(self):
                self._cm = trio_websocket.open_websocket(
                    "127.0.0.1", service.worker_port, "/v1/worker", use_ssl=False,
                    subprotocols=["pulse.worker.v1"], extra_headers=[(b"authorization", f"Bearer {token}".encode())])
                worker = Worker(await self._cm.__aenter__())
                await worker.hello(queues, **hello)
                return worker

            async def __aexit__(self, *exc):
                return await self._cm.__aexit__(*exc)

        return _Ctx()

    return connect


@pytest.fixture
def holding(connect_worker):
    """``async with holding(service, **hello) as (worker, held)``: a worker of capacity 1 and its first lease.

    The lease is started (the start acked); ``start=False`` leaves it offered.
    """

    @contextlib.asynccontextmanager
    async def hold(service, start=True, **hello):
        async with connect_worker(service, **hello) as worker:
            await worker.capacity(1)
            yield worker, await (running if start else offered)(worker)

    return hold


@pytest.fixture
def submit(db):
    """``await submit(service, queue, kind, **options)``: a task submitted at the service's virtual now.

    The priority step is the cluster's, as for every producer (a service
    started with ``priority_step=`` wrote it). ``submit.many(service,
    [options, ...])`` submits several in one transaction.
    """
    client = Client(db)

    async def many(service, specs):
        now = service.clock.now()
        tasks = [build_task(spec.pop("queue", "q"), spec.pop("kind", "k"), spec.pop("payload", None), now=now, **spec)
                 for spec in (dict(s) for s in specs)]
        done = await trio.to_thread.run_sync(lambda: client.submit_many(tasks, now=now))
        service.hub.wake()
        return done

    async def run(service, queue="q", kind="k", payload=None, **options):
        return (await many(service, [dict(queue=queue, kind=kind, payload=payload, **options)]))[0]

    run.many = many
    yield run
    client.close()


@pytest.fixture
def one_task(scenario_service, operator, submit):
    """``service, ops, task = await one_task(settings, **task_options)``: an instance, its operator and one task."""

    async def start(settings, **task_options):
        service = await scenario_service(**settings)
        return service, operator(service), await submit(service, **task_options)

    return start


@pytest.fixture
def client(db):
    with Client(db) as c:
        yield c


@pytest.fixture
def operator(db):
    """``ops = operator(service)``: the producer ``Client`` on the service's virtual clock.

    Its ``cancel``/``retry``/``get`` are the real client methods; only "now"
    is injected (the service's virtual now, read in the Trio thread); the
    cancel grace is the cluster's, as for every producer.
    """
    made: list[Client] = []

    class Ops:
        def __init__(self, service) -> None:
            self.service = service
            self.client = Client(db)
            made.append(self.client)

        async def _call(self, fn):
            now = self.service.clock.now()
            self.client.now = lambda: now  # an instance attribute shadows the staticmethod
            return await trio.to_thread.run_sync(fn)

        async def cancel(self, task_id: str, reason: str = "operator") -> dict:
            return await self._call(lambda: self.client.cancel(task_id, reason=reason, requested_by="scenario"))

        async def retry(self, task_id: str) -> dict:
            return await self._call(lambda: self.client.retry(task_id))

        async def get(self, task_id: str) -> dict:
            return await trio.to_thread.run_sync(lambda: self.client.get(task_id))

        async def state(self, task_id: str) -> str:
            return (await self.get(task_id))["state"]

        async def wait_state(self, task_id: str, *states: str, timeout: float = 120.0) -> dict:
            async def probe():
                view = await self.get(task_id)
                return view if view["state"] in states else None
            return await eventually(probe, timeout=timeout)

    yield Ops
    for c in made:
        c.close()
