"""The fast path for server → worker frames: acks, offers and cancel pushes.

The mirror of :mod:`fast_client`, for the SDK: :func:`try_decode_server`
returns the message a well-formed frame stands for, or None, and None means
"ask the reference decoder" (``codec.decode_server``). The same three
rules make it safe: closed msgspec structs with ``UNSET`` for optional
fields, a colon count that rules out repeated keys outside the payload
(see :mod:`fast_client`), and the strict scanner for the payload, the only
open JSON a server sends. Welcomes and errors, which come once a session
or rarely, always take the reference path.

An ack's body has the shape of the request it answers, which only the
caller's table of pending requests knows: ``ack_for(reply_to)`` names the
request type, or None to leave the frame to the reference decoder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

from . import messages as m
from .fast_client import keys_add_up
from .grammar import parse_counter, parse_time
from .jsontext import JsonText, canonical_fragment, dumps
from .limits import MAX_PAYLOAD_DEPTH
from .scanner import ScanError, scan

Version = Literal["1"]


class _Limits(Struct, forbid_unknown_fields=True):
    max_frame_bytes: int
    max_result_bytes: int


class _WelcomeState(Struct, forbid_unknown_fields=True):
    instance_id: str
    epoch: str
    capacity: int
    drain: bool
    active_leases: int
    lease_ttl_ms: int
    start_timeout_ms: int
    limits: _Limits
    server_time: str
    sequence: str | UnsetType = UNSET


class _Lease(Struct, forbid_unknown_fields=True):
    lease_id: str
    task_id: str
    revision: str
    epoch: str
    state: str
    expires_at: str
    cancel_requested_at: str | UnsetType = UNSET


class _OfferedLease(Struct, forbid_unknown_fields=True):
    lease_id: str
    task_id: str
    lease_secret: str
    revision: str
    epoch: str
    state: str
    expires_at: str
    cancel_requested_at: str | UnsetType = UNSET


class _Receipt(Struct, forbid_unknown_fields=True):
    command: str
    task_id: str
    lease_id: str
    revision: str
    committed_at: str
    duplicate: bool


class _CommandResult(Struct, forbid_unknown_fields=True):
    receipt: _Receipt
    lease: _Lease | UnsetType = UNSET


#: The body of a lease command's ack, declared once: the SDK reads acks with it too (sdk/frames.py).
CommandResultBody = _CommandResult


class _Task(Struct, forbid_unknown_fields=True):
    task_id: str
    queue: str
    kind: str
    payload: Raw
    attempt: int
    max_attempts: int
    idempotency_key: str
    created_at: str
    due_at: str
    priority: int | UnsetType = UNSET
    concurrency_key: str | UnsetType = UNSET
    concurrency_token: str | UnsetType = UNSET
    effect_uncertain: bool | UnsetType = UNSET
    retry_of: str | UnsetType = UNSET


class _AssignBody(Struct, forbid_unknown_fields=True):
    task: _Task
    lease: _OfferedLease


class _CancelBody(Struct, forbid_unknown_fields=True):
    task_id: str
    lease_id: str
    cancel_requested_at: str
    grace_expires_at: str
    reason: str | UnsetType = UNSET


class _Ack(Struct, tag="ack", tag_field="type", forbid_unknown_fields=True):
    protocol_version: Version
    id: str
    session_id: str
    reply_to: str
    body: Raw


class _Assign(Struct, tag="task.assign", tag_field="type", forbid_unknown_fields=True):
    protocol_version: Version
    id: str
    session_id: str
    body: _AssignBody


class _Cancel(Struct, tag="task.cancel", tag_field="type", forbid_unknown_fields=True):
    protocol_version: Version
    id: str
    session_id: str
    body: _CancelBody


_DECODER = msgspec.json.Decoder(_Ack | _Assign | _Cancel)
_WELCOME_STATE = msgspec.json.Decoder(_WelcomeState)
_LEASE = msgspec.json.Decoder(_Lease)
_COMMAND_RESULT = msgspec.json.Decoder(_CommandResult)
_ENVELOPE_KEYS = 5  # protocol_version, type, id, session_id, body


def try_decode_server(data: bytes, ack_for: Callable[[str], str | None]) -> m.ServerMessage | None:
    """The message of a well-formed ack, offer or cancel push, or None (use the reference decoder)."""
    try:
        frame = _DECODER.decode(data)
        if type(frame) is _Ack:
            return _ack(frame, data, ack_for(frame.reply_to))
        if type(frame) is _Assign:
            return _assign(frame, data)
        return _cancel(frame, data)
    except (msgspec.DecodeError, ValueError, TypeError, ScanError):
        # msgspec's ValidationError is a DecodeError; InvalidMessage is a ValueError.
        return None


class _Count:
    """Keys and the colons of string values, as a frame's structs are walked."""

    __slots__ = ("keys", "colons")

    def __init__(self, keys: int, *strings: str) -> None:
        self.keys = keys
        self.colons = 0
        self.strings(*strings)

    def strings(self, *values: str) -> None:
        for value in values:
            self.colons += value.count(":")

    def optional(self, *values: object) -> None:
        for value in values:
            if value is not UNSET:
                self.keys += 1
                if type(value) is str:
                    self.colons += value.count(":")


def _ack(frame: _Ack, data: bytes, request_type: str | None) -> m.Ack | None:
    if request_type is None:
        return None
    count = _Count(_ENVELOPE_KEYS + 1, frame.id, frame.session_id, frame.reply_to)  # +1: reply_to
    raw = bytes(frame.body)
    body: m.AckBody
    if request_type == "worker.capacity":
        body = _welcome_state(_WELCOME_STATE.decode(raw), count)
    elif request_type == "worker.resume":
        body = _lease(_LEASE.decode(raw), count)
    else:
        result = _COMMAND_RESULT.decode(raw)
        r = result.receipt
        count.keys += 1 + 6
        count.strings(r.command, r.task_id, r.lease_id, r.revision, r.committed_at)
        lease = None
        if result.lease is not UNSET:
            count.keys += 1
            lease = _lease(result.lease, count)
        body = m.CommandResult(m.Receipt(r.command, r.task_id, r.lease_id, parse_counter(r.revision),
                                         parse_time(r.committed_at), r.duplicate), lease)
    if not keys_add_up(data, count.keys, count.colons):
        return None
    return m.Ack(id=frame.id, session_id=frame.session_id, reply_to=frame.reply_to, body=body)


def _welcome_state(w: _WelcomeState, count: _Count) -> m.Welcome:
    count.keys += 9 + 2  # the fields, and the two limits
    count.strings(w.instance_id, w.epoch, w.server_time)
    count.optional(w.sequence)
    return m.Welcome(
        instance_id=w.instance_id, epoch=parse_counter(w.epoch), capacity=w.capacity, drain=w.drain,
        active_leases=w.active_leases, lease_ttl_ms=w.lease_ttl_ms, start_timeout_ms=w.start_timeout_ms,
        limits=m.ServerLimits(w.limits.max_frame_bytes, w.limits.max_result_bytes),
        server_time=parse_time(w.server_time),
        sequence=parse_counter(w.sequence) if w.sequence is not UNSET else None)


def _lease(lease: _Lease | _OfferedLease, count: _Count, secret: str | None = None) -> m.Lease:
    count.keys += 6
    count.strings(lease.lease_id, lease.task_id, lease.revision, lease.epoch, lease.state, lease.expires_at)
    count.optional(lease.cancel_requested_at)
    cancel = lease.cancel_requested_at
    return m.Lease(lease_id=lease.lease_id, task_id=lease.task_id, revision=parse_counter(lease.revision),
                   epoch=parse_counter(lease.epoch), state=lease.state, expires_at=parse_time(lease.expires_at),
                   lease_secret=secret, cancel_requested_at=parse_time(cancel) if cancel is not UNSET else None)


def _assign(frame: _Assign, data: bytes) -> m.TaskAssign | None:
    t, offered = frame.body.task, frame.body.lease
    count = _Count(_ENVELOPE_KEYS + 2 + 9, frame.id, frame.session_id, t.task_id, t.queue, t.kind,
                   t.idempotency_key, t.created_at, t.due_at)  # body: task, lease; the task's required fields
    count.optional(t.priority, t.concurrency_key, t.concurrency_token, t.effect_uncertain, t.retry_of)
    if t.priority is not UNSET and t.priority == 0:
        return None  # the default is omitted, never sent
    if t.effect_uncertain is not UNSET and t.effect_uncertain is not True:
        return None  # only ever sent as true
    count.keys += 1
    count.strings(offered.lease_secret)
    lease = _lease(offered, count, offered.lease_secret)
    fragment = bytes(t.payload)
    if not keys_add_up(data, count.keys, count.colons, fragment):
        return None
    payload = _payload(fragment)
    if payload is None:
        return None
    task = m.AssignedTask(
        task_id=t.task_id, queue=t.queue, kind=t.kind, payload=payload, attempt=t.attempt,
        max_attempts=t.max_attempts, idempotency_key=t.idempotency_key, created_at=parse_time(t.created_at),
        due_at=parse_time(t.due_at), priority=t.priority if t.priority is not UNSET else 0,
        concurrency_key=t.concurrency_key if t.concurrency_key is not UNSET else None,
        concurrency_token=parse_counter(t.concurrency_token) if t.concurrency_token is not UNSET else None,
        effect_uncertain=t.effect_uncertain is True,
        retry_of=t.retry_of if t.retry_of is not UNSET else None)
    return m.TaskAssign(id=frame.id, session_id=frame.session_id, task=task, lease=lease)


def _payload(fragment: bytes) -> JsonText | None:
    """The payload as canonical text when the number rules hold, else None."""
    quick = canonical_fragment(fragment, max_depth=MAX_PAYLOAD_DEPTH)
    if quick is not None:
        return quick
    text, problem = dumps(scan(fragment.decode("utf-8"), max_depth=MAX_PAYLOAD_DEPTH), check_numbers=True)
    return None if problem is not None else JsonText(text)


def _cancel(frame: _Cancel, data: bytes) -> m.TaskCancel | None:
    b = frame.body
    count = _Count(_ENVELOPE_KEYS + 4, frame.id, frame.session_id, b.task_id, b.lease_id, b.cancel_requested_at,
                   b.grace_expires_at)
    count.optional(b.reason)
    if not keys_add_up(data, count.keys, count.colons):
        return None
    return m.TaskCancel(id=frame.id, session_id=frame.session_id, task_id=b.task_id, lease_id=b.lease_id,
                        cancel_requested_at=parse_time(b.cancel_requested_at),
                        grace_expires_at=parse_time(b.grace_expires_at),
                        reason=b.reason if b.reason is not UNSET else None)
