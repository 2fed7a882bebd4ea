"""Retention inside ``serve``: every instance purges what is past its retention, a small batch at a time.

Every ``--purge-interval`` (``INTERVAL_S`` by default; jittered, so that
instances started together drift apart) the loop asks the store for each queue's cutoff
(:func:`~pulse_trio.store.retention.retention_plan`: the queue's own
``task_retention`` or the cluster's, read from the database at that moment)
and deletes each queue's due tasks in transactions of at most
``BATCH_TASKS`` tasks, pausing ``BATCH_PAUSE_S`` between them. Several
instances purging at once take disjoint batches (``SKIP LOCKED``) and a
deleted row cannot be deleted twice, so they share the work and never
repeat it. A pass that meets an error logs it and waits for the next one.

It runs beside the dispatcher and the timers, on the same store and pool:
each batch is one short transaction that locks only terminal tasks and
their ended leases, which nothing on the hot path reads. Deleted rows are
counted in ``pulse_purged_rows_total`` (by table).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

import trio

from pulse_trio.server.clock import ServiceClock
from pulse_trio.server.metrics import ServiceMetrics
from pulse_trio.store.retention import BATCH_TASKS, purge, retention_plan
from pulse_trio.store.trio_bridge import Store

log = logging.getLogger("pulse_trio.retention")

#: Seconds between passes by default (each pass works until nothing due is left, batch by batch).
INTERVAL_S = 60.0
#: Seconds between two batches of a pass: room for the hot path's transactions.
BATCH_PAUSE_S = 0.02


class RetentionPurge:
    """This instance's share of the retention purge."""

    def __init__(self, *, store: Store, clock: ServiceClock, metrics: ServiceMetrics, interval: float = INTERVAL_S,
                 batch: int = BATCH_TASKS, pause: float = BATCH_PAUSE_S,
                 jitter: Callable[[], float] = random.random) -> None:
        self.store, self.clock, self.metrics = store, clock, metrics
        self.interval, self.batch, self.pause = interval, batch, pause
        self.jitter = jitter
        self.passes = 0

    async def run(self) -> None:
        """A pass every ``interval`` (± a fifth, at random) until cancelled."""
        while True:
            await trio.sleep(self.interval * (0.8 + 0.4 * self.jitter()))
            try:
                await self.purge_pass()
            except Exception:
                log.warning("retention pass failed (database unavailable?); trying again next interval",
                            exc_info=True)

    async def purge_pass(self) -> int:
        """Delete every task now past its retention, queue by queue; the number of tasks deleted."""
        self.passes += 1
        total = 0
        for cut in await self.store.run(retention_plan, now=self.clock.now()):
            while True:
                batch = await self.store.run(purge, queue=cut.queue, before=cut.before, limit=self.batch)
                self.metrics.observe_purge(batch.deleted)
                total += batch.tasks
                if batch.selected < self.batch or not batch.tasks:
                    break  # the queue has nothing more due (or only tasks a later pass must take)
                await trio.sleep(self.pause)
        if total:
            log.info("retention: purged %d task(s) past their retention", total)
        return total


__all__ = ["BATCH_PAUSE_S", "INTERVAL_S", "RetentionPurge"]
