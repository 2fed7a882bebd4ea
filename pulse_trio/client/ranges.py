"""The range of every numeric producer input, in one table.

Why one table: the OpenAPI document, the HTTP API's body and query
checks, ``pulse-trio submit``'s flags and :func:`~pulse_trio.client.producer.build_task`
all read the bounds from here, so a value the document allows is never
refused by the code behind it, and a value it forbids never reaches a
column that cannot hold it (a 5xx). The bounds follow the columns and the
worker protocol: durations are stored as whole milliseconds in INT
columns and travel as int32 ``*_ms`` fields, so no duration exceeds
``MAX_INT32`` ms (about 24.8 days); counts are INT as well.

A duration is given in seconds with decimals and kept to the millisecond
(rounded): ``lease_ttl: 2.0004`` is a 2000 ms lease. The bounds apply to the
value as given, before rounding.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import re
from decimal import Decimal
from typing import Any, Final

from pulse_trio.cluster_settings import LEASE_TTL_MIN_MS
from pulse_trio.contract.limits import MAX_INT32, MAX_PRIORITY, MIN_PRIORITY

#: A number as a command line or a query string gives it: ASCII digits, a point, an exponent.
_DECIMAL_TEXT = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")

#: The longest duration a column or a protocol field holds: MAX_INT32 ms, in seconds.
MAX_DURATION_S: Final = Decimal(MAX_INT32) / 1000
#: The shortest lease a task may ask for: the cluster's own shortest (``cluster_settings``).
MIN_LEASE_TTL_S: Final = Decimal(LEASE_TTL_MIN_MS) / 1000
#: The furthest ahead ``delay`` may put a task: ten years (3650 days).
MAX_DELAY_S: Final = Decimal(3650 * 86400)
#: The earliest ``due_at``: a task's pick-up time lies up to nine priority steps
#: before it, and must stay within what a DATETIME column and Python hold.
EARLIEST_DUE_AT: Final = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
#: ``due_at`` on the wire: UTC RFC 3339 ending in ``Z``, years 1970..9999.
DUE_AT_PATTERN: Final = r"^(19[7-9][0-9]|[2-9][0-9]{3})-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?Z$"
#: A cancel's reason, in characters: what ``cancel_intents.reason`` holds, so
#: the reason shown afterwards is the one given (a longer one is refused, not cut).
MAX_CANCEL_REASON_CHARS: Final = 255
#: A page of ``GET /v1/tasks`` / ``Client.list``.
MAX_PAGE: Final = 1000
DEFAULT_PAGE: Final = 100
#: The most tasks one ``POST /v1/tasks/batch`` (``submit_many``) takes: one transaction, all or nothing.
MAX_BATCH: Final = 1000
#: The longest one long-poll for an outcome holds a request open; a client waiting longer asks again.
MAX_WAIT_S: Final = Decimal(60)


class OutOfRange(ValueError):
    """A value outside its range, or of the wrong kind; the message names the field and the range."""


@dataclasses.dataclass(frozen=True, slots=True)
class Range:
    """One numeric input: integer or decimal, its inclusive bounds, unit and default."""

    name: str
    lo: Decimal
    hi: Decimal
    integer: bool = False
    #: ``s`` for durations in seconds, else empty.
    unit: str = ""
    default: int | float | None = None

    @property
    def spelled(self) -> str:
        """The range for people: ``0..9``, ``0.5..2147483.647 seconds``."""
        text = f"{_plain(self.lo)}..{_plain(self.hi)}"
        if self.integer:
            return f"an integer {text}"
        return f"{text} seconds" if self.unit == "s" else text

    def schema(self, description: str = "") -> dict[str, Any]:
        """Its JSON Schema (OpenAPI 3.1): type, minimum, maximum and default."""
        out: dict[str, Any] = {"type": "integer" if self.integer else "number",
                               "minimum": _number(self.lo), "maximum": _number(self.hi)}
        if self.default is not None:
            out["default"] = self.default
        if description:
            out["description"] = description
        return out

    def check(self, value: Any) -> int | float:
        """The value if it is of the right kind and within bounds; else OutOfRange."""
        if self.integer:
            whole = isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value()
            if type(value) is not int and not whole:
                raise OutOfRange(f"{self.name} must be {self.spelled}")
            number = Decimal(value)
        else:
            if type(value) is bool or not isinstance(value, (int, float, Decimal)):
                raise OutOfRange(f"{self.name} must be a number: {self.spelled}")
            number = Decimal(value) if not isinstance(value, float) else Decimal(repr(value))
            if not number.is_finite():
                raise OutOfRange(f"{self.name} must be a finite number: {self.spelled}")
        if number < self.lo and self.lo == 0:
            raise OutOfRange(f"{self.name} must not be negative: {self.spelled}")
        if not self.lo <= number <= self.hi:
            bounds = f"{_plain(self.lo)}..{_plain(self.hi)}" if self.integer else self.spelled
            raise OutOfRange(f"{self.name} must be {bounds} (got {_shown(number)})")
        return int(number) if self.integer else float(number)

    def check_text(self, text: str) -> int | float:
        """A command-line or query-string value: decimal text, then :meth:`check`."""
        text = text.strip()
        if self.integer:
            digits = text[1:] if text[:1] == "-" else text
            if not digits.isascii() or not digits.isdigit() or len(digits) > 40:
                raise OutOfRange(f"{self.name} must be {self.spelled}")
            try:
                return self.check(int(text))
            except OutOfRange:
                raise OutOfRange(f"{self.name} must be {self.spelled} (got {text[:40]})") from None
        if not _DECIMAL_TEXT.fullmatch(text):  # Decimal alone also reads "0_5" (as 5), "Infinity" and "NaN"
            raise OutOfRange(f"{self.name} must be a number: {self.spelled}")
        try:
            number = Decimal(text)
        except ArithmeticError:  # an exponent beyond what Decimal holds
            raise OutOfRange(f"{self.name} must be a number: {self.spelled}") from None
        return self.check(number)

    def milliseconds(self, value: Any) -> int:
        """A checked duration in whole milliseconds (rounded)."""
        seconds = self.check(value)
        return max(1, round(Decimal(repr(seconds)) * 1000))

    def argparse_type(self):  # noqa: ANN201 (argparse wants a callable)
        """The ``type=`` of a flag: the same check, as argparse's error."""
        def parse(text: str) -> int | float:
            try:
                return self.check_text(text)
            except OutOfRange as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None

        parse.__name__ = self.name
        return parse


def _number(value: Decimal) -> int | float:
    return int(value) if value == value.to_integral_value() else float(value)


def _shown(value: Decimal) -> str:
    """A refused value for a message: plain digits when short enough, else scientific; at most 40 characters."""
    text = format(value, "f") if value.is_finite() and -12 <= value.adjusted() <= 30 else str(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _plain(value: Decimal) -> str:
    return format(value.normalize(), "f") if value.is_finite() else str(value)


def _seconds(name: str, lo: Decimal | str, hi: Decimal, default: float | None = None) -> Range:
    return Range(name, Decimal(lo), hi, unit="s", default=default)


PRIORITY: Final = Range("priority", Decimal(MIN_PRIORITY), Decimal(MAX_PRIORITY), integer=True, default=0)
DELAY: Final = _seconds("delay", "0", MAX_DELAY_S)
CONCURRENCY_LIMIT: Final = Range("concurrency_limit", Decimal(1), Decimal(MAX_INT32), integer=True, default=1)
MAX_ATTEMPTS: Final = Range("max_attempts", Decimal(1), Decimal(MAX_INT32), integer=True, default=3)
#: A fairness key's weight (docs/priority-and-fairness.md §5); the store keeps the same bounds.
FAIRNESS_WEIGHT: Final = Range("weight", Decimal(1), Decimal(10_000), integer=True, default=1)
LEASE_TTL: Final = _seconds("lease_ttl", MIN_LEASE_TTL_S, MAX_DURATION_S)
BACKOFF_INITIAL: Final = _seconds("backoff_initial", "0.001", MAX_DURATION_S, 1)
BACKOFF_MAX: Final = _seconds("backoff_max", "0.001", MAX_DURATION_S, 300)
BACKOFF_FACTOR: Final = Range("backoff_factor", Decimal(1), Decimal(100), default=2)
LIST_LIMIT: Final = Range("limit", Decimal(1), Decimal(MAX_PAGE), integer=True, default=DEFAULT_PAGE)
WAIT: Final = _seconds("wait", "0", MAX_WAIT_S, 0)

#: The submit fields by name, in the order the documents list them.
SUBMIT: Final = {r.name: r for r in (PRIORITY, DELAY, CONCURRENCY_LIMIT, MAX_ATTEMPTS, LEASE_TTL, BACKOFF_INITIAL,
                                     BACKOFF_FACTOR, BACKOFF_MAX)}

