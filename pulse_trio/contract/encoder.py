"""Messages to frames: canonical compact JSON.

Canonical means one text per message: fields in the order of
docs/protocol.md §4, no insignificant whitespace, counters as decimal
strings, times with exactly 6 fractional digits, optional fields omitted
when they hold their default, results and payloads spliced in verbatim.
Messages validate themselves when built, so encoding cannot fail on values.

The text comes from msgspec's compiled encoder, which escapes strings as the
standard library does with ``ensure_ascii=False`` and splices ``Raw``
fragments (results, payloads) in verbatim.
"""

from __future__ import annotations

from typing import Any, Callable

import msgspec

from . import messages as m
from .grammar import format_time
from .limits import PROTOCOL_VERSION

_JSON = msgspec.json.Encoder()


def encode(message: m.Message) -> str:
    """The frame text for a message."""
    return encode_bytes(message).decode("utf-8")


def encode_bytes(message: m.Message) -> bytes:
    """The frame as UTF-8 bytes, what a WebSocket text frame carries."""
    try:
        build = _BUILDERS[type(message)]
    except KeyError:
        raise TypeError(f"not a pulse.worker.v1 message: {type(message).__name__}") from None
    return _JSON.encode(build(message))


def _raw(text: str) -> msgspec.Raw:
    """Canonical JSON text (a ``JsonText``) to splice in as it is."""
    return msgspec.Raw(str.encode(text))


def _frame(msg: Any, body_key: str, body: dict[str, Any]) -> dict[str, Any]:
    frame: dict[str, Any] = {"protocol_version": PROTOCOL_VERSION, "type": msg.TYPE, "id": msg.id}
    session_id = getattr(msg, "session_id", None)
    if session_id is not None:
        frame["session_id"] = session_id
    reply_to = getattr(msg, "reply_to", None)
    if reply_to is not None:
        frame["reply_to"] = reply_to
    frame[body_key] = body
    return frame


def _put(out: dict[str, Any], key: str, value: Any, default: Any = None) -> None:
    if value != default:
        out[key] = value


def _hello(msg: m.WorkerHello) -> dict[str, Any]:
    subs = []
    for sub in msg.subscriptions:
        item: dict[str, Any] = {"queue": sub.queue}
        if sub.kinds is not None:
            item["kinds"] = list(sub.kinds)
        subs.append(item)
    body: dict[str, Any] = {"worker_name": msg.worker_name, "subscriptions": subs}
    _put(body, "cancellation_notifications", msg.cancellation_notifications, False)
    _put(body, "concurrency_keys", msg.concurrency_keys, False)
    if msg.client is not None:
        body["client"] = {"name": msg.client.name, "version": msg.client.version}
    return _frame(msg, "body", body)


def _capacity(msg: m.WorkerCapacity) -> dict[str, Any]:
    return _frame(msg, "body", {"sequence": str(msg.sequence), "capacity": msg.capacity, "drain": msg.drain})


def _resume(msg: m.WorkerResume) -> dict[str, Any]:
    return _frame(msg, "body", {
        "instance_id": msg.instance_id, "instance_secret": msg.instance_secret,
        "task_id": msg.task_id, "lease_id": msg.lease_id, "lease_secret": msg.lease_secret,
    })


def _command(msg: m.TaskStart | m.TaskRenew | m.TaskFinish) -> dict[str, Any]:
    body: dict[str, Any] = {
        "task_id": msg.task_id, "lease_id": msg.lease_id,
        "lease_secret": msg.lease_secret, "revision": str(msg.revision),
    }
    if isinstance(msg, m.TaskFinish):
        body["status"] = msg.status
        body["result"] = _raw(msg.result)
        _put(body, "error_code", msg.error_code, "")
        _put(body, "error_message", msg.error_message, "")
        _put(body, "retryable", msg.retryable, False)
    return _frame(msg, "body", body)


def welcome_body(welcome: m.Welcome) -> dict[str, Any]:
    body: dict[str, Any] = {"instance_id": welcome.instance_id}
    if welcome.instance_secret is not None:
        body["instance_secret"] = welcome.instance_secret
    body["epoch"] = str(welcome.epoch)
    if welcome.sequence is not None:
        body["sequence"] = str(welcome.sequence)
    body.update(
        capacity=welcome.capacity, drain=welcome.drain, active_leases=welcome.active_leases,
        lease_ttl_ms=welcome.lease_ttl_ms, start_timeout_ms=welcome.start_timeout_ms,
        limits={"max_frame_bytes": welcome.limits.max_frame_bytes,
                "max_result_bytes": welcome.limits.max_result_bytes},
        server_time=format_time(welcome.server_time),
    )
    return body


def lease_body(lease: m.Lease) -> dict[str, Any]:
    body: dict[str, Any] = {"lease_id": lease.lease_id, "task_id": lease.task_id}
    if lease.lease_secret is not None:
        body["lease_secret"] = lease.lease_secret
    body.update(revision=str(lease.revision), epoch=str(lease.epoch), state=lease.state,
                expires_at=format_time(lease.expires_at))
    if lease.cancel_requested_at is not None:
        body["cancel_requested_at"] = format_time(lease.cancel_requested_at)
    return body


def command_result_body(result: m.CommandResult) -> dict[str, Any]:
    r = result.receipt
    body: dict[str, Any] = {"receipt": {
        "command": r.command, "task_id": r.task_id, "lease_id": r.lease_id,
        "revision": str(r.revision), "committed_at": format_time(r.committed_at), "duplicate": r.duplicate,
    }}
    if result.lease is not None:
        body["lease"] = lease_body(result.lease)
    return body


def _welcome(msg: m.WorkerWelcome) -> dict[str, Any]:
    return _frame(msg, "body", welcome_body(msg.body))


def _ack(msg: m.Ack) -> dict[str, Any]:
    body = msg.body
    if isinstance(body, m.Welcome):
        return _frame(msg, "body", welcome_body(body))
    if isinstance(body, m.Lease):
        return _frame(msg, "body", lease_body(body))
    return _frame(msg, "body", command_result_body(body))


def _assign(msg: m.TaskAssign) -> dict[str, Any]:
    t = msg.task
    task: dict[str, Any] = {
        "task_id": t.task_id, "queue": t.queue, "kind": t.kind, "payload": _raw(t.payload),
        "attempt": t.attempt, "max_attempts": t.max_attempts, "idempotency_key": t.idempotency_key,
        "created_at": format_time(t.created_at), "due_at": format_time(t.due_at),
    }
    _put(task, "priority", t.priority, 0)
    if t.concurrency_key is not None:
        task["concurrency_key"] = t.concurrency_key
        task["concurrency_token"] = str(t.concurrency_token)
    _put(task, "effect_uncertain", t.effect_uncertain, False)
    _put(task, "retry_of", t.retry_of)
    return _frame(msg, "body", {"task": task, "lease": lease_body(msg.lease)})


def _cancel(msg: m.TaskCancel) -> dict[str, Any]:
    body: dict[str, Any] = {
        "task_id": msg.task_id, "lease_id": msg.lease_id,
        "cancel_requested_at": format_time(msg.cancel_requested_at),
        "grace_expires_at": format_time(msg.grace_expires_at),
    }
    _put(body, "reason", msg.reason)
    return _frame(msg, "body", body)


def _error(msg: m.Error) -> dict[str, Any]:
    error: dict[str, Any] = {"code": msg.code, "message": msg.message, "fatal": msg.fatal}
    _put(error, "retry_after_ms", msg.retry_after_ms)
    return _frame(msg, "error", error)


_BUILDERS: dict[type, Callable[[Any], dict[str, Any]]] = {
    m.WorkerHello: _hello,
    m.WorkerCapacity: _capacity,
    m.WorkerResume: _resume,
    m.TaskStart: _command,
    m.TaskRenew: _command,
    m.TaskFinish: _command,
    m.WorkerWelcome: _welcome,
    m.Ack: _ack,
    m.TaskAssign: _assign,
    m.TaskCancel: _cancel,
    m.Error: _error,
}
