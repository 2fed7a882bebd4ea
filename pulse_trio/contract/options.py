"""A client's options in seconds, checked once when the client is made.

The worker SDK (``connect_timeout``, ``drain_check``) and the producer
clients (``timeout``) both take them. A value no clock can wait for (zero,
negative, NaN, infinite, an int past a float's range, text, a bool) would
otherwise fail each connect or request later, deep inside the loop or the
HTTP library, or never time out at all: one check here refuses it first,
naming the option.
"""

from __future__ import annotations

import math


def check_seconds(name: str, value: object) -> None:
    """ValueError unless ``value`` is a positive, finite number of seconds (not a bool) that a float holds."""
    if not isinstance(value, bool) and isinstance(value, (int, float)):
        try:
            if 0 < float(value) < math.inf:
                return
        except OverflowError:  # an int past a float's range: the event loop's clock cannot add it
            pass
    raise ValueError(f"{name} must be a positive, finite number of seconds, got {value!r:.40}")


__all__ = ["check_seconds"]
