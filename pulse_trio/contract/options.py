"""A client's options in seconds, checked once when the client is made.

The worker SDK (``connect_timeout``, ``drain_check``) and the producer
clients (``timeout``) both take them. A value no clock can wait for (zero,
negative, NaN, infinite or past a year, text, a bool) would
otherwise fail each connect or request later, deep inside the loop or the
HTTP library, or never time out at all: one check here refuses it first,
naming the option.
"""

from __future__ import annotations

#: The longest wait an option may ask for: a year. Far past any real one, and a socket's own timeout
#: (the blocking client's) overflows the platform's time_t long before "a very large number" ends.
MAX_SECONDS = 31_536_000


def check_seconds(name: str, value: object) -> None:
    """ValueError unless ``value`` is a positive number of seconds (not a bool), at most :data:`MAX_SECONDS`."""
    if not isinstance(value, bool) and isinstance(value, (int, float)):
        try:
            if 0 < float(value) <= MAX_SECONDS:
                return
        except OverflowError:  # an int past a float's range
            pass
    raise ValueError(f"{name} must be a positive, finite number of seconds, at most {MAX_SECONDS} (a year), "
                     f"got {value!r:.40}")


__all__ = ["MAX_SECONDS", "check_seconds"]
