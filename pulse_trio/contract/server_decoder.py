"""Server → worker frames to messages (what the SDK reads).

``strict`` (the default) is closed like the schema; ``strict=False`` ignores
unknown fields so an older SDK keeps working against a newer server
(docs/protocol.md §6). Required fields and value rules hold either way.
"""

from __future__ import annotations

from typing import Any

from . import messages as m
from . import readers as r
from .jsontext import JsonText

_REPLY = r.Shape(("protocol_version", "type", "id", "session_id", "reply_to", "body"))
_PUSH = r.Shape(("protocol_version", "type", "id", "session_id", "body"))
_ERROR = r.Shape(("protocol_version", "type", "id", "error"), ("session_id", "reply_to"))
_ERROR_BODY = r.Shape(("code", "message", "fatal"), ("retry_after_ms",))
_WELCOME_STATE = r.Shape(
    ("instance_id", "epoch", "capacity", "drain", "active_leases", "lease_ttl_ms", "start_timeout_ms", "limits",
     "server_time"),
    ("sequence",),
)
_WELCOME = r.Shape(_WELCOME_STATE.required + ("instance_secret",), ("sequence",))
_LIMITS = r.Shape(("max_frame_bytes", "max_result_bytes"))
_LEASE = r.Shape(("lease_id", "task_id", "revision", "epoch", "state", "expires_at"), ("cancel_requested_at",))
_OFFERED_LEASE = r.Shape(_LEASE.required + ("lease_secret",), ("cancel_requested_at",))
_RECEIPT = r.Shape(("command", "task_id", "lease_id", "revision", "committed_at", "duplicate"))
_COMMAND_RESULT = r.Shape(("receipt",), ("lease",))
_ASSIGN_BODY = r.Shape(("task", "lease"))
_TASK = r.Shape(
    ("task_id", "queue", "kind", "payload", "attempt", "max_attempts", "idempotency_key", "created_at", "due_at"),
    ("priority", "concurrency_key", "concurrency_token", "effect_uncertain", "retry_of"),
)
_CANCEL_BODY = r.Shape(("task_id", "lease_id", "cancel_requested_at", "grace_expires_at"), ("reason",))
_IN_BODY = r.envelope_or("body")
_IN_ERROR = r.envelope_or("error")


def decode_tree(tree: dict[str, Any], ack_for: str | None, strict: bool) -> m.ServerMessage:
    """Raises ``readers.Bad``; payload number problems first, as docs/protocol.md §4.8 orders them."""
    payload = None
    body = tree.get("body")
    if tree.get("type") == "task.assign" and type(body) is dict:
        task = body.get("task")
        if type(task) is dict and "payload" in task:
            payload = r.json_value(task["payload"], "body.task.payload", nullable=True)
    cls = r.message_type(tree, m.SERVER_TYPES, m.CLIENT_TYPES, "by the server")
    if cls is m.Error:
        return _error(_ERROR.check(tree, "frame", strict), strict)
    replies = cls is m.WorkerWelcome or cls is m.Ack
    (_REPLY if replies else _PUSH).check(tree, "frame", strict)
    envelope = {"id": r.string(tree, "id", "frame"), "session_id": r.string(tree, "session_id", "frame")}
    if replies:
        envelope["reply_to"] = r.string(tree, "reply_to", "frame")
    body = tree["body"]
    if cls is m.WorkerWelcome:
        return r.build(cls, _IN_BODY, **envelope, body=_welcome(body, "body", strict, secret=True))
    if cls is m.Ack:
        return r.build(cls, _IN_BODY, **envelope, body=_ack_body(body, ack_for, strict))
    if cls is m.TaskCancel:
        body = _CANCEL_BODY.check(body, "body", strict)
        return r.build(
            cls, _IN_BODY, **envelope,
            task_id=r.string(body, "task_id", "body"),
            lease_id=r.string(body, "lease_id", "body"),
            cancel_requested_at=r.time(body, "cancel_requested_at", "body"),
            grace_expires_at=r.time(body, "grace_expires_at", "body"),
            reason=r.optional(body, "reason", "body", r.string),
        )
    body = _ASSIGN_BODY.check(body, "body", strict)
    task = _task(body["task"], payload, strict)
    return r.build(cls, _IN_BODY, **envelope, task=task, lease=_lease(body["lease"], "body.lease", strict, secret=True))


def _error(tree: dict[str, Any], strict: bool) -> m.Error:
    err = _ERROR_BODY.check(tree["error"], "error", strict)
    return r.build(
        m.Error, _IN_ERROR,
        id=r.string(tree, "id", "frame"),
        code=r.string(err, "code", "error"),
        message=r.string(err, "message", "error"),
        fatal=r.boolean(err, "fatal", "error"),
        retry_after_ms=r.optional(err, "retry_after_ms", "error", r.integer),
        session_id=r.optional(tree, "session_id", "frame", r.string),
        reply_to=r.optional(tree, "reply_to", "frame", r.string),
    )


def _ack_body(body: Any, ack_for: str | None, strict: bool) -> m.AckBody:
    """The expected shape when the pending request is known, else by its fields."""
    if ack_for is not None:
        shape = m.ACK_BODY_FOR[ack_for]
    elif type(body) is dict and "receipt" in body:
        shape = m.CommandResult
    elif type(body) is dict and "instance_id" in body:
        shape = m.Welcome
    elif type(body) is dict and "lease_id" in body:
        shape = m.Lease
    else:
        raise r.Bad("body", "must be a welcome, lease or commandResult shape")
    try:
        if shape is m.Welcome:
            return _welcome(body, "body", strict, secret=False)
        if shape is m.Lease:
            return _lease(body, "body", strict, secret=False)
        return _command_result(body, "body", strict)
    except r.Bad as bad:
        if ack_for is not None:
            bad.text += f" (the ack to {ack_for} carries a {shape.__name__})"
        raise


def _welcome(body: Any, path: str, strict: bool, *, secret: bool) -> m.Welcome:
    body = (_WELCOME if secret else _WELCOME_STATE).check(body, path, strict)
    lpath = f"{path}.limits"
    limits = _LIMITS.check(body["limits"], lpath, strict)
    return r.build(
        m.Welcome, r.under(path),
        instance_id=r.string(body, "instance_id", path),
        epoch=r.counter(body, "epoch", path),
        capacity=r.integer(body, "capacity", path),
        drain=r.boolean(body, "drain", path),
        active_leases=r.integer(body, "active_leases", path),
        lease_ttl_ms=r.integer(body, "lease_ttl_ms", path),
        start_timeout_ms=r.integer(body, "start_timeout_ms", path),
        limits=r.build(
            m.ServerLimits, r.under(lpath),
            max_frame_bytes=r.integer(limits, "max_frame_bytes", lpath),
            max_result_bytes=r.integer(limits, "max_result_bytes", lpath),
        ),
        server_time=r.time(body, "server_time", path),
        instance_secret=r.string(body, "instance_secret", path) if secret else None,
        sequence=r.optional(body, "sequence", path, r.counter),
    )


def _lease(body: Any, path: str, strict: bool, *, secret: bool) -> m.Lease:
    body = (_OFFERED_LEASE if secret else _LEASE).check(body, path, strict)
    return r.build(
        m.Lease, r.under(path),
        lease_id=r.string(body, "lease_id", path),
        task_id=r.string(body, "task_id", path),
        revision=r.counter(body, "revision", path),
        epoch=r.counter(body, "epoch", path),
        state=r.string(body, "state", path),
        expires_at=r.time(body, "expires_at", path),
        lease_secret=r.string(body, "lease_secret", path) if secret else None,
        cancel_requested_at=r.optional(body, "cancel_requested_at", path, r.time),
    )


def _command_result(body: Any, path: str, strict: bool) -> m.CommandResult:
    body = _COMMAND_RESULT.check(body, path, strict)
    rpath = f"{path}.receipt"
    receipt = _RECEIPT.check(body["receipt"], rpath, strict)
    return r.build(
        m.CommandResult, r.under(path),
        receipt=r.build(
            m.Receipt, r.under(rpath),
            command=r.string(receipt, "command", rpath),
            task_id=r.string(receipt, "task_id", rpath),
            lease_id=r.string(receipt, "lease_id", rpath),
            revision=r.counter(receipt, "revision", rpath),
            committed_at=r.time(receipt, "committed_at", rpath),
            duplicate=r.boolean(receipt, "duplicate", rpath),
        ),
        lease=_lease(body["lease"], f"{path}.lease", strict, secret=False) if "lease" in body else None,
    )


def _task(task: Any, payload: JsonText | None, strict: bool) -> m.AssignedTask:
    path = "body.task"
    task = _TASK.check(task, path, strict)
    if payload is None:  # unreachable: read first whenever the task has one
        raise r.Bad(path, "missing required field 'payload'")
    priority = r.optional(task, "priority", path, r.integer, 0)
    if "priority" in task and priority == 0:
        raise r.Bad(f"{path}.priority", "must be 1..9 (the default 0 is omitted)")
    if "effect_uncertain" in task and r.boolean(task, "effect_uncertain", path) is not True:
        raise r.Bad(f"{path}.effect_uncertain", "is only sent as true (omitted otherwise)")
    return r.build(
        m.AssignedTask, r.under(path),
        task_id=r.string(task, "task_id", path),
        queue=r.string(task, "queue", path),
        kind=r.string(task, "kind", path),
        payload=payload,
        attempt=r.integer(task, "attempt", path),
        max_attempts=r.integer(task, "max_attempts", path),
        idempotency_key=r.string(task, "idempotency_key", path),
        created_at=r.time(task, "created_at", path),
        due_at=r.time(task, "due_at", path),
        priority=priority,
        concurrency_key=r.optional(task, "concurrency_key", path, r.string),
        concurrency_token=r.optional(task, "concurrency_token", path, r.counter),
        effect_uncertain="effect_uncertain" in task,
        retry_of=r.optional(task, "retry_of", path, r.string),
    )
