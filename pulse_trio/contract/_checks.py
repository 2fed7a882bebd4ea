"""Field checks shared by the message constructors.

Each raises ``InvalidMessage`` naming the field. Messages are formatted only
on failure, because these run for every field of every decoded frame.
"""

from __future__ import annotations

from datetime import datetime
from typing import Callable

from . import grammar as g
from .errors import InvalidMessage
from .jsontext import JsonText
from .scanner import ScanError


def need(ok: bool, field: str, reason: str) -> None:
    if not ok:
        raise InvalidMessage(field, reason)


def string(value: object, field: str, rule: Callable[[str], bool], what: str) -> None:
    if not (isinstance(value, str) and rule(value)):
        raise InvalidMessage(field, f"must be {what}, got {value!r:.80}")


def label(value: object, field: str, max_chars: int) -> None:
    if not (isinstance(value, str) and g.is_label(value, max_chars)):
        raise InvalidMessage(field, f"must be 1..{max_chars} chars without control characters, got {value!r:.80}")


def text(value: object, field: str, max_chars: int, *, empty: bool = True) -> None:
    if not (isinstance(value, str) and (empty or value) and g.is_text(value, max_chars)):
        least = 0 if empty else 1
        raise InvalidMessage(field, f"must be {least}..{max_chars} chars without lone surrogates, got {value!r:.80}")


def resource_id(value: object, field: str, prefix: str) -> None:
    if not (isinstance(value, str) and g.is_resource_id(value, prefix)):
        raise InvalidMessage(field, f"must be a {prefix}<ULID> id, got {value!r:.80}")


def message_id(value: object, field: str) -> None:
    string(value, field, g.is_message_id, "a message id")


def secret(value: object, field: str) -> None:
    # Never echo a secret-like value into an error message.
    need(isinstance(value, str) and g.is_secret(value), field, "must be a canonical 43-char secret")


def counter(value: object, field: str) -> None:
    if not g.is_counter(value):
        raise InvalidMessage(field, f"must be an int in 1..2**64-1, got {value!r:.40}")


def integer(value: object, field: str, low: int, high: int) -> None:
    if not (type(value) is int and low <= value <= high):
        raise InvalidMessage(field, f"must be an int in {low}..{high}, got {value!r:.40}")


def boolean(value: object, field: str) -> None:
    if type(value) is not bool:
        raise InvalidMessage(field, f"must be a bool, got {value!r:.40}")


def aware(value: object, field: str) -> None:
    if not (isinstance(value, datetime) and value.utcoffset() is not None):
        raise InvalidMessage(field, f"must be a timezone-aware datetime, got {value!r:.60}")


def one_of(value: object, field: str, allowed: frozenset[str]) -> None:
    if value not in allowed:
        raise InvalidMessage(field, f"must be one of {sorted(allowed)}, got {value!r:.40}")


def json_text(obj: object, field: str, max_depth: int) -> None:
    """Accept a JsonText as is; parse and canonicalize any other str in place."""
    value = getattr(obj, field)
    if type(value) is JsonText:
        return
    if not isinstance(value, str):
        raise InvalidMessage(field, "must be JSON text (str); see JsonText.from_value")
    try:
        object.__setattr__(obj, field, JsonText.parse(value, max_depth=max_depth))
    except ScanError as exc:
        raise InvalidMessage(field, f"not strict JSON: {exc}") from None


def sequence(obj: object, field: str) -> tuple:
    """Freeze a sequence field into a tuple, in place."""
    value = getattr(obj, field)
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise InvalidMessage(field, "must be a sequence")
    value = tuple(value)
    object.__setattr__(obj, field, value)
    return value
