"""Coalescing of lease commands into shared transactions.

Every task costs a start and a finish; one transaction each would cap the
service at what PyMySQL and one COMMIT per command allow. The batcher lets
commands from every connection share statements and one COMMIT: a free
lane takes whatever commands are queued (one command when the service is
idle, so idle latency is one transaction; up to ``MAX_BATCH`` under load)
and runs them in one store thread hand-off. ``LANES`` lanes share the one
queue, so a batch's database time (statements, the durable COMMIT)
overlaps the next batch's Python instead of holding every lease behind it.

Submitting costs no Trio task and no channel hop: :meth:`submit` appends to
a queue and the lane calls each command's ``done`` callback, in the Trio
thread, once the batch has committed. The queue is bounded by its callers:
a connection holds at most ``in_flight_limit(capacity)`` commands, and
stops reading while it does.

Each batch holds at most one command per lease, and no lease is in two
running batches: a command whose lease another lane holds waits in the
queue, in order, so the commands of one lease still commit one after the
other and the batched transaction functions never see two commands racing
for the same row. Batches of different leases may still meet on shared
rows (a key's permit counter); each store function locks its rows in id
order, and a deadlock between two batches is retried, then falls back to
one transaction per command, as for the batches of two service instances.
A command that was queued always runs, even if its connection has gone
since: its outcome is in the database and a replay finds the receipt.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

import trio

from pulse_trio.server.clock import ServiceClock
from pulse_trio.store.trio_bridge import Store
from pulse_trio.store.leases import LeaseCommand, finish, renew, start
from pulse_trio.store.task_steps import FinishReport

log = logging.getLogger("pulse_trio.batcher")

MAX_BATCH = 256
#: Batches in flight at once. While one lane's batch waits for the database
#: (statements, COMMIT), another's Python runs; docs/performance.md has the A/B.
LANES = 3
_FUNCTIONS = {"start": start, "renew": renew, "finish": finish}
_ORDER = ("start", "renew", "finish")

#: A command's outcome: a CommandAck, a Refusal, or the exception that failed its batch.
Done = Callable[[Any], None]


@dataclasses.dataclass(eq=False, slots=True)
class _Pending:
    kind: str
    command: LeaseCommand
    report: FinishReport | None
    done: Done


class LeaseCommandBatcher:
    def __init__(self, store: Store, clock: ServiceClock) -> None:
        self.store = store
        self.clock = clock
        self._queue: collections.deque[_Pending] = collections.deque()
        # Idle lanes park here; a submit wakes one. (One Event that every
        # waking lane replaced would strand lanes on events nobody sets.)
        self._idle_lanes = trio.lowlevel.ParkingLot()
        self._held: set[str] = set()
        self.batches = 0
        self.commands = 0

    def submit(self, kind: str, command: LeaseCommand, report: FinishReport | None, done: Done) -> None:
        """Queue one command; ``done(outcome)`` is called once its batch has run."""
        self._queue.append(_Pending(kind, command, report, done))
        self._idle_lanes.unpark()

    def statistics(self) -> dict[str, float]:
        return {"batches": self.batches, "commands": self.commands, "queued": len(self._queue),
                "mean_batch": self.commands / self.batches if self.batches else 0.0}

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(LANES):
                nursery.start_soon(self._lane)

    async def _lane(self) -> None:
        while True:
            batch = _take_batch(self._queue, self._held) if self._queue else []
            if not batch:
                await self._idle_lanes.park()
                continue
            try:
                await self._run(batch)
            finally:
                self._held.difference_update(p.command.lease_id for p in batch)
                if self._queue:  # what waited for these leases may go now, in another lane too
                    self._idle_lanes.unpark()

    async def _run(self, batch: Sequence[_Pending]) -> None:
        groups = {kind: [p for p in batch if p.kind == kind] for kind in _ORDER}
        groups = {kind: items for kind, items in groups.items() if items}
        now = self.clock.now()
        calls = []
        for kind, items in groups.items():
            if kind == "finish":
                kwargs = {"commands": [(p.command, p.report) for p in items], "now": now}
            else:
                kwargs = {"commands": [p.command for p in items], "now": now}
            calls.append((_FUNCTIONS[kind], kwargs))
        try:
            outcomes = await self.store.run_batch(calls)
        except Exception as exc:  # the store gave up: every caller answers internal
            log.warning("lease command batch of %d failed: %r", len(batch), exc)
            outcomes = [exc] * len(calls)
        self.batches += 1
        self.commands += len(batch)
        for (kind, items), outcome in zip(groups.items(), outcomes, strict=True):
            for i, pending in enumerate(items):
                try:
                    pending.done(outcome if isinstance(outcome, BaseException) else outcome[i])
                except Exception:  # one connection's bug must not cost the others their answers
                    log.exception("completing %s of lease %s failed", kind, pending.command.lease_id)


def _take_batch(queue: collections.deque[_Pending], held: set[str]) -> list[_Pending]:
    """Up to MAX_BATCH queued commands, each lease once and none a running batch holds.

    The leases taken join ``held`` (the lane releases them once its batch
    has run); repeats and held leases stay queued, in order.
    """
    batch: list[_Pending] = []
    waiting: list[_Pending] = []
    while queue and len(batch) < MAX_BATCH:
        item = queue.popleft()
        if item.command.lease_id in held:
            waiting.append(item)
        else:
            held.add(item.command.lease_id)
            batch.append(item)
    queue.extendleft(reversed(waiting))
    return batch
