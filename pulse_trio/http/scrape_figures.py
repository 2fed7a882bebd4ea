"""What a ``/metrics`` scrape reads of the database: one read at a time, and no scrape waits past its bound.

A scraper that waits longer than its own timeout (Prometheus: 10 s by
default) records nothing of the scrape, not even ``pulse_database_up 0``,
and takes the whole process for down. The store waits for a database that
hangs far longer than that (its attempts, each up to its I/O bound), and a
wait for the store cannot be cut short: its thread is never abandoned in
the middle of a transaction. So the read runs in a task of its own beside
the HTTP server (:meth:`DatabaseFigures.run`), and each scrape waits for
its answer at most its bound. Every scrape that comes while a read runs
waits for that one: a flood of scrapes holds one read, not one each.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import trio

from pulse_trio.live_instance import LiveInstance
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.queue.fairness import key_figures
from pulse_trio.store.views.queries import queue_depths

log = logging.getLogger("pulse_trio.http")

#: The recent finishes per fairness key that /metrics reports.
FAIRNESS_RECENT = dt.timedelta(minutes=5)

#: What a read found: per queue, its waiting and held tasks, its oldest ready age and its fairness keys.
Figures = dict[str, dict[str, Any]]


class _Read:
    """One read of the database: the scrapes waiting for it, and what it found (None: no answer)."""

    __slots__ = ("done", "figures")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.figures: Figures | None = None


class DatabaseFigures:
    """The database's side of ``/metrics``, read when a scrape asks."""

    def __init__(self, instance: LiveInstance, store: Store, limiter: trio.CapacityLimiter) -> None:
        """``limiter``: the HTTP API's share of the store's threads (``TaskApi.limiter``)."""
        self.instance = instance
        self.store = store
        self.limiter = limiter
        #: The read asked for or running now, if any.
        self._read: _Read | None = None
        self._asked = trio.Event()

    async def figures(self, bound: float) -> Figures | None:
        """What the read running now (or a new one) finds; None if it has not answered within ``bound`` seconds."""
        read = self._read
        if read is None:
            read = self._read = _Read()
            self._asked.set()
        with trio.move_on_after(bound):
            await read.done.wait()
        return read.figures

    async def run(self) -> None:
        """Read each time a scrape asks, until cancelled (with the HTTP server)."""
        while True:
            await self._asked.wait()
            self._asked = trio.Event()
            read = self._read
            assert read is not None
            try:
                read.figures = await self._read_database()
            except Exception:  # the scrape still reports the process; pulse_database_up says 0
                log.debug("the database's figures were not read", exc_info=True)
            finally:
                self._read = None
                read.done.set()

    async def _read_database(self) -> Figures:
        async with self.limiter:
            now = self.instance.now()
            depths = await self.store.run(queue_depths, now=now, ended=False)  # not the whole history
            figures = await self.store.run(key_figures, since=now - FAIRNESS_RECENT)
        for queue, keys in figures.items():  # the fairness keys with the most ready work, then "other"
            depths.setdefault(queue, {"states": {}, "oldest_ready_age_s": None})["fairness"] = keys
        return depths
