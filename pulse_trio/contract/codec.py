"""Frames to messages (decoding, worker-protocol.md §5 layers 1-4).

Decoding is two steps so the session layer can apply the error precedence
of §4.8 between them:

1. ``scan_frame(text)``: size gate, strict scanner, version check. Raises
   ``invalid_json`` or ``unsupported_version``; returns a ``RawFrame`` whose
   ``header`` holds what the session checks need (type, id, session_id,
   reply_to), each only if readable.
2. ``decode_client(raw)`` / ``decode_server(raw)``: result/payload problems
   first (``invalid_result``, ``result_too_large``), then every other schema
   and grammar rule (``invalid_frame``), naming the offending field.

The checks here re-implement the JSON Schema in plain Python (the server
must not need jsonschema at run time); the contract tests prove both give
the same verdict. Shapes and wire types are checked here; value rules live
in the message constructors and are reported with the field's path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from . import errors as e
from . import grammar as g
from . import messages as m
from .errors import InvalidMessage, ProtocolError
from .jsontext import JsonText, dumps, utf8_size
from .limits import MAX_KINDS, MAX_RESULT_BYTES, MAX_SUBSCRIPTIONS, PROTOCOL_VERSION, check_frame_size
from .scanner import JsonNumber, ScanError, scan


@dataclass(frozen=True, slots=True)
class FrameHeader:
    """Envelope fields as far as they could be read (None when not)."""

    type: str | None
    id: str | None  # only when it matches the message-id grammar
    session_id: str | None  # the raw string, whatever its grammar
    reply_to: str | None  # only when it matches the message-id grammar


@dataclass(frozen=True, slots=True, eq=False)
class RawFrame:
    """A strictly scanned frame of protocol version 1, not yet typed."""

    header: FrameHeader
    tree: dict[str, Any]


def scan_frame(text: str | bytes) -> RawFrame:
    """Layers 1-2 and the version check; raises ProtocolError."""
    check_frame_size(text)
    if not isinstance(text, str):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(e.INVALID_JSON, f"frame is not UTF-8: {exc.reason}") from None
    try:
        tree = scan(text)
    except ScanError as exc:
        raise ProtocolError(e.INVALID_JSON, f"frame is not strict JSON: {exc}") from None
    if type(tree) is not dict:
        raise ProtocolError(e.UNSUPPORTED_VERSION, 'a frame is a JSON object with protocol_version "1"')
    header = FrameHeader(
        type=_str_or_none(tree.get("type")),
        id=_message_id_or_none(tree.get("id")),
        session_id=_str_or_none(tree.get("session_id")),
        reply_to=_message_id_or_none(tree.get("reply_to")),
    )
    version = tree.get("protocol_version")
    if version != PROTOCOL_VERSION or type(version) is not str:
        raise ProtocolError(
            e.UNSUPPORTED_VERSION,
            f'protocol_version: only "1" is supported, got {_show(version)}',
            reply_to=header.id,
        )
    return RawFrame(header, tree)


def decode_client_frame(text: str | bytes) -> m.ClientMessage:
    """Worker → server frame to message, all layers; raises ProtocolError."""
    return decode_client(scan_frame(text))


def decode_server_frame(
    text: str | bytes, *, ack_for: str | None = None, strict: bool = True
) -> m.ServerMessage:
    """Server → worker frame to message, all layers; raises ProtocolError."""
    return decode_server(scan_frame(text), ack_for=ack_for, strict=strict)


def decode_client(raw: RawFrame) -> m.ClientMessage:
    """Type a scanned worker frame (the server side); raises ProtocolError."""
    try:
        return _client(raw.tree)
    except _Bad as bad:
        raise ProtocolError(bad.code, bad.text, reply_to=raw.header.id) from None


def decode_server(raw: RawFrame, *, ack_for: str | None = None, strict: bool = True) -> m.ServerMessage:
    """Type a scanned server frame (the SDK side); raises ProtocolError.

    ``ack_for`` is the type of the pending request an ack answers (from the
    caller's pending-request table): the body must then be that request's
    shape. Without it the shape is recognised by its fields. ``strict=False``
    ignores unknown fields, for forward compatibility.
    """
    if ack_for is not None and ack_for not in m.ACK_BODY_FOR:
        raise ValueError(f"{ack_for!r} is not a request that gets an ack")
    try:
        return _server(raw.tree, ack_for, strict)
    except _Bad as bad:
        raise ProtocolError(bad.code, bad.text, reply_to=raw.header.id) from None


# -- reading helpers -----------------------------------------------------------


class _Bad(Exception):
    def __init__(self, path: str, reason: str, code: str = e.INVALID_FRAME) -> None:
        self.code = code
        self.text = f"{path}: {reason}"


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, JsonNumber):
        return value.text[:40]
    if type(value) is bool:
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "an array"
    return repr(value)[:60]


def _str_or_none(value: Any) -> str | None:
    return value if type(value) is str else None


def _message_id_or_none(value: Any) -> str | None:
    return value if type(value) is str and g.is_message_id(value) else None


class _Shape:
    """Field names of one closed JSON object."""

    def __init__(self, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
        self.required = required
        self.allowed = frozenset(required + optional)

    def check(self, value: Any, path: str, strict: bool = True) -> dict[str, Any]:
        if type(value) is not dict:
            raise _Bad(path, f"must be an object, got {_show(value)}")
        if strict and not value.keys() <= self.allowed:
            key = next(k for k in value if k not in self.allowed)
            raise _Bad(path, f"unknown field {key!r}")
        for key in self.required:
            if key not in value:
                raise _Bad(path, f"missing required field {key!r}")
        return value


def _string(obj: dict, key: str, path: str) -> str:
    value = obj[key]
    if type(value) is not str:
        raise _Bad(f"{path}.{key}", f"must be a string, got {_show(value)}")
    return value


def _counter(obj: dict, key: str, path: str) -> int:
    value = _string(obj, key, path)
    try:
        return g.parse_counter(value)
    except ValueError:
        raise _Bad(f"{path}.{key}", f"must be a canonical decimal string 1..18446744073709551615, got {_show(value)}") from None


def _integer(obj: dict, key: str, path: str) -> int:
    """A JSON integer token; ranges are the constructors' business."""
    value = obj[key]
    if type(value) is int:
        return value
    if isinstance(value, JsonNumber) and value.is_integer_token:
        if value.text == "-0":
            return 0
        raise _Bad(f"{path}.{key}", f"integer {_show(value)} is out of range")
    raise _Bad(f"{path}.{key}", f"must be an integer token (no fraction or exponent), got {_show(value)}")


def _boolean(obj: dict, key: str, path: str) -> bool:
    value = obj[key]
    if type(value) is not bool:
        raise _Bad(f"{path}.{key}", f"must be true or false, got {_show(value)}")
    return value


def _time(obj: dict, key: str, path: str):
    value = _string(obj, key, path)
    try:
        return g.parse_time(value)
    except ValueError:
        raise _Bad(f"{path}.{key}", f"must be a UTC RFC 3339 time (Z, at most 6 fractional digits), got {_show(value)}") from None


def _array(obj: dict, key: str, path: str, most: int) -> list:
    value = obj[key]
    if type(value) is not list:
        raise _Bad(f"{path}.{key}", f"must be an array, got {_show(value)}")
    if not 0 < len(value) <= most:
        raise _Bad(f"{path}.{key}", f"must hold 1..{most} items, got {len(value)}")
    return value


def _opt(obj: dict, key: str, path: str, read: Callable, default: Any = None) -> Any:
    return read(obj, key, path) if key in obj else default


def _build(cls: type, where: Callable[[str], str], **fields: Any) -> Any:
    try:
        return cls(**fields)
    except InvalidMessage as exc:
        raise _Bad(where(exc.field), exc.reason) from None


def _at(path: str) -> Callable[[str], str]:
    return lambda field: f"{path}.{field}"


def _in_body(field: str) -> str:
    return field if field in ("id", "session_id", "reply_to") else f"body.{field}"


def _json_value(value: Any, path: str, *, nullable: bool) -> JsonText:
    """Result/payload rules, which outrank every other rule of the frame."""
    if value is None and not nullable:
        raise _Bad(path, "must not be null", e.INVALID_RESULT)
    text, problem = dumps(value, check_numbers=True)
    if not nullable and utf8_size(text) > MAX_RESULT_BYTES:
        raise _Bad(path, f"is {utf8_size(text)} bytes of UTF-8; at most {MAX_RESULT_BYTES}", e.RESULT_TOO_LARGE)
    if problem is not None:
        raise _Bad(path, problem, e.INVALID_RESULT)
    return JsonText(text)


def _check_type(tree: dict, own: dict[str, type], other: dict[str, type], direction: str) -> type:
    if "type" not in tree:
        raise _Bad("frame", "missing required field 'type'")
    kind = tree["type"]
    if type(kind) is not str:
        raise _Bad("type", f"must be a string, got {_show(kind)}")
    if kind in other:
        raise _Bad("type", f"{kind!r} is never sent {direction}")
    if kind not in own:
        raise _Bad("type", f"unknown message type {kind!r}")
    return own[kind]


# -- worker → server -----------------------------------------------------------

_HELLO = _Shape(("protocol_version", "type", "id", "body"))
_REQUEST = _Shape(("protocol_version", "type", "id", "session_id", "body"))
_HELLO_BODY = _Shape(("worker_name", "subscriptions"), ("cancellation_notifications", "concurrency_keys", "client"))
_SUBSCRIPTION = _Shape(("queue",), ("kinds",))
_CLIENT_INFO = _Shape(("name", "version"))
_CAPACITY_BODY = _Shape(("sequence", "capacity", "drain"))
_RESUME_BODY = _Shape(("instance_id", "instance_secret", "task_id", "lease_id", "lease_secret"))
_COMMAND_BODY = _Shape(("task_id", "lease_id", "lease_secret", "revision"))
_FINISH_BODY = _Shape(_COMMAND_BODY.required + ("status", "result"), ("error_code", "error_message", "retryable"))


def _client(tree: dict) -> m.ClientMessage:
    result = None
    body = tree.get("body")
    if tree.get("type") == "task.finish" and type(body) is dict and "result" in body:
        result = _json_value(body["result"], "body.result", nullable=False)
    cls = _check_type(tree, m.CLIENT_TYPES, m.SERVER_TYPES, "by a worker")
    for key in ("reply_to", "error"):
        if key in tree:
            raise _Bad(key, "response-only field, never sent in a request")
    if cls is m.WorkerHello:
        if "session_id" in tree:
            raise _Bad("session_id", "not sent in worker.hello")
        _HELLO.check(tree, "frame")
        return _hello(tree)
    _REQUEST.check(tree, "frame")
    envelope = {"id": _string(tree, "id", "frame"), "session_id": _string(tree, "session_id", "frame")}
    if cls is m.WorkerCapacity:
        body = _CAPACITY_BODY.check(tree["body"], "body")
        return _build(cls, _in_body, **envelope, sequence=_counter(body, "sequence", "body"),
                      capacity=_integer(body, "capacity", "body"), drain=_boolean(body, "drain", "body"))
    if cls is m.WorkerResume:
        body = _RESUME_BODY.check(tree["body"], "body")
        return _build(cls, _in_body, **envelope, **{k: _string(body, k, "body") for k in _RESUME_BODY.required})
    shape = _FINISH_BODY if cls is m.TaskFinish else _COMMAND_BODY
    body = shape.check(tree["body"], "body")
    fields = {k: _string(body, k, "body") for k in ("task_id", "lease_id", "lease_secret")}
    fields["revision"] = _counter(body, "revision", "body")
    if cls is m.TaskFinish:
        fields.update(
            status=_string(body, "status", "body"),
            result=result,
            error_code=_opt(body, "error_code", "body", _string, ""),
            error_message=_opt(body, "error_message", "body", _string, ""),
            retryable=_opt(body, "retryable", "body", _boolean, False),
        )
    return _build(cls, _in_body, **envelope, **fields)


def _hello(tree: dict) -> m.WorkerHello:
    body = _HELLO_BODY.check(tree["body"], "body")
    subscriptions = []
    for i, item in enumerate(_array(body, "subscriptions", "body", MAX_SUBSCRIPTIONS)):
        path = f"body.subscriptions[{i}]"
        item = _SUBSCRIPTION.check(item, path)
        kinds = None
        if "kinds" in item:
            kinds = _array(item, "kinds", path, MAX_KINDS)
            for j, kind in enumerate(kinds):
                if type(kind) is not str:
                    raise _Bad(f"{path}.kinds[{j}]", f"must be a string, got {_show(kind)}")
        subscriptions.append(_build(m.Subscription, _at(path), queue=_string(item, "queue", path), kinds=kinds))
    client = None
    if "client" in body:
        info = _CLIENT_INFO.check(body["client"], "body.client")
        client = _build(m.ClientInfo, _at("body.client"), name=_string(info, "name", "body.client"),
                        version=_string(info, "version", "body.client"))
    return _build(
        m.WorkerHello, _in_body,
        id=_string(tree, "id", "frame"),
        worker_name=_string(body, "worker_name", "body"),
        subscriptions=tuple(subscriptions),
        cancellation_notifications=_opt(body, "cancellation_notifications", "body", _boolean, False),
        concurrency_keys=_opt(body, "concurrency_keys", "body", _boolean, False),
        client=client,
    )


# -- server → worker -----------------------------------------------------------

_REPLY = _Shape(("protocol_version", "type", "id", "session_id", "reply_to", "body"))
_PUSH = _Shape(("protocol_version", "type", "id", "session_id", "body"))
_ERROR = _Shape(("protocol_version", "type", "id", "error"), ("session_id", "reply_to"))
_ERROR_BODY = _Shape(("code", "message", "fatal"), ("retry_after_ms",))
_WELCOME_BASE = ("instance_id", "epoch", "capacity", "drain", "active_leases",
                 "lease_ttl_ms", "start_timeout_ms", "limits", "server_time")
_WELCOME = _Shape(_WELCOME_BASE + ("instance_secret",), ("sequence",))
_WELCOME_STATE = _Shape(_WELCOME_BASE, ("sequence",))
_LIMITS = _Shape(("max_frame_bytes", "max_result_bytes"))
_LEASE_BASE = ("lease_id", "task_id", "revision", "epoch", "state", "expires_at")
_OFFERED_LEASE = _Shape(_LEASE_BASE + ("lease_secret",), ("cancel_requested_at",))
_LEASE = _Shape(_LEASE_BASE, ("cancel_requested_at",))
_RECEIPT = _Shape(("command", "task_id", "lease_id", "revision", "committed_at", "duplicate"))
_COMMAND_RESULT = _Shape(("receipt",), ("lease",))
_ASSIGN_BODY = _Shape(("task", "lease"))
_TASK = _Shape(
    ("task_id", "queue", "kind", "payload", "attempt", "max_attempts", "idempotency_key", "created_at", "due_at"),
    ("priority", "concurrency_key", "concurrency_token", "effect_uncertain", "retry_of"),
)
_CANCEL_BODY = _Shape(("task_id", "lease_id", "cancel_requested_at", "grace_expires_at"), ("reason",))


def _server(tree: dict, ack_for: str | None, strict: bool) -> m.ServerMessage:
    payload = None
    body = tree.get("body")
    if tree.get("type") == "task.assign" and type(body) is dict:
        task = body.get("task")
        if type(task) is dict and "payload" in task:
            payload = _json_value(task["payload"], "body.task.payload", nullable=True)
    cls = _check_type(tree, m.SERVER_TYPES, m.CLIENT_TYPES, "by the server")
    if cls is m.Error:
        _ERROR.check(tree, "frame", strict)
        err = _ERROR_BODY.check(tree["error"], "error", strict)
        return _build(
            m.Error, lambda f: f if f in ("id", "session_id", "reply_to") else f"error.{f}",
            id=_string(tree, "id", "frame"),
            code=_string(err, "code", "error"), message=_string(err, "message", "error"),
            fatal=_boolean(err, "fatal", "error"),
            retry_after_ms=_opt(err, "retry_after_ms", "error", _integer),
            session_id=_opt(tree, "session_id", "frame", _string),
            reply_to=_opt(tree, "reply_to", "frame", _string),
        )
    replies = cls is m.WorkerWelcome or cls is m.Ack
    (_REPLY if replies else _PUSH).check(tree, "frame", strict)
    envelope = {"id": _string(tree, "id", "frame"), "session_id": _string(tree, "session_id", "frame")}
    if replies:
        envelope["reply_to"] = _string(tree, "reply_to", "frame")
    body = tree["body"]
    if cls is m.WorkerWelcome:
        return _build(cls, _in_body, **envelope, body=_welcome(body, "body", strict, secret=True))
    if cls is m.Ack:
        return _build(cls, _in_body, **envelope, body=_ack_body(body, ack_for, strict))
    if cls is m.TaskCancel:
        body = _CANCEL_BODY.check(body, "body", strict)
        return _build(
            cls, _in_body, **envelope,
            task_id=_string(body, "task_id", "body"), lease_id=_string(body, "lease_id", "body"),
            cancel_requested_at=_time(body, "cancel_requested_at", "body"),
            grace_expires_at=_time(body, "grace_expires_at", "body"),
            reason=_opt(body, "reason", "body", _string),
        )
    body = _ASSIGN_BODY.check(body, "body", strict)
    return _build(cls, _in_body, **envelope, task=_task(body["task"], payload, strict),
                  lease=_lease(body["lease"], "body.lease", strict, secret=True))


def _ack_body(body: Any, ack_for: str | None, strict: bool) -> m.AckBody:
    if ack_for is not None:
        shape = m.ACK_BODY_FOR[ack_for]
    elif type(body) is dict and "receipt" in body:
        shape = m.CommandResult
    elif type(body) is dict and "instance_id" in body:
        shape = m.Welcome
    elif type(body) is dict and "lease_id" in body:
        shape = m.Lease
    else:
        raise _Bad("body", "must be a welcome, lease or commandResult shape")
    try:
        if shape is m.Welcome:
            return _welcome(body, "body", strict, secret=False)
        if shape is m.Lease:
            return _lease(body, "body", strict, secret=False)
        return _command_result(body, "body", strict)
    except _Bad as bad:
        if ack_for is not None:
            bad.text += f" (an ack to {ack_for} carries a {shape.__name__} body)"
        raise


def _welcome(body: Any, path: str, strict: bool, *, secret: bool) -> m.Welcome:
    body = (_WELCOME if secret else _WELCOME_STATE).check(body, path, strict)
    limits = _LIMITS.check(body["limits"], f"{path}.limits", strict)
    return _build(
        m.Welcome, _at(path),
        instance_id=_string(body, "instance_id", path),
        epoch=_counter(body, "epoch", path),
        capacity=_integer(body, "capacity", path),
        drain=_boolean(body, "drain", path),
        active_leases=_integer(body, "active_leases", path),
        lease_ttl_ms=_integer(body, "lease_ttl_ms", path),
        start_timeout_ms=_integer(body, "start_timeout_ms", path),
        limits=_build(m.ServerLimits, _at(f"{path}.limits"),
                      max_frame_bytes=_integer(limits, "max_frame_bytes", f"{path}.limits"),
                      max_result_bytes=_integer(limits, "max_result_bytes", f"{path}.limits")),
        server_time=_time(body, "server_time", path),
        instance_secret=_string(body, "instance_secret", path) if secret else None,
        sequence=_opt(body, "sequence", path, _counter),
    )


def _lease(body: Any, path: str, strict: bool, *, secret: bool) -> m.Lease:
    body = (_OFFERED_LEASE if secret else _LEASE).check(body, path, strict)
    return _build(
        m.Lease, _at(path),
        lease_id=_string(body, "lease_id", path), task_id=_string(body, "task_id", path),
        revision=_counter(body, "revision", path), epoch=_counter(body, "epoch", path),
        state=_string(body, "state", path), expires_at=_time(body, "expires_at", path),
        lease_secret=_string(body, "lease_secret", path) if secret else None,
        cancel_requested_at=_opt(body, "cancel_requested_at", path, _time),
    )


def _command_result(body: Any, path: str, strict: bool) -> m.CommandResult:
    body = _COMMAND_RESULT.check(body, path, strict)
    rpath = f"{path}.receipt"
    receipt = _RECEIPT.check(body["receipt"], rpath, strict)
    return _build(
        m.CommandResult, _at(path),
        receipt=_build(
            m.Receipt, _at(rpath),
            command=_string(receipt, "command", rpath), task_id=_string(receipt, "task_id", rpath),
            lease_id=_string(receipt, "lease_id", rpath), revision=_counter(receipt, "revision", rpath),
            committed_at=_time(receipt, "committed_at", rpath),
            duplicate=_boolean(receipt, "duplicate", rpath),
        ),
        lease=_lease(body["lease"], f"{path}.lease", strict, secret=False) if "lease" in body else None,
    )


def _task(task: Any, payload: JsonText | None, strict: bool) -> m.AssignedTask:
    path = "body.task"
    task = _TASK.check(task, path, strict)
    priority = _opt(task, "priority", path, _integer, 0)
    if "priority" in task and priority == 0:
        raise _Bad(f"{path}.priority", "must be 1..9 (the default 0 is omitted)")
    if "effect_uncertain" in task and _boolean(task, "effect_uncertain", path) is not True:
        raise _Bad(f"{path}.effect_uncertain", "is only sent as true (omitted otherwise)")
    assert payload is not None  # read first, by _server
    return _build(
        m.AssignedTask, _at(path),
        task_id=_string(task, "task_id", path), queue=_string(task, "queue", path),
        kind=_string(task, "kind", path), payload=payload,
        attempt=_integer(task, "attempt", path), max_attempts=_integer(task, "max_attempts", path),
        idempotency_key=_string(task, "idempotency_key", path),
        created_at=_time(task, "created_at", path), due_at=_time(task, "due_at", path),
        priority=priority,
        concurrency_key=_opt(task, "concurrency_key", path, _string),
        concurrency_token=_opt(task, "concurrency_token", path, _counter),
        effect_uncertain="effect_uncertain" in task,
        retry_of=_opt(task, "retry_of", path, _string),
    )
