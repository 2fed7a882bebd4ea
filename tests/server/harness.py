"""A raw ``pulse.worker.v1`` client for integration tests, over real sockets.

It is deliberately not the SDK: it speaks frames as dicts, so tests can send
anything, and it checks the server against the published contract on every
frame, whatever the test itself asserts:

* every frame it sends validates against ``#/$defs/clientFrame`` (unless a
  test sends raw text on purpose, with :meth:`Worker.send_text`);
* every frame it receives is strict JSON (no duplicate keys, no NaN), at most
  512 KiB of UTF-8, validates against ``#/$defs/serverFrame`` with format
  assertion, and obeys the envelope rules the schema cannot see: ``reply_to``
  names a pending request, an ack body has the shape of *its* request type
  (capacity -> welcome without secret, resume -> held lease, lease commands
  -> commandResult whose receipt echoes the command), ``session_id`` is the
  current session's (and absent only on a refused registration), server
  frame ids are unique, times carry exactly 6 fractional digits, nothing
  follows a fatal error but the close;
* pushes respect the session: ``task.assign`` only for subscribed
  queue/kinds, never while drained (after the drain ack), never a keyed task
  without the declaration, and never beyond the declared capacity.

``Worker`` objects are made by the ``connect`` fixture in ``conftest.py``;
tests import this module by name (``import harness``), which works under
``--import-mode=importlib`` because this folder is on the ``pythonpath`` of
pyproject.toml.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import importlib.resources
import json
import re
import ssl
from typing import Any

import trio
import trio_websocket
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SCHEMA_ID = "https://pulse-trio.dev/schemas/worker/v1/worker.schema.json"
SUBPROTOCOL = "pulse.worker.v1"
PATH = "/v1/worker"
MAX_FRAME_BYTES = 524_288
DEFAULT_TIMEOUT = 10.0
#: Callables that describe the running services (sessions, dispatcher, rows) for a wait's failure
#: message; the fixtures that start services register them (tests/server/conftest.py).
DIAGNOSTICS: list[Any] = []
def describe_services() -> str:
    """What the registered services and their database say now: a wait's failure names its cause."""
    parts = []
    for describe in DIAGNOSTICS:
        try:
            parts.append(describe())
        except Exception as exc:  # a diagnosis must never hide the failure it explains
            parts.append(f"(diagnosis failed: {exc!r})")
    return "".join(f"\n{part}" for part in parts)


TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
TIME_FIELDS = {"server_time", "expires_at", "cancel_requested_at", "committed_at", "created_at", "due_at",
               "grace_expires_at"}
ACK_SHAPE = {"worker.capacity": "welcome", "worker.resume": "lease", "task.start": "commandResult",
             "task.renew": "commandResult", "task.finish": "commandResult"}
#: Errors that may come without reply_to (the offending id could not be read,
#: or nothing was asked: a revoked token's permission_denied): docs/protocol.md §2 and §4.8.
UNSOLICITED = {"invalid_json", "hello_required", "server_shutting_down", "unsupported_version",
               "session_mismatch", "invalid_frame", "permission_denied"}
ABSENT = object()  # expect_error(reply_to=ABSENT): the frame must carry no reply_to
ANY = object()


class ContractViolation(AssertionError):
    """The server sent something the contract forbids."""


# -- schema -----------------------------------------------------------------------------

@functools.cache
def schema() -> dict[str, Any]:
    text = importlib.resources.files("pulse_trio.contract").joinpath("worker.schema.json").read_text("utf-8")
    return json.loads(text)


@functools.cache
def validator(definition: str) -> Draft202012Validator:
    registry = Registry().with_resource(SCHEMA_ID, Resource.from_contents(schema()))
    return Draft202012Validator({"$ref": f"{SCHEMA_ID}#/$defs/{definition}"}, registry=registry,
                                format_checker=Draft202012Validator.FORMAT_CHECKER)


def check(definition: str, instance: Any, what: str) -> None:
    errors = sorted(validator(definition).iter_errors(instance), key=lambda e: list(e.absolute_path))
    if errors:
        details = "; ".join(f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message[:300]}"
                            for e in errors[:5])
        raise ContractViolation(f"{what} does not validate against #/$defs/{definition}: {details}\n"
                                f"frame: {json.dumps(instance)[:2000]}")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ContractViolation(f"server frame has a duplicate key among {keys}")
    return dict(pairs)


def _no_constant(name: str) -> Any:
    raise ContractViolation(f"server frame contains {name}")


def strict_loads(text: str) -> Any:
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)


def _check_times(node: Any, path: str = "") -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("payload", "result"):
                continue  # integrator-defined JSON
            if key in TIME_FIELDS and not (isinstance(value, str) and TIME_RE.match(value)):
                raise ContractViolation(f"{path}/{key} = {value!r}: server times have exactly 6 fractional digits")
            _check_times(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _check_times(value, f"{path}/{i}")


def dumps(frame: Any) -> str:
    return json.dumps(frame, separators=(",", ":"), ensure_ascii=False)


# -- leases as the worker holds them ----------------------------------------------------

@dataclasses.dataclass
class Held:
    """One lease as this worker knows it: ids, secret, and the revision it holds."""

    task_id: str
    lease_id: str
    lease_secret: str
    revision: int
    state: str = "OFFERED"
    task: dict[str, Any] = dataclasses.field(default_factory=dict)

    def body(self, revision: int | None = None, **extra: Any) -> dict[str, Any]:
        return {"task_id": self.task_id, "lease_id": self.lease_id, "lease_secret": self.lease_secret,
                "revision": str(self.revision if revision is None else revision), **extra}


class ConnectionEnded(Exception):
    """The WebSocket closed while a frame was awaited."""

    def __init__(self, close: trio_websocket.CloseReason | None) -> None:
        super().__init__(f"connection closed: {close}")
        self.close = close


class Worker:
    """One raw connection. Create with the ``connect`` fixture."""

    def __init__(self, ws: trio_websocket.WebSocketConnection, stream: trio.abc.Stream, name: str) -> None:
        self.ws = ws
        self.stream = stream
        self.name = name
        self.session_id: str | None = None
        self.welcome: dict[str, Any] | None = None
        self.pending: dict[str, list[str]] = {}
        self.pending_bodies: dict[str, list[dict[str, Any]]] = {}
        self.buffer: collections.deque[dict[str, Any]] = collections.deque()
        self.received: list[dict[str, Any]] = []
        self.server_ids: set[str] = set()
        self.fatal: dict[str, Any] | None = None
        self.registration_refused = False
        self.subscriptions: dict[str, frozenset[str] | None] = {}
        self.concurrency_keys = False
        self.cancellation_notifications = False
        # capacity bookkeeping: (sequence, capacity, drain) in flight and applied
        self.sequence = 0
        self.applied_capacity = 0
        self.applied_sequence = 0
        self.capacity_bound = 0  # max of the applied and any in-flight capacity
        self.drained = False  # a drain:true was acknowledged and no drain:false sent since
        self.drain_in_flight = 0
        self.live: dict[str, Held] = {}  # leases this session holds (offered or running)
        self._n = 0
        self._done = trio.Event()
        self.closed_by_us = False

    # -- identity -------------------------------------------------------------------
    @property
    def instance_id(self) -> str:
        assert self.welcome is not None
        return self.welcome["instance_id"]

    @property
    def instance_secret(self) -> str:
        assert self.welcome is not None
        return self.welcome["instance_secret"]

    @property
    def epoch(self) -> int:
        assert self.welcome is not None
        return int(self.welcome["epoch"])

    def next_id(self, prefix: str = "m") -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    # -- sending --------------------------------------------------------------------
    def frame(self, type_: str, body: dict[str, Any] | None, *, id: str | None = None,
              session_id: Any = ANY) -> dict[str, Any]:
        frame: dict[str, Any] = {"protocol_version": "1", "type": type_, "id": id or self.next_id(type_[5:6])}
        sid = self.session_id if session_id is ANY else session_id
        if sid is not None and type_ != "worker.hello":
            frame["session_id"] = sid
        if body is not None:
            frame["body"] = body
        return frame

    async def send(self, frame: dict[str, Any]) -> str:
        """Send a frame that must be a valid client frame; returns its id."""
        check("clientFrame", frame, "a frame the harness was asked to send")
        self._expect_answer(frame["id"], frame["type"], frame.get("body") or {})
        await self.ws.send_message(dumps(frame))
        return frame["id"]

    async def send_valid_text(self, text: str) -> str:
        """Send a valid client frame spelled exactly as ``text`` (numbers keep their digits)."""
        frame = json.loads(text)
        check("clientFrame", frame, "a frame the harness was asked to send")
        self._expect_answer(frame["id"], frame["type"], frame.get("body") or {})
        await self.ws.send_message(text)
        return frame["id"]

    async def send_text(self, text: str | bytes, *, answer_id: str | None | object = ANY) -> None:
        """Send raw text (or bytes), unvalidated: a deliberately bad frame.

        When the frame's ``id`` is readable the server may answer it with an
        error (never an ack): that id is registered as pending with type ``?``.
        """
        if answer_id is ANY:
            answer_id = None
            if isinstance(text, str):
                try:
                    parsed = json.loads(text, parse_int=str, parse_float=str, parse_constant=str)
                    candidate = parsed.get("id") if isinstance(parsed, dict) else None
                    answer_id = candidate if isinstance(candidate, str) else None
                except (ValueError, RecursionError):
                    pass
        if answer_id is not None:
            self._expect_answer(answer_id, "?", {})
        await self.ws.send_message(text)

    def _expect_answer(self, id_: str, type_: str, body: dict[str, Any]) -> None:
        self.pending.setdefault(id_, []).append(type_)
        self.pending_bodies.setdefault(id_, []).append(body)
        if type_ == "worker.capacity":
            self.capacity_bound = max(self.capacity_bound, body["capacity"])
            if body["drain"]:
                self.drain_in_flight += 1
            else:
                self.drained = False  # from now on an assign may legitimately arrive

    # -- receiving ------------------------------------------------------------------
    async def _read(self, timeout: float) -> dict[str, Any]:
        with trio.fail_after(timeout):
            try:
                text = await self.ws.get_message()
            except trio_websocket.ConnectionClosed as exc:
                raise ConnectionEnded(exc.reason) from None
        if not isinstance(text, str):
            raise ContractViolation(f"server sent a binary frame: {text[:100]!r}")
        if len(text.encode("utf-8")) > MAX_FRAME_BYTES:
            raise ContractViolation(f"server frame of {len(text.encode())} bytes exceeds 512 KiB")
        frame = strict_loads(text)
        if self.fatal is not None:
            raise ContractViolation(f"frame after the fatal error {self.fatal}: {text[:500]}")
        check("serverFrame", frame, "a received frame")
        _check_times(frame)
        self._bookkeep(frame)
        self.received.append(frame)
        return frame

    def _bookkeep(self, frame: dict[str, Any]) -> None:
        type_ = frame["type"]
        if frame["id"] in self.server_ids:
            raise ContractViolation(f"server reused frame id {frame['id']!r}")
        self.server_ids.add(frame["id"])
        reply_to = frame.get("reply_to")
        request_type = None
        request_body: dict[str, Any] = {}
        if reply_to is not None:
            types = self.pending.get(reply_to)
            if not types:
                raise ContractViolation(f"{type_} replies to {reply_to!r}, which is not a pending request: {frame}")
            # an ack answers the request of its type; an error the latest one with that id
            index = -1
            if type_ != "error":
                wanted = [i for i, t in enumerate(types) if t != "?"]
                if not wanted:
                    raise ContractViolation(f"{type_} answers {reply_to!r}, which was an invalid frame: {frame}")
                index = wanted[0]
            request_type = types.pop(index)
            request_body = self.pending_bodies[reply_to].pop(index)
            if not types:
                del self.pending[reply_to], self.pending_bodies[reply_to]
        if type_ == "worker.welcome":
            if request_type != "worker.hello":
                raise ContractViolation(f"worker.welcome answers a {request_type}")
            if self.welcome is not None:
                raise ContractViolation("a second worker.welcome in one session")
            body = frame["body"]
            if "instance_secret" not in body or "sequence" in body:
                raise ContractViolation(f"welcome must show instance_secret and no sequence: {body}")
            if body["capacity"] != 0 or body["active_leases"] != 0:
                raise ContractViolation(f"a new session starts with capacity 0 and no leases: {body}")
            self.welcome = body
            self.session_id = frame["session_id"]
            return
        if type_ == "error":
            self._on_error(frame, request_type, request_body)
            return
        # Every other server frame is inside the session.
        if self.session_id is None or frame["session_id"] != self.session_id:
            raise ContractViolation(f"{type_} carries session_id {frame.get('session_id')!r}, "
                                    f"the session is {self.session_id!r}")
        if type_ == "ack":
            self._on_ack(frame, request_type, request_body)
        elif type_ == "task.assign":
            self._on_assign(frame["body"])
        elif type_ == "task.cancel":
            if not self.cancellation_notifications:
                raise ContractViolation("task.cancel to a session that did not opt in")

    def _on_error(self, frame: dict[str, Any], request_type: str | None, request_body: dict[str, Any]) -> None:
        error = frame["error"]
        if request_type == "worker.hello" and self.welcome is None:
            if "session_id" in frame:
                raise ContractViolation(f"an error refusing registration carries session_id: {frame}")
            self.registration_refused = True
        elif self.welcome is not None:
            if frame.get("session_id") != self.session_id:
                raise ContractViolation(f"an error inside the session must carry its session_id: {frame}")
        elif "session_id" in frame:
            raise ContractViolation(f"an error before registration carries a session_id: {frame}")
        if "reply_to" not in frame and error["code"] not in UNSOLICITED:
            raise ContractViolation(f"{error['code']} without reply_to: {frame}")
        if error["code"] == "internal" and "retry_after_ms" not in error:
            raise ContractViolation(f"internal without retry_after_ms: {frame}")
        if error["fatal"]:
            self.fatal = frame
        if request_type == "worker.capacity" and request_body.get("drain"):
            self.drain_in_flight -= 1
        if request_type in ("task.start", "task.renew", "task.finish", "worker.resume"):
            if error["code"] in ("lease_expired", "lease_not_owned", "task_cancelled") \
                    and request_type != "worker.resume":
                self.live.pop(request_body.get("lease_id"), None)

    def _on_ack(self, frame: dict[str, Any], request_type: str | None, request_body: dict[str, Any]) -> None:
        body = frame["body"]
        if request_type not in ACK_SHAPE:
            raise ContractViolation(f"ack to a {request_type}")
        check(ACK_SHAPE[request_type], body, f"the ack to {request_type}")
        if request_type == "worker.capacity":
            if "instance_secret" in body:
                raise ContractViolation("a capacity ack shows instance_secret")
            assert self.welcome is not None
            if body["instance_id"] != self.instance_id or body["epoch"] != self.welcome["epoch"]:
                raise ContractViolation(f"capacity ack for another instance: {body}")
            if request_body.get("drain"):
                self.drain_in_flight -= 1
            sent = int(request_body["sequence"])
            if sent > self.applied_sequence:  # newer: must be applied exactly
                if (body.get("sequence"), body["capacity"], body["drain"]) != (
                        str(sent), request_body["capacity"], request_body["drain"]):
                    raise ContractViolation(f"capacity {request_body} not applied: ack {body}")
                self.applied_sequence = sent
                self.applied_capacity, self.drained = body["capacity"], body["drain"]
            else:  # stale: changes nothing, shows the current state
                shown = (int(body.get("sequence", "0")), body["capacity"], body["drain"])
                if shown != (self.applied_sequence, self.applied_capacity, self.drained):
                    raise ContractViolation(f"stale capacity {request_body} must show the current state "
                                            f"{self.applied_sequence, self.applied_capacity, self.drained}: {body}")
            self.capacity_bound = max([self.applied_capacity] + [b["capacity"] for bs in self.pending_bodies.values()
                                                         for b in bs if "capacity" in b and "sequence" in b])
            return
        if body.get("lease") is not None and body["lease"].get("epoch") != str(self.epoch):
            raise ContractViolation(f"a held lease must carry this session's epoch {self.epoch}: {body}")
        if request_type == "worker.resume":
            if (body["task_id"], body["lease_id"]) != (request_body["task_id"], request_body["lease_id"]):
                raise ContractViolation(f"resume ack for another lease: {body}")
            if body["epoch"] != str(self.epoch):
                raise ContractViolation(f"resumed lease must carry the new epoch: {body}")
            self.live[body["lease_id"]] = Held(body["task_id"], body["lease_id"], request_body["lease_secret"],
                                               int(body["revision"]), body["state"])
            return
        receipt = body["receipt"]
        if receipt["command"] != request_type:
            raise ContractViolation(f"receipt of {receipt['command']} answers {request_type}")
        for key in ("task_id", "lease_id", "revision"):
            if receipt[key] != request_body[key]:
                raise ContractViolation(f"receipt {key} {receipt[key]!r} != request {request_body[key]!r}")
        lease = body.get("lease")
        if request_type == "task.finish" and lease is not None:
            raise ContractViolation(f"an ack to task.finish carries a lease: {body}")
        if lease is not None:
            if (lease["task_id"], lease["lease_id"]) != (receipt["task_id"], receipt["lease_id"]):
                raise ContractViolation(f"the lease in a commandResult is another one: {body}")
            if int(lease["revision"]) <= int(receipt["revision"]):
                raise ContractViolation(f"the held lease's revision must follow the receipt's: {body}")
            if lease["state"] != "RUNNING":
                raise ContractViolation(f"after {request_type} the lease is RUNNING: {body}")
        held = self.live.get(receipt["lease_id"])
        if request_type == "task.finish" and not receipt["duplicate"]:
            self.live.pop(receipt["lease_id"], None)
        elif held is not None and lease is not None and not receipt["duplicate"]:
            held.revision, held.state = int(lease["revision"]), lease["state"]

    def _on_assign(self, body: dict[str, Any]) -> None:
        task, lease = body["task"], body["lease"]
        if "lease_secret" not in lease or lease["state"] != "OFFERED" or lease["task_id"] != task["task_id"]:
            raise ContractViolation(f"an assignment is an OFFERED lease with its secret, for its task: {body}")
        if lease["epoch"] != str(self.epoch):
            raise ContractViolation(f"offer epoch {lease['epoch']} is not this session's {self.epoch}")
        if task["queue"] not in self.subscriptions:
            raise ContractViolation(f"assigned a task of unsubscribed queue {task['queue']}")
        kinds = self.subscriptions[task["queue"]]
        if kinds is not None and task["kind"] not in kinds:
            raise ContractViolation(f"assigned kind {task['kind']} outside the subscription {sorted(kinds)}")
        if "concurrency_key" in task and not self.concurrency_keys:
            raise ContractViolation("assigned a keyed task to a session that did not declare concurrency_keys")
        if self.drained and not self.drain_in_flight:
            raise ContractViolation(f"task.assign after drain was acknowledged: {task['task_id']}")
        if len(self.live) + 1 > self.capacity_bound:
            raise ContractViolation(f"task.assign beyond capacity: {len(self.live)} held, "
                                    f"capacity {self.capacity_bound}")
        if lease["lease_id"] in self.live:
            raise ContractViolation(f"lease {lease['lease_id']} offered twice")
        self.live[lease["lease_id"]] = Held(task["task_id"], lease["lease_id"], lease["lease_secret"],
                                            int(lease["revision"]), "OFFERED", task)

    def forget(self, held: Held) -> None:
        """The test knows the server ended this lease (lapse, expiry): stop counting it."""
        self.live.pop(held.lease_id, None)

    async def recv(self, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """The next frame (buffered ones first)."""
        if self.buffer:
            return self.buffer.popleft()
        return await self._read(timeout)

    async def wait_for(self, predicate, timeout: float = DEFAULT_TIMEOUT, what: str = "frame") -> dict[str, Any]:
        """The first frame matching ``predicate``; frames read past it stay buffered in order."""
        for frame in list(self.buffer):
            if predicate(frame):
                self.buffer.remove(frame)
                return frame
        try:
            with trio.fail_after(timeout):
                while True:
                    frame = await self._read(timeout)
                    if predicate(frame):
                        return frame
                    self.buffer.append(frame)
        except trio.TooSlowError:
            raise AssertionError(f"{self.name}: no {what} within {timeout}s; "
                                 f"buffered: {list(self.buffer)}{describe_services()}") from None

    async def reply(self, id_: str, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        return await self.wait_for(lambda f: f.get("reply_to") == id_, timeout, f"reply to {id_}")

    async def request(self, type_: str, body: dict[str, Any], *, id: str | None = None,
                      timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """Send one valid request and return its answer (ack, or error)."""
        return await self.reply(await self.send(self.frame(type_, body, id=id)), timeout)

    # -- protocol helpers --------------------------------------------------------------
    async def hello(self, queues: Any = ("billing",), *, name: str | None = None,
                    cancellation_notifications: bool | None = None, concurrency_keys: bool | None = None,
                    id: str = "h1") -> dict[str, Any]:
        """Register; ``queues`` is names or ``{queue: kinds}``. Returns the reply frame."""
        subs = queues if isinstance(queues, dict) else {q: None for q in queues}
        body: dict[str, Any] = {
            "worker_name": name or self.name,
            "subscriptions": [{"queue": q} if k is None else {"queue": q, "kinds": list(k)}
                              for q, k in subs.items()],
            "client": {"name": "harness", "version": "1"},
        }
        if cancellation_notifications is not None:
            body["cancellation_notifications"] = cancellation_notifications
        if concurrency_keys is not None:
            body["concurrency_keys"] = concurrency_keys
        self.subscriptions = {q: None if k is None else frozenset(k) for q, k in subs.items()}
        self.concurrency_keys = bool(concurrency_keys)
        self.cancellation_notifications = bool(cancellation_notifications)
        return await self.request("worker.hello", body, id=id)

    async def register(self, queues: Any = ("billing",), *, capacity: int | None = None, **kw: Any) -> dict:
        reply = await self.hello(queues, **kw)
        assert reply["type"] == "worker.welcome", reply
        if capacity is not None:
            await self.capacity_ok(capacity)
        return reply["body"]

    async def capacity(self, capacity: int, *, drain: bool = False, sequence: int | None = None,
                       id: str | None = None) -> dict[str, Any]:
        if sequence is None:
            self.sequence += 1
            sequence = self.sequence
        else:
            self.sequence = max(self.sequence, sequence)
        return await self.request("worker.capacity", {"sequence": str(sequence), "capacity": capacity,
                                                      "drain": drain}, id=id)

    async def capacity_ok(self, capacity: int, **kw: Any) -> dict[str, Any]:
        reply = await self.capacity(capacity, **kw)
        assert reply["type"] == "ack", reply
        return reply["body"]

    async def command(self, type_: str, held: Held, *, revision: int | None = None, **extra: Any) -> dict:
        return await self.request(type_, held.body(revision, **extra))

    async def start(self, held: Held, **kw: Any) -> dict[str, Any]:
        return await self.command("task.start", held, **kw)

    async def renew(self, held: Held, **kw: Any) -> dict[str, Any]:
        return await self.command("task.renew", held, **kw)

    async def finish(self, held: Held, status: str = "SUCCEEDED", result: Any = None, **kw: Any) -> dict:
        extra = {"status": status, "result": {"ok": True} if result is None else result}
        if status != "SUCCEEDED" and "error_code" not in kw:
            extra["error_code"] = "harness." + status.lower()
        return await self.command("task.finish", held, **extra, **kw)

    async def ok(self, coro) -> dict[str, Any]:
        reply = await coro
        assert reply["type"] == "ack", reply
        return reply["body"]

    async def resume(self, old: Worker | dict[str, str], held: Held, *, instance_secret: str | None = None,
                     lease_secret: str | None = None) -> dict[str, Any]:
        identity = old if isinstance(old, dict) else {"instance_id": old.instance_id,
                                                      "instance_secret": old.instance_secret}
        return await self.request("worker.resume", {
            "instance_id": identity["instance_id"],
            "instance_secret": instance_secret or identity["instance_secret"],
            "task_id": held.task_id, "lease_id": held.lease_id,
            "lease_secret": lease_secret or held.lease_secret})

    async def expect_assign(self, timeout: float = DEFAULT_TIMEOUT) -> Held:
        frame = await self.wait_for(lambda f: f["type"] == "task.assign", timeout, "task.assign")
        return self.live[frame["body"]["lease"]["lease_id"]]

    async def expect_cancel(self, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        frame = await self.wait_for(lambda f: f["type"] == "task.cancel", timeout, "task.cancel")
        return frame["body"]

    def assigns_buffered(self) -> list[dict[str, Any]]:
        return [f for f in self.buffer if f["type"] == "task.assign"]

    async def expect_error(self, code: str, *, fatal: bool, reply_to: Any = ANY,
                           timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        if isinstance(reply_to, str):
            frame = await self.reply(reply_to, timeout)
        else:
            frame = await self.wait_for(lambda f: f["type"] == "error", timeout, f"error {code}")
        assert frame["type"] == "error", frame
        error = frame["error"]
        assert error["code"] == code, frame
        assert error["fatal"] is fatal, frame
        if reply_to is ABSENT:
            assert "reply_to" not in frame, frame
        return frame

    def assert_error(self, frame: dict[str, Any], code: str, *, fatal: bool = False) -> dict[str, Any]:
        assert frame["type"] == "error", frame
        assert (frame["error"]["code"], frame["error"]["fatal"]) == (code, fatal), frame
        return frame["error"]

    async def expect_close(self, code: int | None = None, timeout: float = DEFAULT_TIMEOUT,
                           allow_frames: bool = False) -> trio_websocket.CloseReason | None:
        """Read until the connection ends; no further frame is allowed unless asked."""
        if self.buffer and not allow_frames:
            raise AssertionError(f"unread frames before the close: {list(self.buffer)}")
        self.buffer.clear()
        try:
            with trio.fail_after(timeout):
                while True:
                    frame = await self._read(timeout)
                    if not allow_frames:
                        raise AssertionError(f"expected the close, got {frame}")
        except ConnectionEnded as ended:
            close = ended.close
        except trio.TooSlowError:
            raise AssertionError(f"{self.name}: connection not closed within {timeout}s") from None
        if code is not None:
            assert close is not None and close.code == code, f"close {close}, expected {code}"
        return close

    async def drop(self) -> None:
        """Lose the connection: the TCP stream ends without a WebSocket close."""
        self.closed_by_us = True
        with trio.move_on_after(2):
            await self.stream.aclose()
        self._done.set()

    async def aclose(self) -> None:
        self.closed_by_us = True
        with trio.move_on_after(3):
            await self.ws.aclose()
        self._done.set()


# -- connecting -------------------------------------------------------------------------

def headers_for(token: str | None) -> list[tuple[bytes, bytes]]:
    return [] if token is None else [(b"authorization", f"Bearer {token}".encode())]


async def _open_stream(port: int, ssl_context: ssl.SSLContext | None) -> trio.abc.Stream:
    stream: trio.abc.Stream = await trio.open_tcp_stream("127.0.0.1", port)
    if ssl_context is not None:
        stream = trio.SSLStream(stream, ssl_context, server_hostname="localhost", https_compatible=True)
        await stream.do_handshake()
    return stream


async def raw_upgrade(port: int, token: str) -> tuple[trio.SocketStream, bytes]:
    """A WebSocket opened by hand, for a peer that must misbehave below the codec (no pongs, no close echo).

    The upgraded stream, and what arrived after the 101 head (a first frame may come with it).
    """
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all((f"GET {PATH} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                           f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {SUBPROTOCOL}\r\n"
                           f"Authorization: Bearer {token}\r\n\r\n").encode())
    data = b""
    with trio.fail_after(DEFAULT_TIMEOUT):
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some(4096)
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101"), head
    return stream, rest


async def connect(nursery: trio.Nursery, port: int, token: str | None, *, name: str = "worker",
                  ssl_context: ssl.SSLContext | None = None, path: str = PATH,
                  subprotocols: tuple[str, ...] = (SUBPROTOCOL,)) -> Worker:
    """Open one WebSocket whose background reader lives in ``nursery``."""

    async def hold(task_status: trio.TaskStatus[Worker]) -> None:
        async with trio.open_nursery() as inner:
            with trio.fail_after(DEFAULT_TIMEOUT):
                stream = await _open_stream(port, ssl_context)
                ws = await trio_websocket.wrap_client_stream(
                    inner, stream, f"localhost:{port}", path, subprotocols=list(subprotocols),
                    extra_headers=headers_for(token), max_message_size=4 * MAX_FRAME_BYTES)
            if ws.subprotocol != SUBPROTOCOL:
                raise ContractViolation(f"server selected subprotocol {ws.subprotocol!r}")
            worker = Worker(ws, stream, name)
            task_status.started(worker)
            await worker._done.wait()
            inner.cancel_scope.cancel()

    return await nursery.start(hold)


async def rejected(port: int, token: str | None, *, ssl_context: ssl.SSLContext | None = None,
                   path: str = PATH, subprotocols: tuple[str, ...] = (SUBPROTOCOL,),
                   headers: list[tuple[bytes, bytes]] | None = None) -> trio_websocket.ConnectionRejected:
    """Open a handshake that the server must refuse with plain HTTP; return the refusal."""
    try:
        with trio.fail_after(DEFAULT_TIMEOUT):
            async with trio_websocket.open_websocket(
                    "127.0.0.1", port, path, use_ssl=ssl_context or False, subprotocols=list(subprotocols),
                    extra_headers=headers_for(token) if headers is None else headers) as ws:
                raise AssertionError(f"handshake accepted (subprotocol {ws.subprotocol!r})")
    except trio_websocket.ConnectionRejected as exc:
        return exc
