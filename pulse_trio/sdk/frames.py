"""The worker's hot frames: lease commands encoded from pre-encoded parts, command acks decoded in one pass.

A lease sends the same task id, lease id and secret in every
``task.start``, ``task.renew`` and ``task.finish``, and a connection the
same session id: :class:`LeaseFrames` encodes them once, and a command's
frame is those bytes joined around its id, revision and (for a finish) the
outcome's tail, which is encoded once per outcome. The bytes are exactly
the reference encoder's (``contract.encoder``); ``tests/sdk/test_frames.py``
compares the two. The fields spelled here are held to their declaration in
``contract/frames.py`` at import (``SPELLED``), and the key counts come from it.

The values need no validating again: the lease's fields come from an offer
that passed every check, the ids and revisions are the SDK's own, and an
outcome's tail is checked once by :func:`finish_tail` against the rules
``TaskFinish`` enforces.

:func:`decode_command_ack` reads the frequent answer, the ack of a lease
command, in one typed msgspec pass and checks it against the pending
request it names; :func:`decode_offer` reads an offer (``task.assign``)
the same way, against the session it is for. Anything irregular (another
shape, a failed check, a repeated key) returns None and goes to the
reference path of :mod:`~pulse_trio.sdk.protocol`, which gives it its
exact verdict.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, Struct

from pulse_trio.contract import _checks as c
from pulse_trio.contract import derive
from pulse_trio.contract import frames as fr
from pulse_trio.contract import grammar as g
from pulse_trio.contract import limits as lim
from pulse_trio.contract import messages as m
from pulse_trio.contract.errors import InvalidMessage
from pulse_trio.contract.fast_client import keys_add_up
from pulse_trio.contract.fast_server import CommandResultBody, payload_text
from pulse_trio.contract.jsontext import JsonText, utf8_size
from pulse_trio.contract.limits import PROTOCOL_VERSION
from pulse_trio.contract.scanner import ScanError
from pulse_trio.contract.trusted import trusted

_json = msgspec.json.encode

#: The fields this module spells out (in bytes, in reads), as ``contract/frames.py`` declares them in wire order.
SPELLED: dict[fr.Obj, tuple[str, ...]] = {
    fr.COMMAND_BODY: ("task_id", "lease_id", "lease_secret", "revision"),
    fr.FINISH_BODY: ("task_id", "lease_id", "lease_secret", "revision", "status", "result", "error_code",
                     "error_message", "retryable"),
    fr.COMMAND_RESULT: ("receipt", "lease"),
    fr.RECEIPT: ("command", "task_id", "lease_id", "revision", "committed_at", "duplicate"),
    fr.LEASE: ("lease_id", "task_id", "lease_secret", "revision", "epoch", "state", "expires_at",
               "cancel_requested_at"),
    fr.ASSIGN_BODY: ("task", "lease"),
    fr.TASK: ("task_id", "queue", "kind", "payload", "attempt", "max_attempts", "idempotency_key", "created_at",
              "due_at", "priority", "concurrency_key", "concurrency_token", "effect_uncertain", "retry_of"),
}
#: The optional task fields an offer sends only away from their default (``decode_offer`` refuses the default).
_REFUSED_DEFAULTS = ("priority", "effect_uncertain")
if tuple(f.name for f in fr.TASK.fields if f.refuse_default) != _REFUSED_DEFAULTS:
    raise TypeError("contract/frames.py refuses the defaults of other task fields than decode_offer does: change both")
for _obj, _names in SPELLED.items():
    if tuple(f.name for f in _obj.fields) != _names:
        raise TypeError(f"sdk/frames.py spells {_obj.name} as {_names}; contract/frames.py declares "
                        f"{tuple(f.name for f in _obj.fields)}: change both")

#: A lease command's type, the start of its frame, and the prefix of its request ids.
COMMANDS: dict[type, tuple[str, bytes, str]] = {
    cls: (cls.TYPE, b'{"protocol_version":' + _json(PROTOCOL_VERSION) + b',"type":' + _json(cls.TYPE)
          + b',"id":"', prefix)
    for cls, prefix in ((m.TaskStart, "s"), (m.TaskRenew, "n"), (m.TaskFinish, "f"))
}
#: The end of a start or renewal: the revision's closing quote, the body, the frame.
PLAIN_TAIL = b'"}}'


class LeaseFrames:
    """One lease's fixed request fields, encoded once (the body from ``task_id`` to ``"revision":"``)."""

    __slots__ = ("task_id", "lease_id", "lease_secret", "body")

    def __init__(self, task_id: str, lease_id: str, lease_secret: str) -> None:
        self.task_id = task_id
        self.lease_id = lease_id
        self.lease_secret = lease_secret
        self.body = (b'{"task_id":' + _json(task_id) + b',"lease_id":' + _json(lease_id)
                     + b',"lease_secret":' + _json(lease_secret) + b',"revision":"')


def session_part(session_id: str) -> bytes:
    """What follows a request's id on one connection: its session, and the body's key."""
    return b'","session_id":' + _json(session_id) + b',"body":'


def command_frame(cls: type, request_id: str, session: bytes, lease: LeaseFrames, revision: int,
                  tail: bytes) -> bytes:
    """The frame of one lease command (``session`` from :func:`session_part`, ``tail`` from :func:`finish_tail` or PLAIN_TAIL)."""
    return b"".join((COMMANDS[cls][1], request_id.encode(), session, lease.body, str(revision).encode(), tail))


def finish_tail(status: str, result: str, error_code: str = "", error_message: str = "",
                retryable: bool = False) -> bytes:
    """A finish's fields after the revision, checked by the rules ``TaskFinish`` enforces.

    Raises ``InvalidMessage`` as building the message would; a ``JsonText``
    result is canonical already and is not parsed again.
    """
    c.one_of(status, "status", m.STATUSES)
    if type(result) is not JsonText:
        if not isinstance(result, str):
            raise InvalidMessage("result", "must be JSON text (str); see JsonText.from_value")
        try:
            result = JsonText.parse(result, max_depth=lim.MAX_RESULT_DEPTH)
        except ScanError as exc:
            raise InvalidMessage("result", f"not strict JSON: {exc}") from None
    c.need(result != "null", "result", "must not be null")
    c.need(utf8_size(result) <= lim.MAX_RESULT_BYTES, "result", "must be at most 262144 UTF-8 bytes")
    m.check_outcome(status, error_code, error_message, retryable)
    parts = [b'","status":', _json(status), b',"result":', result.encode()]
    if error_code:
        parts += (b',"error_code":', _json(error_code))
    if error_message:
        parts += (b',"error_message":', _json(error_message))
    if retryable:
        parts.append(b',"retryable":true')
    parts.append(b"}}")
    return b"".join(parts)


class LeaseRequest:
    """A pending lease command as the session checks its answer (the frame itself is sent and gone)."""

    __slots__ = ("id", "TYPE", "task_id", "lease_id", "revision", "revision_text")

    def __init__(self, request_id: str, command: str, lease: LeaseFrames, revision: int) -> None:
        self.id = request_id
        self.TYPE = command
        self.task_id = lease.task_id
        self.lease_id = lease.lease_id
        self.revision = revision
        self.revision_text = str(revision)

    def __repr__(self) -> str:
        return f"LeaseRequest({self.TYPE} {self.id} {self.lease_id} revision {self.revision})"


# -- the ack of a lease command, in one pass ---------------------------------------------
class _CommandAck(Struct, tag="ack", tag_field="type", forbid_unknown_fields=True):
    protocol_version: Literal["1"]
    id: str
    session_id: str
    reply_to: str
    body: CommandResultBody


_ACK = msgspec.json.Decoder(_CommandAck)
#: How every canonical ack starts; other frames are left to the reference path at once.
ACK_START = b'{"protocol_version":' + _json(PROTOCOL_VERSION) + b',"type":"ack",'
#: The envelope's keys (protocol_version, type, id, session_id, reply_to, body); receipt and its fields.
_ACK_KEYS = derive.envelope_count(fr.FRAMES[m.Ack])[0] + 1 + len(fr.RECEIPT.fields)
#: A held lease: its key and its required fields.
_LEASE_KEYS = 1 + sum(f.presence == fr.REQUIRED for f in fr.LEASE.fields)

#: Values the ack path already checked, built without their checks running again.
_receipt = trusted(m.Receipt)
_lease = trusted(m.Lease)
_result = trusted(m.CommandResult)


def decode_command_ack(data: bytes, pending: dict[str, Any], session_id: str, epoch: int,
                       epoch_text: str) -> tuple[LeaseRequest, m.CommandResult] | None:
    """The pending lease command a well-formed, matching ack answers, and its body; else None.

    Accepts only what the reference path would answer with ``Answered``:
    this session, a pending lease command, its receipt (command, lease,
    revision), a lease that is the same one at a higher revision and this
    session's epoch, none after a first finish, one after a first start or
    renewal; every counter and time by its grammar; no repeated key.
    """
    try:
        ack = _ACK.decode(data)
    except derive.UNREADABLE:
        return None
    request = pending.get(ack.reply_to)
    if type(request) is not LeaseRequest or ack.session_id != session_id or not g.is_message_id(ack.id):
        return None
    r = ack.body.receipt
    if (r.command != request.TYPE or r.task_id != request.task_id or r.lease_id != request.lease_id
            or r.revision != request.revision_text):
        return None
    keys, colons = _ACK_KEYS, ack.id.count(":") + ack.reply_to.count(":") + r.committed_at.count(":")
    try:
        committed_at = g.parse_time(r.committed_at)
        lease = ack.body.lease
        if lease is UNSET:
            if not r.duplicate and request.TYPE != "task.finish":
                return None
            body = _result(_receipt(r.command, r.task_id, r.lease_id, request.revision, committed_at, r.duplicate),
                           None)
        else:
            if ((not r.duplicate and request.TYPE == "task.finish") or lease.lease_id != request.lease_id
                    or lease.task_id != request.task_id or lease.epoch != epoch_text
                    or lease.state not in m.LEASE_STATES):
                return None
            revision = g.parse_counter(lease.revision)
            if revision <= request.revision:
                return None
            keys += _LEASE_KEYS
            colons += lease.expires_at.count(":")
            cancel = None
            if lease.cancel_requested_at is not UNSET:
                keys += 1
                colons += lease.cancel_requested_at.count(":")
                cancel = g.parse_time(lease.cancel_requested_at)
            held = _lease(lease.lease_id, lease.task_id, revision, epoch, lease.state,
                          g.parse_time(lease.expires_at), None, cancel)
            body = _result(_receipt(r.command, r.task_id, r.lease_id, request.revision, committed_at, r.duplicate),
                           held)
    except ValueError:
        return None
    if data.count(b"\\") or data.count(b":") != keys + colons:
        return None  # a repeated key (msgspec keeps the last) or an escape: the reference path decides
    return request, body


# -- an offer, in one pass ------------------------------------------------------------------
#: The whole task.assign frame as its declaration makes it: the fast server path's struct (``derive`` keeps one).
_OFFER = msgspec.json.Decoder(derive.frame_struct(fr.FRAMES[m.TaskAssign], derive.struct(fr.ASSIGN_BODY)))
#: How every canonical offer starts; other frames are left to the reference path at once.
OFFER_START = b'{"protocol_version":' + _json(PROTOCOL_VERSION) + b',"type":"task.assign",'
#: The keys of an offer without its optional fields: the envelope's, the body's, the task's and the lease's.
_OFFER_KEYS = (derive.envelope_count(fr.FRAMES[m.TaskAssign])[0] + len(fr.ASSIGN_BODY.fields)
               + sum(f.presence == fr.REQUIRED for f in fr.TASK.fields)
               + sum(f.presence in (fr.REQUIRED, fr.VARIANT) for f in fr.LEASE.fields))
_OFFERED = "OFFERED"  # the state of an offered lease (``TaskAssign`` requires it)

#: Values the offer path has checked, built without their checks running again.
_assign = trusted(m.TaskAssign)
_task = trusted(m.AssignedTask)


def decode_offer(data: bytes, session_id: str, epoch: int, epoch_text: str,
                 kinds: dict[str, frozenset[str] | None], keyed: bool) -> m.TaskAssign | None:
    """The offer a well-formed ``task.assign`` to this session makes, if the session takes it; else None.

    Accepts only what the reference path would answer with ``Offered``:
    this session, a queue and kind it subscribed to, a keyed task only if
    it declared keys, an OFFERED lease of this task at this session's
    epoch; every id, secret, counter, time, integer and text by the rules
    ``AssignedTask``, ``Lease`` and ``TaskAssign`` enforce; a canonical
    payload; no repeated key. A queue or kind equal to one the session
    subscribed to (and checked in its hello) needs no grammar check.
    """
    try:
        frame = _OFFER.decode(data)
    except derive.UNREADABLE:
        return None
    task, lease = frame.body.task, frame.body.lease
    queue_kinds = kinds.get(task.queue, False)
    if (frame.session_id != session_id or queue_kinds is False or lease.epoch != epoch_text
            or lease.state != _OFFERED or lease.task_id != task.task_id or not g.is_message_id(frame.id)
            or not g.is_resource_id(task.task_id, g.TASK_PREFIX) or not g.is_resource_id(lease.lease_id, g.LEASE_PREFIX)
            or not g.is_secret(lease.lease_secret)
            or not (task.kind in queue_kinds if queue_kinds is not None else g.is_kind(task.kind))
            or not 1 <= task.attempt <= lim.MAX_INT32 or not 1 <= task.max_attempts <= lim.MAX_INT32
            or not (task.idempotency_key and g.is_text(task.idempotency_key, lim.MAX_IDEMPOTENCY_KEY_CHARS))):
        return None
    keys = _OFFER_KEYS
    colons = (frame.id.count(":") + task.queue.count(":") + task.kind.count(":") + task.idempotency_key.count(":")
              + task.created_at.count(":") + task.due_at.count(":") + lease.expires_at.count(":"))
    try:
        fragment = bytes(task.payload)
        payload = payload_text(fragment)
        created_at, due_at, expires_at = g.parse_time(task.created_at), g.parse_time(task.due_at), g.parse_time(
            lease.expires_at)
        revision = g.parse_counter(lease.revision)
        priority = 0
        if task.priority is not UNSET:
            keys += 1
            priority = task.priority
            if not lim.MIN_PRIORITY < priority <= lim.MAX_PRIORITY:  # the default 0 is omitted, never sent
                return None
        concurrency_key = concurrency_token = None
        if task.concurrency_key is not UNSET or task.concurrency_token is not UNSET:
            if (not keyed or task.concurrency_key is UNSET or task.concurrency_token is UNSET
                    or not g.is_concurrency_key(task.concurrency_key)):
                return None
            keys += 2
            colons += task.concurrency_key.count(":")
            concurrency_key, concurrency_token = task.concurrency_key, g.parse_counter(task.concurrency_token)
        effect_uncertain = False
        if task.effect_uncertain is not UNSET:
            if task.effect_uncertain is not True:  # only sent as true
                return None
            keys += 1
            effect_uncertain = True
        retry_of = None
        if task.retry_of is not UNSET:
            if not g.is_resource_id(task.retry_of, g.TASK_PREFIX) or task.retry_of == task.task_id:
                return None
            keys += 1
            retry_of = task.retry_of
        cancel_requested_at = None
        if lease.cancel_requested_at is not UNSET:
            keys += 1
            colons += lease.cancel_requested_at.count(":")
            cancel_requested_at = g.parse_time(lease.cancel_requested_at)
    except (ValueError, ScanError):  # derive.Decline and the grammar's refusals are ValueErrors
        return None
    if not keys_add_up(data, keys, colons, fragment):
        return None
    return _assign(frame.id, session_id,
                   _task(task.task_id, task.queue, task.kind, payload, task.attempt, task.max_attempts,
                         task.idempotency_key, created_at, due_at, priority, concurrency_key, concurrency_token,
                         effect_uncertain, retry_of),
                   _lease(lease.lease_id, lease.task_id, revision, epoch, _OFFERED, expires_at, lease.lease_secret,
                          cancel_requested_at))


__all__ = ["ACK_START", "COMMANDS", "LeaseFrames", "LeaseRequest", "OFFER_START", "PLAIN_TAIL", "command_frame",
           "decode_command_ack", "decode_offer", "finish_tail", "session_part"]
