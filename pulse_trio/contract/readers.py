"""Typed reads of scanned JSON, for the frame decoders.

A read either returns a Python value of the right wire type or raises
``Bad`` naming the JSON path of the field (``body.subscriptions[0]``). Value
rules (grammars, ranges, cross-field rules) belong to the message
constructors; ``build`` reports their ``InvalidMessage`` at the same paths.
"""

from __future__ import annotations

import dataclasses
import functools
from datetime import datetime
from typing import Any, Callable

from . import errors as e
from . import frames as fr
from . import grammar as g
from .errors import InvalidMessage
from .jsontext import JsonText, dumps, utf8_size
from .limits import MAX_RESULT_BYTES
from .scanner import JsonNumber


class Bad(Exception):
    """One rule broken at one path; the codec turns it into a ProtocolError."""

    def __init__(self, path: str, reason: str, code: str = e.INVALID_FRAME) -> None:
        super().__init__(f"{path}: {reason}")
        self.code = code
        self.text = f"{path}: {reason}"


def show(value: Any) -> str:
    """A short JSON-ish rendering of a value for an error message."""
    if value is None:
        return "null"
    if isinstance(value, JsonNumber):
        return value.text[:40]
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) is dict:
        return "an object"
    if type(value) is list:
        return "an array"
    return repr(value)[:60]


class Shape:
    """The field names of one closed JSON object."""

    def __init__(self, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
        self.required = required
        self.optional = optional
        self.allowed = frozenset(required + optional)

    def check(self, value: Any, path: str, strict: bool = True) -> dict[str, Any]:
        if type(value) is not dict:
            raise Bad(path, f"must be an object, got {show(value)}")
        if strict and not value.keys() <= self.allowed:
            key = next(k for k in value if k not in self.allowed)
            raise Bad(path, f"unknown field {key!r}")
        for key in self.required:
            if key not in value:
                raise Bad(path, f"missing required field {key!r}")
        return value


def string(obj: dict, key: str, path: str) -> str:
    value = obj[key]
    if type(value) is not str:
        raise Bad(f"{path}.{key}", f"must be a string, got {show(value)}")
    return value


def counter(obj: dict, key: str, path: str) -> int:
    value = string(obj, key, path)
    try:
        return g.parse_counter(value)
    except ValueError:
        raise Bad(f"{path}.{key}", f"must be a canonical decimal string 1..2**64-1, got {show(value)}") from None


def integer(obj: dict, key: str, path: str) -> int:
    """A JSON integer token (``1.0``, ``1e0``, ``true`` are not); ranges come later."""
    value = obj[key]
    if type(value) is int:
        return value
    if isinstance(value, JsonNumber) and value.is_integer_token:
        if value.text == "-0":
            return 0
        raise Bad(f"{path}.{key}", f"integer {show(value)} is out of range")
    raise Bad(f"{path}.{key}", f"must be an integer token (no fraction or exponent), got {show(value)}")


def boolean(obj: dict, key: str, path: str) -> bool:
    value = obj[key]
    if type(value) is not bool:
        raise Bad(f"{path}.{key}", f"must be true or false, got {show(value)}")
    return value


def time(obj: dict, key: str, path: str) -> datetime:
    value = string(obj, key, path)
    try:
        return g.parse_time(value)
    except ValueError:
        raise Bad(f"{path}.{key}", f"must be UTC RFC 3339 with Z and at most 6 fractional digits, "
                                   f"got {show(value)}") from None


def array(obj: dict, key: str, path: str, most: int) -> list:
    value = obj[key]
    if type(value) is not list:
        raise Bad(f"{path}.{key}", f"must be an array, got {show(value)}")
    if not 0 < len(value) <= most:
        raise Bad(f"{path}.{key}", f"must hold 1..{most} items, got {len(value)}")
    return value


def optional(obj: dict, key: str, path: str, read: Callable[[dict, str, str], Any], default: Any = None) -> Any:
    return read(obj, key, path) if key in obj else default


def build(cls: type, where: Callable[[str], str], **fields: Any) -> Any:
    """Construct a message or body, reporting a constructor refusal at its path."""
    try:
        return cls(**fields)
    except InvalidMessage as exc:
        raise Bad(where(exc.field), exc.reason) from None


@functools.cache
def shape(obj: fr.Obj, variant: bool = False) -> Shape:
    """The closed shape of a declared object (``frames``)."""
    return Shape(*obj.names(variant))


@functools.cache
def envelope(frame: fr.Frame) -> Shape:
    return Shape(*frame.envelope())


@functools.cache
def _order(obj: fr.Obj, cls: type, first: tuple[str, ...]) -> tuple[tuple[fr.Field, Any, Callable], ...]:
    """The fields in reading order, each with its default in ``cls`` and its reader."""
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    return tuple((f, defaults.get(f.name), _reader(f)) for f in obj.read_order(first))


def fields(obj: fr.Obj, tree: dict, path: str, strict: bool, *, variant: bool = False, cls: type | None = None,
           first: dict[str, tuple[str, ...]] | None = None, given: dict[str, Any] | None = None,
           only: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Read a declared object's fields present in ``tree`` (its shape checked), in the reference order.

    ``first`` names, per object, fields read before the rest (which field a
    frame with several faults names is part of the contract); ``given``
    holds open JSON read earlier (a result, a payload); ``cls`` is the
    message a flat body's fields sit on (for its defaults); ``only``, if
    given, limits the read to those fields. Nested objects are checked and
    built at their turn.
    """
    first = first or {}
    out: dict[str, Any] = {}
    for f, default, read in _order(obj, cls or obj.cls, first.get(obj.name, ())):
        name = f.name
        if name not in tree or (f.presence == fr.VARIANT and not variant) or (only and name not in only):
            continue
        value = read(f, tree, path, strict, first, given)
        if f.refuse_default and value == default:
            raise Bad(f"{path}.{name}", f.refuse_default)
        out[name] = value
    return out


def _reader(f: fr.Field) -> Callable[..., Any]:
    """How one declared field is read: ``read(field, tree, path, strict, first, given)``."""
    kind = f.kind
    if isinstance(kind, fr.Obj):
        return lambda f, tree, path, strict, first, given: _object(
            f.kind, tree[f.name], f"{path}.{f.name}", strict, f.variant, first, given)
    if isinstance(kind, fr.Many):
        return lambda f, tree, path, strict, first, given: tuple(
            _object(f.kind.item, item, f"{path}.{f.name}[{i}]", strict, False, first, given)
            for i, item in enumerate(array(tree, f.name, path, f.kind.most)))
    if kind == "json":
        return lambda f, tree, path, strict, first, given: given[f.name]
    if kind == "strs":
        return _strings
    scalar = _READ[kind]
    return lambda f, tree, path, strict, first, given: scalar(tree, f.name, path)


def _strings(f: fr.Field, tree: dict, path: str, strict: bool, first: Any, given: Any) -> list:
    value = array(tree, f.name, path, f.most)
    for j, item in enumerate(value):
        if type(item) is not str:
            raise Bad(f"{path}.{f.name}[{j}]", f"must be a string, got {show(item)}")
    return value


def _object(obj: fr.Obj, value: Any, path: str, strict: bool, variant: bool, first: dict, given: Any) -> Any:
    value = shape(obj, variant).check(value, path, strict)
    return build(obj.cls, under(path), **fields(obj, value, path, strict, variant=variant, first=first, given=given))


def under(path: str) -> Callable[[str], str]:
    return lambda field: f"{path}.{field}"


def envelope_or(container: str) -> Callable[[str], str]:
    """Paths for a flat message: envelope fields at the top, the rest inside."""
    return lambda field: field if field in ("id", "session_id", "reply_to") else f"{container}.{field}"


_READ: dict[str, Callable[[dict, str, str], Any]] = {
    "str": string, "counter": counter, "int": integer, "bool": boolean, "time": time,
}


def json_value(value: Any, path: str, *, nullable: bool) -> JsonText:
    """Result/payload rules, which outrank every other rule of a frame (docs/protocol.md §4.8).

    Order as listed there: null, then size, then number text.
    """
    if value is None and not nullable:
        raise Bad(path, "must not be null", e.INVALID_RESULT)
    text, problem = dumps(value, check_numbers=True)
    if not nullable and utf8_size(text) > MAX_RESULT_BYTES:
        raise Bad(path, f"is {utf8_size(text)} UTF-8 bytes; at most {MAX_RESULT_BYTES}", e.RESULT_TOO_LARGE)
    if problem is not None:
        raise Bad(path, problem, e.INVALID_RESULT)
    return JsonText(text)


def message_type(tree: dict, own: dict[str, type], other: dict[str, type], direction: str) -> type:
    """The message class named by ``type``, refusing the other direction's types."""
    if "type" not in tree:
        raise Bad("frame", "missing required field 'type'")
    kind = tree["type"]
    if type(kind) is not str:
        raise Bad("type", f"must be a string, got {show(kind)}")
    if kind in other:
        raise Bad("type", f"{kind!r} is never sent {direction}")
    if kind not in own:
        raise Bad("type", f"unknown message type {kind!r}")
    return own[kind]
