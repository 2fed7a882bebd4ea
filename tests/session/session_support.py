"""Shared material for the session tests: bodies the store would give, and the wire out.

Frames in are built by hand (the contract tests' example dicts, written
compactly so they take the compiled fast path, or spelt unusually so they
take the reference decoder) or with the contract's encoder. Every frame the session
puts out is decoded as a worker would decode it (``decode_server_frame``)
and held to the published schema, so the tests assert the real wire.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import contract_support as cs
from pulse_trio.contract import messages as m
from pulse_trio.contract.codec import decode_server_frame
from pulse_trio.contract.fast_client import try_decode_client
from pulse_trio.session import Reject, Request, ServerSession

SESSION = cs.SESSION
T0 = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)
T1 = datetime(2026, 12, 2, 12, 0, 30, tzinfo=timezone.utc)

#: The request examples by wire type, each with its own id.
REQUESTS = {
    "worker.capacity": cs.capacity, "worker.resume": cs.resume, "task.start": cs.start,
    "task.renew": cs.renew, "task.finish": cs.finish,
}
#: The ``$defs`` entry each server frame type must satisfy.
SERVER_DEFS = {
    "worker.welcome": "welcomeFrame", "ack": "ackFrame", "task.assign": "assignmentFrame",
    "task.cancel": "cancellationFrame", "error": "errorFrame",
}


# -- frames in ----------------------------------------------------------------

def compact(frame: dict[str, Any]) -> str:
    """The frame as a worker library writes it: it takes the compiled fast path."""
    text = cs.dumps(frame)
    assert try_decode_client(text.encode()) is not None, "expected a frame the fast path decodes"
    return text


def escaped(frame: dict[str, Any]) -> str:
    """The same frame spelt unusually: the reference decoder judges it.

    Whitespace alone still takes the fast path; an escape (``"\\u0031"`` for
    the version) makes it decline.
    """
    text = json.dumps(frame, indent=1, ensure_ascii=False).replace('"protocol_version": "1"',
                                                                    '"protocol_version": "\\u0031"', 1)
    assert try_decode_client(text.encode()) is None, "expected a frame the fast path declines"
    return text


def with_id(frame: dict[str, Any], id_: str) -> dict[str, Any]:
    return cs.put(frame, "id", id_)


# -- bodies the store would hand the session -----------------------------------------

def welcome_body(*, secret: bool = True, capacity: int = 0, drain: bool = False,
                 sequence: int | None = None) -> m.Welcome:
    return m.Welcome(instance_id=cs.INSTANCE, epoch=42, capacity=capacity, drain=drain, active_leases=0,
                     lease_ttl_ms=30000, start_timeout_ms=30000, limits=m.ServerLimits(), server_time=T0,
                     instance_secret=cs.SECRET_C if secret else None, sequence=sequence)


def lease(*, state: str = "RUNNING", secret: str | None = None, revision: int = 2) -> m.Lease:
    return m.Lease(lease_id=cs.LEASE, task_id=cs.TASK, revision=revision, epoch=42, state=state,
                   expires_at=T1, lease_secret=secret)


def command_result(command: str = "task.start") -> m.CommandResult:
    receipt = m.Receipt(command=command, task_id=cs.TASK, lease_id=cs.LEASE, revision=1, committed_at=T0,
                        duplicate=False)
    return m.CommandResult(receipt=receipt, lease=None if command == "task.finish" else lease())


def ack_body(request_type: str) -> m.AckBody:
    """The body the store's answer to ``request_type`` has."""
    if request_type == "worker.capacity":
        return welcome_body(secret=False, capacity=8, sequence=1)
    if request_type == "worker.resume":
        return lease()
    return command_result(request_type)


def assigned_task() -> m.AssignedTask:
    return m.AssignedTask(task_id=cs.TASK, queue="billing", kind="invoice.send", payload='{"invoice":991}',
                          attempt=1, max_attempts=5, idempotency_key="invoice-991", created_at=T0, due_at=T0)


def offered_lease() -> m.Lease:
    return lease(state="OFFERED", secret=cs.SECRET_B, revision=1)


# -- the session's side ----------------------------------------------------------------

def fresh() -> ServerSession:
    return ServerSession(SESSION)


def request(session: ServerSession, text: str | bytes) -> m.ClientMessage:
    """Feed a frame that must come out as a Request; its message."""
    event = session.receive(text)
    assert type(event) is Request, event
    assert session.pending()[event.message.id] == event.type
    return event.message


def registered() -> ServerSession:
    """A session past its hello: the welcome went out, the state is active."""
    session = fresh()
    request(session, compact(cs.hello()))
    welcome = sent(session.welcome("h1", welcome_body()))
    assert type(welcome) is m.WorkerWelcome and welcome.reply_to == "h1"
    assert session.state == "active" and session.registered
    return session


def pend(session: ServerSession, request_type: str, id_: str | None = None) -> str:
    """Leave one request of ``request_type`` pending; its id."""
    frame = REQUESTS[request_type]()
    if id_ is not None:
        frame = with_id(frame, id_)
    return request(session, compact(frame)).id


# -- the wire out ------------------------------------------------------------------------

def sent(frame: bytes | None, *, ack_for: str | None = None) -> m.ServerMessage:
    """A frame the session put out, decoded as a worker decodes it and checked by the schema."""
    assert type(frame) is bytes, frame
    message = decode_server_frame(frame, ack_for=ack_for)
    instance = json.loads(frame)
    cs.validator("serverFrame").validate(instance)
    cs.validator(SERVER_DEFS[message.TYPE]).validate(instance)
    return message


def error_of(reject: Reject | None) -> m.Error:
    """The error frame of a Reject, checked against what the Reject tells the transport."""
    assert type(reject) is Reject, reject
    error = sent(reject.frame)
    assert type(error) is m.Error
    assert error.code == reject.code
    assert error.fatal == (reject.close_code is not None)
    return error
