"""Finishes per clock minute over the last hour, read from the database and kept once settled.

The overview's chart would otherwise count an hour of ``tasks_finished``
entries on every refresh. A minute that ended more than ``SETTLE`` ago
no longer changes, so it is read once and kept in this process; only the
minutes since are read again each time. (A finish is stamped with the
``now`` of the transaction that commits it, so only a serve process whose
clock is minutes behind could still add to a settled minute.) Nothing is
kept that the database does not hold: a restarted process reads the hour
again, and every process answers the same counts.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

import trio

from pulse_trio.store.views.dashboard import finishes_by_minute

if TYPE_CHECKING:
    from pulse_trio.store.engine.trio_bridge import Store

MINUTE = dt.timedelta(minutes=1)
WINDOW_MINUTES = 60
#: Minutes that ended longer ago than this are read once and kept.
SETTLE = dt.timedelta(minutes=2)

Counts = dict[tuple[str, str], int]


def minute_floor(moment: dt.datetime) -> dt.datetime:
    return moment.replace(second=0, microsecond=0)


class FinishesPerMinute:
    """``await per_minute.read(now)`` -> the first minute and each (queue, status)'s counts, oldest first."""

    def __init__(self, store: Store, *, minutes: int = WINDOW_MINUTES, settle: dt.timedelta = SETTLE) -> None:
        self.store = store
        self.minutes = minutes
        self.settle = settle
        self._settled: dict[dt.datetime, Counts] = {}
        self._lock = trio.Lock()  # one reader fills the settled minutes; the others wait for it

    async def read(self, now: dt.datetime) -> tuple[dt.datetime, dict[tuple[str, str], list[int]]]:
        end = minute_floor(now) + MINUTE
        start = end - self.minutes * MINUTE
        edge = min(max(start, minute_floor(now - self.settle)), end)
        async with self._lock:
            await self._fill(start, edge)
            fresh = await self.store.run(finishes_by_minute, since=edge, until=end)
            for old in [m for m in self._settled if m < start]:
                del self._settled[old]
            series: dict[tuple[str, str], list[int]] = {}
            for index in range(self.minutes):
                minute = start + index * MINUTE
                if minute < edge:
                    counts = self._settled[minute]
                else:
                    offset = round((minute - edge) / MINUTE)
                    counts = {(q, s): n for (q, s, m), n in fresh.items() if m == offset}
                for key, count in counts.items():
                    series.setdefault(key, [0] * self.minutes)[index] = count
        return start, series

    async def _fill(self, start: dt.datetime, edge: dt.datetime) -> None:
        """Read the settled minutes not kept yet, from the first one missing up to ``edge``, in one query."""
        missing = [start + i * MINUTE for i in range(round((edge - start) / MINUTE))
                   if start + i * MINUTE not in self._settled]
        if not missing:
            return
        first = missing[0]
        rows = await self.store.run(finishes_by_minute, since=first, until=edge)
        for index in range(round((edge - first) / MINUTE)):
            self._settled[first + index * MINUTE] = {(q, s): n for (q, s, m), n in rows.items() if m == index}
