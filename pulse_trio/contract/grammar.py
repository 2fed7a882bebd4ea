"""Scalar grammars of the wire (docs/protocol.md §3), as pure functions.

Each ``is_*`` predicate is the exact rule the schema's pattern encodes (the
contract tests check the two agree). Parsers turn wire text into Python
values and raise ``ValueError``; formatters do the reverse. Generators for
ids and secrets live here too, so the server mints exactly what it accepts.
"""

from __future__ import annotations

import base64
import functools
import re
import secrets
import threading
import time
from datetime import datetime, timezone

from .limits import MAX_COUNTER

#: Queue and kind names; error codes; concurrency keys. The patterns are
#: public for documents that spell them (OpenAPI, messages); code asks the
#: ``is_*`` predicates below.
NAME_PATTERN = r"[a-z0-9][a-z0-9_.-]{0,63}"
ERROR_CODE_PATTERN = r"[a-z][a-z0-9_.]{0,63}"
CONCURRENCY_KEY_PATTERN = r"[!-~]{1,128}"
#: A fairness key (a tenant id, say) is spelled like a concurrency key.
FAIRNESS_KEY_PATTERN = CONCURRENCY_KEY_PATTERN

# fullmatch everywhere: ``$`` would also accept a trailing newline.
_MESSAGE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
_NAME = re.compile(NAME_PATTERN)
_ERROR_CODE = re.compile(ERROR_CODE_PATTERN)
_CONCURRENCY_KEY = re.compile(CONCURRENCY_KEY_PATTERN)
_COUNTER = re.compile(r"[1-9][0-9]{0,19}")
_SECRET = re.compile(r"[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]")
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
#: 26 chars of 5 bits hold 130 bits; a 128-bit ULID starts with 0-7.
ULID_PATTERN = r"[0-7][0-9A-HJKMNP-TV-Z]{25}"
_TEXT_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_TIME = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([01][0-9]|2[0-3]):([0-5][0-9]):([0-5][0-9])"
    r"(?:\.([0-9]{1,6}))?Z"
)

SESSION_PREFIX = "ses_"
INSTANCE_PREFIX = "ins_"
TASK_PREFIX = "tsk_"
LEASE_PREFIX = "lse_"
_RESOURCE_IDS = {
    prefix: re.compile(re.escape(prefix) + ULID_PATTERN)
    for prefix in (SESSION_PREFIX, INSTANCE_PREFIX, TASK_PREFIX, LEASE_PREFIX)
}


def is_message_id(text: str) -> bool:
    return _MESSAGE_ID.fullmatch(text) is not None


def is_queue(text: str) -> bool:
    return _NAME.fullmatch(text) is not None


is_kind = is_queue


def is_error_code(text: str) -> bool:
    return _ERROR_CODE.fullmatch(text) is not None


def is_concurrency_key(text: str) -> bool:
    return _CONCURRENCY_KEY.fullmatch(text) is not None


def is_fairness_key(text: str) -> bool:
    return _CONCURRENCY_KEY.fullmatch(text) is not None


def is_label(text: str, max_chars: int) -> bool:
    """Operator-facing text (worker name, client info): 1..max_chars, no controls."""
    return 0 < len(text) <= max_chars and _TEXT_FORBIDDEN.search(text) is None


def is_text(text: str, max_chars: int) -> bool:
    """Free text (error messages, reasons): any characters but lone surrogates."""
    return len(text) <= max_chars and _SURROGATE.search(text) is None


def is_secret(text: str) -> bool:
    """43 chars of unpadded base64url whose last char has zero unused bits."""
    return _SECRET.fullmatch(text) is not None


def is_resource_id(text: str, prefix: str) -> bool:
    return _RESOURCE_IDS[prefix].fullmatch(text) is not None


def is_session_id(text: str) -> bool:
    return _RESOURCE_IDS[SESSION_PREFIX].fullmatch(text) is not None


def is_instance_id(text: str) -> bool:
    return _RESOURCE_IDS[INSTANCE_PREFIX].fullmatch(text) is not None


def is_task_id(text: str) -> bool:
    return _RESOURCE_IDS[TASK_PREFIX].fullmatch(text) is not None


def is_lease_id(text: str) -> bool:
    return _RESOURCE_IDS[LEASE_PREFIX].fullmatch(text) is not None


def is_counter(value: int) -> bool:
    """A counter's value domain: 1 .. 2**64-1 (0 means "none", never sent)."""
    return type(value) is int and 0 < value <= MAX_COUNTER


def parse_counter(text: str) -> int:
    """Canonical decimal string → int; no sign, zero, leading zero or overflow."""
    if _COUNTER.fullmatch(text) is None:
        raise ValueError(f"{text[:30]!r} is not a canonical counter")
    value = int(text)
    if value > MAX_COUNTER:
        raise ValueError(f"{text!r} overflows uint64")
    return value


def format_counter(value: int) -> str:
    if not is_counter(value):
        raise ValueError(f"{value!r} is not a counter (1..2**64-1)")
    return str(value)


@functools.lru_cache(maxsize=1024)
def parse_time(text: str) -> datetime:
    """UTC RFC 3339 with ``Z`` and at most 6 fractional digits → aware datetime.

    Cached like :func:`format_time`: the frames of one batch share times.
    """
    match = _TIME.fullmatch(text)
    if match is None:
        raise ValueError(f"{text[:40]!r} is not a UTC RFC 3339 time ending in Z")
    year, month, day, hour, minute, second, fraction = match.groups()
    micros = int(fraction.ljust(6, "0")) if fraction else 0
    # datetime() rejects impossible dates (2026-02-30) and year 0.
    return datetime(
        int(year), int(month), int(day), int(hour), int(minute), int(second),
        micros, tzinfo=timezone.utc,
    )


@functools.lru_cache(maxsize=1024)
def format_time(value: datetime) -> str:
    """Always exactly 6 fractional digits, in UTC, ending in ``Z``.

    Cached: the frames of one batch share their times (``now``, one
    expiry), and a cache hit costs a hash instead of a formatting.
    """
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("times must be timezone-aware")
    utc = value.astimezone(timezone.utc)
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T"
        f"{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}.{utc.microsecond:06d}Z"
    )


def new_ulid(now_ms: int | None = None) -> str:
    """A ULID: 48-bit Unix milliseconds then 80 random bits, Crockford base32.

    Without ``now_ms`` the ULIDs this process makes increase (the ULID
    spec's monotonic mode): one made in the same millisecond as the last,
    or after the clock stepped back, is the last plus one. So ids one
    producer made list in the order it made them ("oldest first" is id
    order), however fast it submits.
    """
    global _last_ulid
    if now_ms is not None:
        if not 0 <= now_ms < 2**48:
            raise ValueError("ULID time must fit 48 bits of milliseconds")
        return _crockford((now_ms << 80) | int.from_bytes(secrets.token_bytes(10), "big"))
    fresh = ((time.time_ns() // 1_000_000) << 80) | int.from_bytes(secrets.token_bytes(10), "big")
    with _ULID_LOCK:  # threads share the sequence (store threads, producers' own threads)
        value = _last_ulid = fresh if fresh > _last_ulid else _last_ulid + 1
    return _crockford(value)


_ULID_LOCK = threading.Lock()
_last_ulid = 0


#: Every 10-bit value as its two Crockford characters: a 128-bit ULID is 13 lookups, not 26 (with a
#: shift and a list append each), and ids are made for every task and every lease.
_CROCKFORD_PAIRS = [_CROCKFORD[i >> 5] + _CROCKFORD[i & 31] for i in range(1024)]


def _crockford(value: int) -> str:
    """A 128-bit value as 26 Crockford base32 characters: 3 bits, twelve pairs of 5, then 5."""
    pair = _CROCKFORD_PAIRS
    return (_CROCKFORD[value >> 125] + pair[(value >> 115) & 1023] + pair[(value >> 105) & 1023]
            + pair[(value >> 95) & 1023] + pair[(value >> 85) & 1023] + pair[(value >> 75) & 1023]
            + pair[(value >> 65) & 1023] + pair[(value >> 55) & 1023] + pair[(value >> 45) & 1023]
            + pair[(value >> 35) & 1023] + pair[(value >> 25) & 1023] + pair[(value >> 15) & 1023]
            + pair[(value >> 5) & 1023] + _CROCKFORD[value & 31])


def new_id(prefix: str, now_ms: int | None = None) -> str:
    """A new resource id such as ``tsk_01J…``; ``prefix`` is one of the four."""
    if prefix not in _RESOURCE_IDS:
        raise ValueError(f"unknown resource prefix {prefix!r}")
    return prefix + new_ulid(now_ms)


def new_secret() -> str:
    """32 random bytes as canonical unpadded base64url (43 chars)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode("ascii")
