"""Strict JSON scanning of a raw frame (docs/protocol.md §5.1, layer 2).

Built on the stdlib's C scanner, which is already strict about the grammar
(no trailing commas, no leading zeros, no control characters in strings, no
trailing data), with hooks for what it tolerates:

* duplicate keys, at any depth: ``object_pairs_hook``;
* ``NaN`` / ``Infinity`` / ``-Infinity``: ``parse_constant``;
* numbers are kept as their exact token text (``JsonNumber``) so a result
  is stored digit for digit; only short integer tokens become ``int``,
  because their ``repr`` *is* their text and the C encoder then stays fast;
* lone surrogate escapes (``"\\ud800"``) and nesting deeper than the limit
  are checked after parsing, by a walk that only runs when a cheap look at
  the raw text says it could find something.

The text must already be ``str``: invalid UTF-8 is the transport's problem
(close 1007), and ``json.loads`` on bytes would guess UTF-16/32.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from .limits import MAX_DEPTH, MAX_INTEGER_DIGITS, MAX_NUMBER_EXPONENT


class ScanError(ValueError):
    """The text is not strict JSON (maps to the ``invalid_json`` code)."""


@dataclass(frozen=True, slots=True)
class RawJson:
    """JSON text that encoding must splice in verbatim."""

    text: str


@dataclass(frozen=True, slots=True)
class JsonNumber(RawJson):
    """A JSON number token, kept as its exact text.

    Used for every fraction/exponent token and for integer tokens that
    ``int`` would not round-trip (``-0``) or that are long (over 20 digits).
    """

    @property
    def is_integer_token(self) -> bool:
        """True for tokens without fraction or exponent (``12``, ``-0``)."""
        return _INTEGER_TOKEN.fullmatch(self.text) is not None

    def exact(self) -> Decimal | None:
        """The number digit for digit, for range checks that must not round first.

        None when its exponent is past what a ``Decimal`` holds: such a number
        is far outside every range, and each caller says so in its own terms.
        """
        try:
            return Decimal(self.text)
        except ArithmeticError:
            return None


_INTEGER_TOKEN = re.compile(r"-?(?:0|[1-9][0-9]*)")
_NUMBER_PARTS = re.compile(r"-?([0-9]+)(?:\.[0-9]+)?(?:[eE][+-]?([0-9]+))?")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ScanError(f"duplicate key {key!r}")
            seen.add(key)
    return obj


def _constant(name: str) -> Any:
    raise ScanError(f"{name} is not a JSON value")


def _integer(token: str) -> int | JsonNumber:
    if len(token) > 20 or token == "-0":
        return JsonNumber(token)
    return int(token)


_DECODER = json.JSONDecoder(
    object_pairs_hook=_object,
    parse_float=JsonNumber,
    parse_int=_integer,
    parse_constant=_constant,
    strict=True,
)


def scan(text: str, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse strict JSON; numbers as ``int`` or ``JsonNumber``; raise ScanError."""
    if not isinstance(text, str):
        raise TypeError(f"scan() needs str, not {type(text).__name__}")
    try:
        value = _DECODER.decode(text)
    except ScanError:
        raise
    except RecursionError:
        raise ScanError(f"nesting deeper than {max_depth} levels") from None
    except ValueError as exc:  # json.JSONDecodeError
        raise ScanError(str(exc)) from None
    # Every container costs a bracket, so few brackets bound the depth.
    deep = text.count("{") + text.count("[") > max_depth
    # A lone surrogate can only come from a \uD8xx-\uDFxx escape, or from a
    # str built in Python (UTF-8 decoding never yields one).
    surrogates = (
        "\\ud" in text
        or "\\uD" in text
        or (not text.isascii() and _SURROGATE.search(text) is not None)
    )
    if deep or surrogates:
        _walk(value, max_depth, surrogates)
    return value


def _walk(value: Any, max_depth: int, surrogates: bool) -> None:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        kind = type(node)
        if kind is str:
            if surrogates and _SURROGATE.search(node):
                raise ScanError("lone surrogate in a string")
            continue
        if depth > max_depth:
            raise ScanError(f"nesting deeper than {max_depth} levels")
        if kind is dict:
            if surrogates:
                for key in node:
                    if _SURROGATE.search(key):
                        raise ScanError("lone surrogate in an object key")
            items = node.values()
        else:
            items = node
        for item in items:
            sub = type(item)
            if sub is dict or sub is list:
                stack.append((item, depth + 1))
            elif sub is str and surrogates and _SURROGATE.search(item):
                raise ScanError("lone surrogate in a string")


def number_problem(token: str) -> str | None:
    """Why a number token is refused inside a result or payload, or None.

    The rule is textual, so it is the same for every consumer: exponent
    magnitude over 308, or more than 4300 digits before the point.
    """
    if len(token) <= 24 and "e" not in token and "E" not in token:
        return None  # the common case, decided without a regex
    match = _NUMBER_PARTS.fullmatch(token)
    if match is None:
        return f"{token[:40]} is not a JSON number"
    integer, exponent = match.groups()
    if len(integer) > MAX_INTEGER_DIGITS:
        return f"number has {len(integer)} integer digits; at most {MAX_INTEGER_DIGITS}"
    if exponent is not None:
        exponent = exponent.lstrip("0")
        if len(exponent) > 3 or int(exponent or "0") > MAX_NUMBER_EXPONENT:
            return f"number {token[:40]} has an exponent beyond ±{MAX_NUMBER_EXPONENT}"
    return None
