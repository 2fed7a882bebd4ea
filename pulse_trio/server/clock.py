"""The service's notion of "now": the one place it reads a clock.

Transaction functions never read the wall clock or SQL ``NOW()``: the
caller passes ``now``, and the caller takes it from here.

A running instance follows the **wall clock**, read at every call. Expiry
is judged against ``expires_at`` values that other instances wrote with
their own hosts' wall clocks, so whatever moves this host's wall clock
after start (the first NTP sync of a machine that booted with a wrong
clock, a VM resumed after a pause, a host woken from sleep) must move this
instance's "now" with it. Trio's clock is monotonic and stands still while
the host is suspended: anchored once at start, an instance would keep the
old offset for the rest of its life and disagree with every other
instance about which leases have expired.

Scenario tests run the whole service on ``trio.testing.MockClock`` instead
(``virtual=True``): "now" is a fixed origin plus Trio's time, so timers,
leases and expiry advance in virtual time against the real database.
Services built with the same ``origin`` agree about "now" whenever each
was started.
"""

from __future__ import annotations

import datetime as dt

import trio

UTC = dt.timezone.utc


class ServiceClock:
    """UTC datetimes: the wall clock, or (``virtual=True``) an origin plus the current Trio clock."""

    __slots__ = ("_origin",)

    def __init__(self, *, virtual: bool = False, origin: dt.datetime | None = None) -> None:
        if origin is not None and not virtual:
            raise ValueError("an origin is only for a virtual clock")
        #: The UTC time that Trio time 0 stands for (virtual), or None (the wall clock).
        self._origin: dt.datetime | None = None
        if virtual:
            self._origin = (origin.astimezone(UTC) if origin is not None
                            else virtual_origin())

    @property
    def virtual(self) -> bool:
        return self._origin is not None

    def now(self) -> dt.datetime:
        if self._origin is None:
            return dt.datetime.now(UTC)
        return self._origin + dt.timedelta(seconds=trio.current_time())

    def trio_time_at(self, moment: dt.datetime) -> float:
        """The Trio clock reading at which ``moment`` arrives (for ``trio.sleep_until``)."""
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        if self._origin is None:
            return trio.current_time() + (moment - dt.datetime.now(UTC)).total_seconds()
        return (moment - self._origin).total_seconds()


def virtual_origin() -> dt.datetime:
    """The origin that makes a virtual clock read the wall clock's time right now (call inside Trio)."""
    return dt.datetime.now(UTC) - dt.timedelta(seconds=trio.current_time())
