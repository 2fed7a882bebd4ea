"""Test helpers for the HTTP API: a real HTTP client and a minimal worker.

The client is the standard library's ``http.client`` run in a worker
thread, so every request crosses a real socket into hypercorn; nothing is
called in-process. Imported by name (``import http_support``): this folder
is on the ``pythonpath`` of pyproject.toml (the suite runs with importlib mode).
"""

from __future__ import annotations

import dataclasses
import http.client as httpclient
import json
from typing import Any

import trio
import trio_websocket


def _strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"duplicate keys in a response: {keys}"
    return dict(pairs)


@dataclasses.dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        assert self.headers.get("content-type", "").startswith("application/json"), self.headers
        return json.loads(self.body, object_pairs_hook=_strict_object)

    @property
    def error(self) -> dict[str, str]:
        """The ``error`` object of an error reply, checked for its exact shape (422 also names the field)."""
        doc = self.json()
        shape = {"code", "message", "field"} if self.status == 422 else {"code", "message"}
        assert set(doc) == {"error"} and set(doc["error"]) == shape, doc
        return doc["error"]


class Http:
    """``await http.post("/v1/tasks", token=..., json={...})`` over a real connection."""

    def __init__(self, port: int) -> None:
        self.port = port

    def _request_sync(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> Reply:
        conn = httpclient.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
        finally:
            conn.close()

    async def request(self, method: str, path: str, *, token: str | None = None, json_body: Any = None,
                      body: bytes | str | None = None, headers: dict[str, str] | None = None) -> Reply:
        all_headers = dict(headers or {})
        if token is not None:
            all_headers["Authorization"] = f"Bearer {token}"
        if json_body is not None:
            body = json.dumps(json_body)
            all_headers.setdefault("Content-Type", "application/json")
        if isinstance(body, str):
            body = body.encode("utf-8")
        return await trio.to_thread.run_sync(self._request_sync, method, path, body, all_headers)

    async def get(self, path: str, **kwargs: Any) -> Reply:
        return await self.request("GET", path, **kwargs)

    async def post(self, path: str, **kwargs: Any) -> Reply:
        return await self.request("POST", path, **kwargs)


# -- a minimal worker over the real worker endpoint -----------------------------------------------

class RawWorker:
    """Just enough of pulse.worker.v1 to run tasks end to end: hello, capacity, start, finish."""

    def __init__(self, ws: trio_websocket.WebSocketConnection) -> None:
        self.ws = ws
        self.session_id: str | None = None
        self.welcome: dict[str, Any] = {}
        self.frames: list[str] = []  # every frame received, raw (secrets included)
        self.assigned: list[dict[str, Any]] = []
        self._ids = 0

    def _id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}{self._ids}"

    async def receive(self) -> dict[str, Any]:
        with trio.fail_after(10):
            text = await self.ws.get_message()
        self.frames.append(text)
        frame = json.loads(text)
        if frame["type"] == "task.assign":
            self.assigned.append(frame["body"])
        return frame

    async def request(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        frame_id = self._id(kind.split(".")[1][0])
        frame = {"protocol_version": "1", "type": kind, "id": frame_id, "body": body}
        if self.session_id is not None:
            frame["session_id"] = self.session_id
        await self.ws.send_message(json.dumps(frame))
        while True:
            answer = await self.receive()
            if answer.get("reply_to") == frame_id:
                assert answer["type"] != "error", answer
                return answer["body"]

    async def register(self, queue: str, capacity: int = 1, name: str = "http-test", *, keys: bool = False,
                       also: tuple[str, ...] = ()) -> None:
        """Hello for ``queue`` (and the queues ``also`` names), then declare ``capacity``."""
        subscriptions = [{"queue": q} for q in (queue, *also)]
        hello = {"worker_name": name, "subscriptions": subscriptions, **({"concurrency_keys": True} if keys else {})}
        welcome = await self.request("worker.hello", hello)
        self.welcome = welcome
        self.session_id = json.loads(self.frames[-1])["session_id"]
        await self.request("worker.capacity", {"sequence": "1", "capacity": capacity, "drain": False})

    async def next_assignment(self) -> dict[str, Any]:
        while not self.assigned:
            await self.receive()
        return self.assigned.pop(0)

    async def run_one(self, result: Any, status: str = "SUCCEEDED", **finish: Any) -> dict[str, Any]:
        """Take the next assignment, start it, finish it ``status`` with ``result`` (and ``finish``'s fields)."""
        assign = await self.next_assignment()
        lease = assign["lease"]
        command = {"task_id": lease["task_id"], "lease_id": lease["lease_id"],
                   "lease_secret": lease["lease_secret"], "revision": lease["revision"]}
        started = await self.request("task.start", command)
        command["revision"] = started["lease"]["revision"]
        await self.request("task.finish", {**command, "status": status, "result": result, **finish})
        return assign
