"""The fast path for worker → server frames: compiled decoding of well-formed frames.

:func:`try_decode_client` returns the message a valid frame stands for, or
None; None means "ask the reference decoder" (``codec.scan_frame`` then
``codec.decode_client``), which gives every malformed frame its exact code
and message. So the fast path may decline anything, but it must never
accept a frame the reference decoder would refuse. It gets there with:

* msgspec structs that mirror the frames, closed (``forbid_unknown_fields``),
  with ``UNSET`` for optional fields so ``null`` is refused and presence is
  known. msgspec is as strict as the standard library's parser about the
  grammar (no NaN, no trailing data, no control characters, no lone
  surrogate escape), and its integer fields refuse ``1.0`` and ``true``;
* the one rule msgspec does not check, duplicate keys, checked by counting:
  outside the ``result`` fragment, a frame with no backslash has no quote
  inside its strings, so every colon there is a key's or one inside a
  string value. The colons must add up to exactly the keys the struct
  holds plus the colons of its string values; a repeated key (whose first
  value msgspec dropped) always leaves one colon over;
* the ``result`` fragment, the only open JSON in a worker frame, through the
  strict scanner and the result rules, as the reference decoder does;
* the message constructors, which check every grammar and range.

The UTF-8 of the frame has been checked by the WebSocket layer (close 1007).
"""

from __future__ import annotations

from typing import Literal

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

from . import messages as m
from .grammar import parse_counter
from .jsontext import JsonText, canonical_fragment, dumps, utf8_size
from .limits import MAX_RESULT_BYTES, MAX_RESULT_DEPTH
from .scanner import ScanError, scan

Version = Literal["1"]


class _Subscription(Struct, forbid_unknown_fields=True):
    queue: str
    kinds: list[str] | UnsetType = UNSET


class _ClientInfo(Struct, forbid_unknown_fields=True):
    name: str
    version: str


class _HelloBody(Struct, forbid_unknown_fields=True):
    worker_name: str
    subscriptions: list[_Subscription]
    cancellation_notifications: bool | UnsetType = UNSET
    concurrency_keys: bool | UnsetType = UNSET
    client: _ClientInfo | UnsetType = UNSET


class _CapacityBody(Struct, forbid_unknown_fields=True):
    sequence: str
    capacity: int
    drain: bool


class _ResumeBody(Struct, forbid_unknown_fields=True):
    instance_id: str
    instance_secret: str
    task_id: str
    lease_id: str
    lease_secret: str


class _CommandBody(Struct, forbid_unknown_fields=True):
    task_id: str
    lease_id: str
    lease_secret: str
    revision: str


class _FinishBody(Struct, forbid_unknown_fields=True):
    task_id: str
    lease_id: str
    lease_secret: str
    revision: str
    status: str
    result: Raw
    error_code: str | UnsetType = UNSET
    error_message: str | UnsetType = UNSET
    retryable: bool | UnsetType = UNSET


class _Hello(Struct, tag="worker.hello", tag_field="type", forbid_unknown_fields=True):
    protocol_version: Version
    id: str
    body: _HelloBody


class _Capacity(Struct, tag="worker.capacity", tag_field="type", forbid_unknown_fields=True):
    protocol_version: Version
    id: str
    session_id: str
    body: _CapacityBody


class _Resume(Struct, tag="worker.resume", tag_field="type", forbid_unknown_fields=True):
    protocol_version: Version
    id: str
    session_id: str
    body: _ResumeBody


class _Start(Struct, tag="task.start", tag_field="type", forbid_unknown_fields=True):
    protocol_version: Version
    id: str
    session_id: str
    body: _CommandBody


class _Renew(Struct, tag="task.renew", tag_field="type", forbid_unknown_fields=True):
    protocol_version: Version
    id: str
    session_id: str
    body: _CommandBody


class _Finish(Struct, tag="task.finish", tag_field="type", forbid_unknown_fields=True):
    protocol_version: Version
    id: str
    session_id: str
    body: _FinishBody


_DECODER = msgspec.json.Decoder(_Hello | _Capacity | _Resume | _Start | _Renew | _Finish)

# Keys and string values of the envelope: protocol_version, type, id, session_id, body.
_ENVELOPE_KEYS = 5


def try_decode_client(data: bytes) -> m.ClientMessage | None:
    """The message of a valid worker frame, or None (use the reference decoder)."""
    try:
        frame = _DECODER.decode(data)
        return _BUILD[type(frame)](frame, data)
    except (msgspec.DecodeError, ValueError, TypeError, ScanError):
        # msgspec's ValidationError is a DecodeError; InvalidMessage is a ValueError.
        return None


def _colons(*values: str) -> int:
    return sum(v.count(":") for v in values)


def keys_add_up(data: bytes, keys: int, strings: int, fragment: bytes = b"") -> bool:
    """True when no key can be repeated: see the module docstring."""
    if data.count(b"\\") != fragment.count(b"\\"):
        return False
    return data.count(b":") - fragment.count(b":") == keys + strings


def _command_fields(frame: _Start | _Renew | _Finish) -> dict:
    body = frame.body
    return {"id": frame.id, "session_id": frame.session_id, "task_id": body.task_id, "lease_id": body.lease_id,
            "lease_secret": body.lease_secret, "revision": parse_counter(body.revision)}


def _start(frame: _Start, data: bytes) -> m.TaskStart | None:
    b = frame.body
    if not keys_add_up(data, _ENVELOPE_KEYS + 4, _colons(frame.id, frame.session_id, b.task_id, b.lease_id,
                                                         b.lease_secret, b.revision)):
        return None
    return m.TaskStart(**_command_fields(frame))


def _renew(frame: _Renew, data: bytes) -> m.TaskRenew | None:
    b = frame.body
    if not keys_add_up(data, _ENVELOPE_KEYS + 4, _colons(frame.id, frame.session_id, b.task_id, b.lease_id,
                                                         b.lease_secret, b.revision)):
        return None
    return m.TaskRenew(**_command_fields(frame))


def _finish(frame: _Finish, data: bytes) -> m.TaskFinish | None:
    b = frame.body
    optional = [v for v in (b.error_code, b.error_message, b.retryable) if v is not UNSET]
    strings = _colons(frame.id, frame.session_id, b.task_id, b.lease_id, b.lease_secret, b.revision, b.status,
                      *(v for v in optional if type(v) is str))
    fragment = bytes(b.result)
    if not keys_add_up(data, _ENVELOPE_KEYS + 6 + len(optional), strings, fragment):
        return None
    result = _result(fragment)
    if result is None:
        return None
    return m.TaskFinish(**_command_fields(frame), status=b.status, result=result,
                        error_code=b.error_code if b.error_code is not UNSET else "",
                        error_message=b.error_message if b.error_message is not UNSET else "",
                        retryable=b.retryable if b.retryable is not UNSET else False)


def _result(fragment: bytes) -> JsonText | None:
    """The result as canonical text when every result rule holds, else None."""
    if fragment == b"null":
        return None
    quick = canonical_fragment(fragment, max_depth=MAX_RESULT_DEPTH)
    if quick is not None:
        return quick if utf8_size(quick) <= MAX_RESULT_BYTES else None
    value = scan(fragment.decode("utf-8"), max_depth=MAX_RESULT_DEPTH)
    if value is None:
        return None
    text, problem = dumps(value, check_numbers=True)
    if problem is not None or utf8_size(text) > MAX_RESULT_BYTES:
        return None
    return JsonText(text)


def _capacity(frame: _Capacity, data: bytes) -> m.WorkerCapacity | None:
    b = frame.body
    if not keys_add_up(data, _ENVELOPE_KEYS + 3, _colons(frame.id, frame.session_id, b.sequence)):
        return None
    return m.WorkerCapacity(id=frame.id, session_id=frame.session_id, sequence=parse_counter(b.sequence),
                            capacity=b.capacity, drain=b.drain)


def _resume(frame: _Resume, data: bytes) -> m.WorkerResume | None:
    b = frame.body
    if not keys_add_up(data, _ENVELOPE_KEYS + 5, _colons(frame.id, frame.session_id, b.instance_id,
                                                         b.instance_secret, b.task_id, b.lease_id,
                                                         b.lease_secret)):
        return None
    return m.WorkerResume(id=frame.id, session_id=frame.session_id, instance_id=b.instance_id,
                          instance_secret=b.instance_secret, task_id=b.task_id, lease_id=b.lease_id,
                          lease_secret=b.lease_secret)


def _hello(frame: _Hello, data: bytes) -> m.WorkerHello | None:
    b = frame.body
    keys = _ENVELOPE_KEYS - 1 + 2  # no session_id; worker_name, subscriptions
    strings = [frame.id, b.worker_name]
    subscriptions = []
    for sub in b.subscriptions:
        keys += 1
        strings.append(sub.queue)
        kinds = None
        if sub.kinds is not UNSET:
            keys += 1
            strings += sub.kinds
            kinds = tuple(sub.kinds)
        subscriptions.append(m.Subscription(sub.queue, kinds))
    client = None
    for flag in (b.cancellation_notifications, b.concurrency_keys):
        keys += flag is not UNSET
    if b.client is not UNSET:
        keys += 3
        strings += (b.client.name, b.client.version)
        client = m.ClientInfo(b.client.name, b.client.version)
    if not keys_add_up(data, keys, _colons(*strings)):
        return None
    return m.WorkerHello(
        id=frame.id, worker_name=b.worker_name, subscriptions=tuple(subscriptions),
        cancellation_notifications=b.cancellation_notifications is True,
        concurrency_keys=b.concurrency_keys is True, client=client)


_BUILD = {_Hello: _hello, _Capacity: _capacity, _Resume: _resume, _Start: _start, _Renew: _renew,
          _Finish: _finish}
