"""Scenario tests: real sessions, real database, Trio's virtual clock.

The service reads "now" from Trio's clock (``ServiceClock``), so with a
``MockClock`` every timeout — offer lapse, lease expiry, cancel grace,
permit quarantine, backoff, promotion — happens in virtual time while the
database, the sockets and the transactions are real. ``autojump_threshold``
is a little above zero so the clock only jumps when the service is really
idle, not while a transaction is on its way through a worker thread.
"""

from __future__ import annotations

import itertools
import json

import pytest
import trio
import trio.testing
import trio_websocket

from pulse_trio.client import Client
from pulse_trio.client.producer import build_task

AUTOJUMP_THRESHOLD_S = 0.03


@pytest.fixture
def virtual_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=AUTOJUMP_THRESHOLD_S)


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
def scenario_service(start_service):
    """``await scenario_service(**settings)``: an instance for the virtual clock.

    pytest-trio only runs a test on a clock that the *test function itself*
    takes as an argument: every scenario test must list ``virtual_clock``.
    """

    async def start(**overrides):
        return await start_service(**{**SCENARIO_SETTINGS, **overrides})

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
def submit(db):
    """``await submit(service, queue, kind, **options)``: a task submitted at the service's virtual now."""
    client = Client(db)

    async def run(service, queue="q", kind="k", payload=None, **options):
        now = service.ctx.clock.now()
        task = build_task(queue, kind, payload, now=now, **options)
        done = await trio.to_thread.run_sync(lambda: client.submit_many([task], now=now))
        service.ctx.hub.wake()
        return done[0]

    yield run
    client.close()


@pytest.fixture
def client(db):
    with Client(db) as c:
        yield c
