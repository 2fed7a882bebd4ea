"""A scripted pulse.worker.v1 peer, for what the real server never does.

The real service never offers a keyed task to a session that did not
declare ``concurrency_keys``, never sends ``retry_of`` equal to the task's
own id, never answers ``task.start`` with a lease-shaped body. To prove the
SDK refuses such frames anyway, a test plays the server itself, frame by
frame, with plain JSON (so it can write frames the contract classes would
refuse to build).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from typing import Any

import trio
import trio_websocket

from pulse_trio.contract.grammar import format_time, new_id, new_secret


def now() -> str:
    return format_time(dt.datetime.now(dt.timezone.utc))


def later(seconds: float = 30) -> str:
    return format_time(dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=seconds))


class Peer:
    """One accepted worker connection, driven by the test."""

    def __init__(self, ws: trio_websocket.WebSocketConnection) -> None:
        self.ws = ws
        self.session_id = new_id("ses_")
        self.instance_id = new_id("ins_")
        self.epoch = 7
        self._ids = (f"s-{n}" for n in itertools.count(1))
        self.done = trio.Event()

    async def recv(self, timeout: float = 5.0) -> dict[str, Any]:
        with trio.fail_after(timeout):
            return json.loads(await self.ws.get_message())

    async def send(self, frame: dict[str, Any]) -> None:
        await self.ws.send_message(json.dumps(frame))

    def frame(self, type_: str, body: dict[str, Any] | None = None, reply_to: str | None = None,
              **extra: Any) -> dict[str, Any]:
        frame: dict[str, Any] = {"protocol_version": "1", "type": type_, "id": next(self._ids),
                                 "session_id": self.session_id}
        if reply_to is not None:
            frame["reply_to"] = reply_to
        if body is not None:
            frame["body"] = body
        frame.update(extra)
        return frame

    def state(self, capacity: int = 0, sequence: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"instance_id": self.instance_id, "epoch": str(self.epoch)}
        if sequence is not None:
            body["sequence"] = sequence
        body.update(capacity=capacity, drain=False, active_leases=0, lease_ttl_ms=30000, start_timeout_ms=30000,
                    limits={"max_frame_bytes": 524288, "max_result_bytes": 262144}, server_time=now())
        return body

    async def welcome(self) -> dict[str, Any]:
        """Read the hello and answer it; returns the hello."""
        hello = await self.recv()
        assert hello["type"] == "worker.hello", hello
        body = self.state()
        body = {"instance_id": body.pop("instance_id"), "instance_secret": new_secret(), **body}
        await self.send(self.frame("worker.welcome", body, reply_to=hello["id"]))
        return hello

    async def accept_capacity(self) -> dict[str, Any]:
        request = await self.recv()
        assert request["type"] == "worker.capacity", request
        body = request["body"]
        await self.send(self.frame("ack", self.state(body["capacity"], body["sequence"]), reply_to=request["id"]))
        return request

    def offer(self, **task_fields: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """A task.assign frame and its lease (with the secret the worker must echo)."""
        task_id = new_id("tsk_")
        task = {"task_id": task_id, "queue": "billing", "kind": "invoice.send", "payload": {"invoice": 1},
                "attempt": 1, "max_attempts": 3, "idempotency_key": task_id, "created_at": now(),
                "due_at": now(), **task_fields}
        lease = {"lease_id": new_id("lse_"), "task_id": task_id, "lease_secret": new_secret(), "revision": "1",
                 "epoch": str(self.epoch), "state": "OFFERED", "expires_at": later()}
        return self.frame("task.assign", {"task": task, "lease": lease}), lease

    def command_result(self, request: dict[str, Any], *, lease: bool = True) -> dict[str, Any]:
        body = request["body"]
        result: dict[str, Any] = {"receipt": {
            "command": request["type"], "task_id": body["task_id"], "lease_id": body["lease_id"],
            "revision": body["revision"], "committed_at": now(), "duplicate": False}}
        if lease:
            result["lease"] = {"lease_id": body["lease_id"], "task_id": body["task_id"],
                               "revision": str(int(body["revision"]) + 1), "epoch": str(self.epoch),
                               "state": "RUNNING", "expires_at": later()}
        return self.frame("ack", result, reply_to=request["id"])

    def error(self, request: dict[str, Any], code: str, fatal: bool = False) -> dict[str, Any]:
        return self.frame("error", reply_to=request["id"], error={"code": code, "message": code, "fatal": fatal})


class ScriptedServer:
    """Accepts worker connections and hands each to the test as a :class:`Peer`."""

    def __init__(self) -> None:
        self.port = 0
        self._send, self._receive = trio.open_memory_channel[Peer](4)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/worker"

    async def serve(self, task_status: trio.TaskStatus[ScriptedServer] = trio.TASK_STATUS_IGNORED) -> None:
        async def handle(request: trio_websocket.WebSocketRequest) -> None:
            ws = await request.accept(subprotocol="pulse.worker.v1")
            peer = Peer(ws)
            await self._send.send(peer)
            await peer.done.wait()

        async def started(task_status: trio.TaskStatus) -> None:
            await trio_websocket.serve_websocket(handle, "127.0.0.1", 0, ssl_context=None,
                                                 task_status=task_status)

        async with trio.open_nursery() as nursery:
            server = await nursery.start(started)
            self.port = server.port
            task_status.started(self)

    async def next_peer(self, timeout: float = 5.0) -> Peer:
        with trio.fail_after(timeout):
            return await self._receive.receive()
