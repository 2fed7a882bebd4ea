"""Retention inside ``serve``: every instance purges what is past its retention, a small batch at a time, paced.

Every ``--purge-interval`` (``INTERVAL_S`` by default; jittered, so that
instances started together drift apart) the loop asks the store for each queue's cutoff
(:func:`~pulse_trio.store.task.retention.retention_plan`: the queue's own
``task_retention`` or the cluster's, read from the database at that moment)
and deletes each queue's due tasks in short transactions until none is due.
Several instances purging at once take disjoint batches (``SKIP LOCKED``)
and a deleted row cannot be deleted twice, so they share the work and never
repeat it. A pass that meets an error logs it and waits for the next one.

Why it is paced (:class:`PurgePace`): deleting a task costs the database
about as much as a dispatch step (every index entry of the task and its
lease goes), on the same CPUs and redo log as dispatch. So after each batch
the loop sleeps in proportion to the time the batch took, which bounds the
purge to a share of one connection's time: ``idle_share`` while this
process dispatches nothing, ``busy_share`` (and smaller batches) while it
assigns tasks or acks lease commands (its metrics' counters moved since the
last batch). A slower database makes the batches slower and so the pauses
longer; the pause after a queue's last batch is slept before the next
queue's first, so many small queues do not add up to more than the share.
Deleted rows are counted in ``pulse_purged_rows_total`` (by table).

Why it also waits for gaps: paced or not, a batch that runs while a submit
is inserted and its task claimed shares the CPUs and the redo log's flush
with them, and the submit's latency tail is made of such meetings. So a
batch starts only once this process's foreground work (the store's
:class:`~pulse_trio.store.engine.trio_bridge.ThreadActivity`) has paused for
``quiet``, runs its statements in chunks while busy, and before each
chunk, delete and its COMMIT waits for the same (:class:`_Between`). Both
waits are bounded and come off the pause, and a batch that found no gap
neither chunks nor waits inside, so that under full load the purge goes
on at its share.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable

import trio

from pulse_trio.server.clock import ServiceClock
from pulse_trio.server.metrics import ServiceMetrics
from pulse_trio.server.outage_log import OutageLog
from pulse_trio.store.task.retention import BATCH_TASKS, purge, retention_plan
from pulse_trio.store.engine.trio_bridge import Store, ThreadActivity

log = logging.getLogger("pulse_trio.retention")

#: Seconds between passes by default (each pass works until nothing due is left, batch by batch).
INTERVAL_S = 60.0
BUSY_HOLD_S = 2.0  # dispatch seen this recently keeps the purge at its busy share


@dataclasses.dataclass(frozen=True, slots=True)
class PurgePace:
    """How much of the database's time the purge may take: a duty cycle, smaller while dispatch is busy.

    After a batch that took ``took`` seconds the loop sleeps
    ``took * (1 - share) / share`` (at least ``min_pause``, at most
    ``max_pause``), so the purge's transactions fill at most ``share`` of
    the wall time.
    """

    idle_share: float = 0.5
    busy_share: float = 0.05  # serve --purge-busy-share
    idle_batch: int = BATCH_TASKS
    busy_batch: int = 100
    #: While busy, each of a batch's statements takes at most this many tasks (None: the whole batch).
    busy_chunk: int | None = 25
    min_pause: float = 0.01
    max_pause: float = 5.0
    #: A batch starts in a gap: once this process's foreground work has been quiet this long ...
    quiet: float = 0.003
    #: ... or after this long without one, nor longer than the pause before it (under full load there
    #: are no gaps, and the purge must go on).
    gap_wait: float = 0.25
    #: Between its statements a batch waits for the same quiet, this long in all at most.
    yield_budget: float = 0.02

    def __post_init__(self) -> None:
        if not (0 < self.busy_share <= 1 and 0 < self.idle_share <= 1):
            raise ValueError("a purge share must be in (0, 1]")
        if self.idle_batch < 1 or self.busy_batch < 1:
            raise ValueError("a purge batch must be at least one task")
        if not 0 <= self.min_pause <= self.max_pause:
            raise ValueError("min_pause must be between 0 and max_pause")
        if self.busy_chunk is not None and self.busy_chunk < 1:
            raise ValueError("a purge chunk must be at least one task")
        if min(self.quiet, self.gap_wait, self.yield_budget) < 0:
            raise ValueError("quiet, gap_wait and yield_budget must not be negative")

    def batch(self, busy: bool) -> int:
        """Tasks in the next transaction."""
        return self.busy_batch if busy else self.idle_batch

    def pause(self, took: float, busy: bool) -> float:
        """Seconds to sleep after a batch that took ``took`` seconds."""
        share = self.busy_share if busy else self.idle_share
        return min(self.max_pause, max(self.min_pause, max(0.0, took) * (1 - share) / share))


class DispatchActivity:
    """Whether this process dispatched within the last ``hold`` seconds: the purge's busy signal.

    Reads counters the metrics keep anyway: the tasks this process assigned
    and the lease commands it acked. (Not the dispatcher's ``backlogged``:
    sessions full of long tasks keep it set while the database is quiet.)
    A look between two tasks of a light, steady stream sees nothing new, so
    activity counts for ``hold`` seconds after it was seen: otherwise a
    trickle of tasks would meet the purge at its idle share.
    """

    def __init__(self, metrics: ServiceMetrics, *, hold: float = BUSY_HOLD_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.metrics, self.hold, self.clock = metrics, hold, clock
        self._seen = self._count()
        self._active_at = -math.inf

    def _count(self) -> int:
        return sum(self.metrics.assignments.values()) + sum(self.metrics.commands.values())

    def __call__(self) -> bool:
        seen, self._seen = self._seen, self._count()
        now = self.clock()
        if self._seen != seen:
            self._active_at = now
        return now - self._active_at < self.hold


class RetentionPurge:
    """This instance's share of the retention purge."""

    def __init__(self, *, store: Store, clock: ServiceClock, metrics: ServiceMetrics, interval: float = INTERVAL_S,
                 pace: PurgePace = PurgePace(), busy: Callable[[], bool] | None = None,
                 jitter: Callable[[], float] = random.random, timer: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], Awaitable[None]] = trio.sleep) -> None:
        self.store, self.clock, self.metrics = store, clock, metrics
        self.interval, self.pace = interval, pace
        self.busy = busy if busy is not None else DispatchActivity(metrics)
        self.jitter, self.timer, self.sleep = jitter, timer, sleep
        self.passes = 0
        self.gaps_missed = 0  # batches that found no gap within gap_wait and went anyway

    async def run(self) -> None:
        """A pass every ``interval`` (± a fifth, at random) until cancelled; an outage is logged once."""
        outage = OutageLog(log, "retention pass failed (database unavailable?)", "retention passes work again",
                           level=logging.WARNING)
        while True:
            await trio.sleep(self.interval * (0.8 + 0.4 * self.jitter()))
            try:
                await self.purge_pass()
            except Exception:
                outage.failed()
            else:
                outage.worked()

    async def purge_pass(self) -> int:
        """Delete every task now past its retention, queue by queue, paced; the number of tasks deleted."""
        self.passes += 1
        total = 0
        busy = self.busy()
        owed = 0.0  # the pause the last batch earned, slept before the next one (in this queue or the next)
        for cut in await self.store.run(retention_plan, now=self.clock.now()):
            after = None
            swept = False  # the one batch from the start that ends the queue's pass (see below)
            while True:
                if owed:
                    await self.sleep(owed)
                    busy = self.busy()
                # No longer than the pause just slept: the wait comes off the next pause, so that
                # without gaps a batch still goes once per pause and batch, as the share allows.
                look = min(self.pace.gap_wait, owed) if owed else self.pace.gap_wait
                gap_waited = await self._gap(look)
                # Without a gap (dispatch never pauses: full load) chunks and waits between the
                # statements would find none either, and only cost the purge its rate.
                gapless = bool(look) and gap_waited >= look
                limit = self.pace.batch(busy)
                between = _Between(self.store.activity, self.pace.quiet, 0.0 if gapless else self.pace.yield_budget)
                began = self.timer()
                batch = await self.store.run_aside(purge, queue=cut.queue, before=cut.before, limit=limit, after=after,
                                                   between=between,
                                                   chunk=self.pace.busy_chunk if busy and not gapless else None)
                took = self.timer() - began - between.waited  # the share is of the time it worked
                # The waits (for the gap, and between the statements) were time without the purge's
                # work: they come off the pause, so that a process without gaps purges at its share.
                waited = gap_waited + between.waited
                owed = max(self.pace.min_pause, self.pace.pause(took, busy) - waited) if batch.selected else 0.0
                self.gaps_missed += 1 if gapless else 0
                self.metrics.observe_purge(batch.deleted)
                total += batch.tasks
                if batch.selected < limit:
                    if after is None or swept:
                        break  # nothing more due: from the start, or past this pass's position
                    # Rows the position passed over (another process held them then) that are
                    # still here: one batch from the start takes them in this pass.
                    after, swept = None, True
                    continue
                after = batch.last
        if total:
            log.info("retention: purged %d task(s) past their retention", total)
        return total

    async def _gap(self, limit: float) -> float:
        """Wait, ``limit`` seconds at most, until this process's foreground work has paused: the seconds waited."""
        if not limit or self.store.activity.quiet_for(self.pace.quiet):
            return 0.0
        began = time.monotonic()
        await self.store.activity.gap(self.pace.quiet, limit)
        return time.monotonic() - began


class _Between:
    """Called by a purge batch between its statements, in its thread: waits while this process dispatches.

    A task's claim, commands and the submit over HTTP are a few short
    transactions in a row; the purge's next delete (or its COMMIT, whose
    log flush a submit's commit would queue behind) waits until they have
    been quiet for ``quiet`` seconds, ``budget`` seconds per batch at most.
    """

    def __init__(self, activity: ThreadActivity, quiet: float, budget: float) -> None:
        self.activity, self.quiet, self.budget = activity, quiet, budget
        self.waited = 0.0

    def __call__(self) -> None:
        if self.waited < self.budget:
            self.waited += self.activity.wait_quiet(self.quiet, self.budget - self.waited)


__all__ = ["INTERVAL_S", "DispatchActivity", "PurgePace", "RetentionPurge"]
