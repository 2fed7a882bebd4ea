"""Canonical JSON text for integrator data (``result``, ``payload``).

Results and payloads are stored and forwarded as text, never as Python
floats, so their numbers survive digit for digit. The canonical form is the
compact encoding (no insignificant whitespace, minimal string escapes, key
order kept) with every number token exactly as it was received.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from .limits import MAX_INTEGER_DIGITS
from .scanner import JsonNumber, RawJson, ScanError, number_problem, scan

# The stdlib C encoder cannot emit a number token verbatim, so raw fragments
# go out as a placeholder string and are spliced in afterwards. A lone
# surrogate is the one placeholder no valid string can contain (the scanner
# and the message constructors refuse them); the split count double-checks.
_PLACEHOLDER = "\udc00"
_QUOTED_PLACEHOLDER = '"\udc00"'


def dumps(value: Any, *, check_numbers: bool = False) -> tuple[str, str | None]:
    """Encode compactly, splicing ``RawJson`` fragments in verbatim.

    Returns the text and, with ``check_numbers``, the first number token
    that breaks the result/payload number rules (else None).
    """
    raws: list[str] = []
    problem: str | None = None

    def default(obj: object) -> str:
        nonlocal problem
        if not isinstance(obj, RawJson):
            raise TypeError(f"{type(obj).__name__} is not JSON-serializable")
        if check_numbers and problem is None and isinstance(obj, JsonNumber):
            problem = number_problem(obj.text)
        raws.append(obj.text)
        return _PLACEHOLDER

    text = json.dumps(
        value,
        ensure_ascii=False,
        separators=(",", ":"),
        allow_nan=False,
        check_circular=False,
        default=default,
    )
    if not raws:
        return text, problem
    parts = text.split(_QUOTED_PLACEHOLDER)
    if len(parts) != len(raws) + 1:
        raise ValueError("a string contains a lone surrogate")
    out = [parts[0]]
    for raw, part in zip(raws, parts[1:]):
        out.append(raw)
        out.append(part)
    return "".join(out), problem


_EXPONENT = re.compile(rb"[0-9][eE]")


def canonical_fragment(fragment: bytes, *, max_depth: int) -> JsonText | None:
    """The fragment as JsonText when it already is canonical and obeys every rule, else None.

    A shortcut for the common case, where a peer sends what our own encoder
    writes: if msgspec reads the fragment and writes it back byte for byte,
    it is strict JSON (msgspec refuses what the scanner refuses, but a
    repeated key or a non-canonical spelling would not come back the same)
    in canonical form (msgspec escapes strings exactly as ``dumps`` does and
    writes no whitespace; numbers that came back identical are their own
    tokens). What msgspec cannot vouch for is excluded first: a fragment
    long enough to hold a number over the digit limit, one with an exponent
    (``5e-324`` is a valid float beyond the exponent rule), one with more
    brackets than the depth allows. None means: decide with :func:`scan`.
    """
    if (len(fragment) > MAX_INTEGER_DIGITS or fragment.count(b"{") + fragment.count(b"[") > max_depth
            or _EXPONENT.search(fragment) is not None):
        return None
    try:
        if msgspec.json.encode(msgspec.json.decode(fragment)) != fragment:
            return None
    except (msgspec.DecodeError, TypeError, ValueError):
        return None
    return JsonText(fragment.decode("utf-8"))


def utf8_size(text: str) -> int:
    """UTF-8 byte length, without encoding ASCII text."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


class NumberOutOfRange(ValueError):
    """A number a worker could not read (its exponent or its digits past the protocol's rules)."""


class JsonText(str):
    """Canonical compact JSON text of one valid JSON value.

    A ``str``, so it is stored and compared as text; constructing one
    through ``parse``/``from_value`` is what guarantees it is valid.
    """

    __slots__ = ()

    @classmethod
    def parse(cls, text: str, *, max_depth: int, check_numbers: bool = False) -> JsonText:
        """Validate strictly (as a frame would be) and canonicalize.

        ``check_numbers``: also hold every number to the payload and result
        rules of the worker protocol (:exc:`NumberOutOfRange` otherwise), so
        that every worker can read the value.
        """
        if type(text) is cls and not check_numbers:
            return text
        value = scan(text, max_depth=max_depth)
        encoded, problem = dumps(value, check_numbers=check_numbers)
        if problem:
            raise NumberOutOfRange(problem)
        return cls(encoded)

    @classmethod
    def from_value(cls, value: Any, *, max_depth: int, check_numbers: bool = False) -> JsonText:
        """Encode a Python value (dict/list/str/int/float/bool/None)."""
        try:
            encoded, _ = dumps(value)
        except ValueError as exc:  # NaN, Infinity, lone surrogates
            raise ScanError(str(exc)) from None
        return cls.parse(encoded, max_depth=max_depth, check_numbers=check_numbers)

    def load(self) -> Any:
        """The value, numbers as ``int`` or exact ``JsonNumber``."""
        return scan(self)

    def __repr__(self) -> str:
        return f"JsonText({str.__repr__(self)})"
