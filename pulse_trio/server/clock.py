"""The service's notion of "now", read from Trio's clock.

Transaction functions never read the wall clock or SQL ``NOW()``: the
caller passes ``now``. The service derives it from ``trio.current_time()``
anchored to the wall clock once at start, so under ``trio.testing.MockClock``
the whole service — timers, leases, expiry — runs on virtual time against
the real database.
"""

from __future__ import annotations

import datetime as dt

import trio

UTC = dt.timezone.utc


class ServiceClock:
    """UTC datetimes that advance with the current Trio clock."""

    __slots__ = ("_wall_anchor", "_trio_anchor")

    def __init__(self, wall_anchor: dt.datetime | None = None) -> None:
        self._wall_anchor = (wall_anchor or dt.datetime.now(UTC)).astimezone(UTC)
        self._trio_anchor = trio.current_time()

    def now(self) -> dt.datetime:
        return self._wall_anchor + dt.timedelta(seconds=trio.current_time() - self._trio_anchor)

    def trio_time_at(self, moment: dt.datetime) -> float:
        """The Trio clock reading at which ``moment`` arrives (for sleep_until)."""
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return self._trio_anchor + (moment - self._wall_anchor).total_seconds()
