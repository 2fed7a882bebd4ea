"""Durations on the command line: seconds, or a number with a unit (``90s``, ``15m``, ``12h``, ``7d``, ``2w``).

For the commands that take spans of days (``task purge --older-than``,
``bench fill-finished --age``); the cluster settings stay plain seconds,
as ``serve``'s flags and the HTTP API take them.
"""

from __future__ import annotations

import argparse
import re
from decimal import Decimal, InvalidOperation

#: Seconds per unit.
UNITS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400, "w": 604_800}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def duration_seconds(text: str) -> Decimal:
    """``7d`` -> 604800; a bare number is seconds. ValueError for anything else (negative included)."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"not a duration: {text!r} (seconds, or a number and one of {', '.join(UNITS)}: "
                         "90s, 15m, 12h, 7d, 2w)")
    try:
        return Decimal(match.group(1)) * UNITS[match.group(2) or "s"]
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
        raise ValueError(f"not a duration: {text!r}") from None


def parse_duration(text: str) -> float:
    """The argparse type: a duration in seconds (exit 2 with the reason otherwise)."""
    try:
        return float(duration_seconds(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


__all__ = ["UNITS", "duration_seconds", "parse_duration"]
