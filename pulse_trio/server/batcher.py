"""Coalescing of lease commands into shared transactions.

Every task costs a start and a finish; one transaction each would cap the
service at what PyMySQL and one COMMIT per command allow. The batcher lets
commands from every connection share statements and one COMMIT: a free
lane takes whatever commands are queued (one command when the service is
idle, so idle latency is one transaction; up to ``MAX_BATCH`` under load,
and finishes whose results fit one statement: ``MAX_BATCH_OUTCOME_CHARS``)
and runs them in one store thread hand-off. ``LANES`` lanes share the one
queue, so a batch's database time (statements, the durable COMMIT)
overlaps the next batch's Python instead of holding every lease behind it.

Submitting costs no Trio task and no channel hop: :meth:`submit` appends to
a queue. The lane does not apply a command's outcome to its session: it
posts the outcome to the connection's inbox (``session_inbox.py``), and
the connection's own results task, in the connection's nursery, applies
what its inbox holds, all of it at each wake-up (one wake-up per batch per
connection, however many of its commands the batch held). So the lanes
never change a session, and a connection's state has one kind of writer:
its own tasks. The queue is bounded by its callers: a connection holds at
most ``in_flight_limit(capacity)`` commands (an outcome counts until its
connection applied it), and stops reading while it does.

Each batch holds at most one command per lease, and no lease is in two
running batches: a command whose lease another lane holds waits in the
queue, in order, so the commands of one lease still commit one after the
other and the batched transaction functions never see two commands racing
for the same row. Batches of different leases may still meet on shared
rows (a key's permit counter); each store function locks its rows in id
order, and a deadlock between two batches is retried, then falls back to
one transaction per command, as for the batches of two service instances.
A command that was queued always runs, even if its connection has gone
since: its outcome is in the database and a replay finds the receipt (the
closed inbox drops the rest of it; the lane still counts it in the metrics).

A batch whose finishes released a key's permit while tasks of the key
waited set aside (they compete again) wakes the dispatcher itself, and
tells a serve group's other members: that is new work for any session, and
the finishing connection may have closed before its ack was posted.

While the queues are deep, a batch with finishes also claims the next work
for the slots they freed, in its own transaction (``ride_along.py``): the
offers are posted to the inbox right after the acks, so they leave in the
same outbox write. A batch
that falls back to one transaction per command claims nothing.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import trio

from pulse_trio.contract.limits import MAX_RESULT_BYTES
from pulse_trio.server.clock import ServiceClock
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.engine.inputs import AnyLeaseCommand, FinishCommand, RenewCommand, StartCommand
from pulse_trio.store.lease.leases import finish, renew, start

log = logging.getLogger("pulse_trio.batcher")

MAX_BATCH = 256
#: The results and error messages a batch's finishes carry, in characters, at most (one finish at least):
#: the outcomes go into one UPDATE, which must fit the database's packet limit (``max_allowed_packet``)
#: even when every character is escaped or takes four bytes. Four results at the contract's limit.
MAX_BATCH_OUTCOME_CHARS = 4 * MAX_RESULT_BYTES
#: Batches in flight at once. While one lane's batch waits for the database
#: (statements, COMMIT), another's Python runs; docs/performance.md has the A/B.
LANES = 3
#: Each command type's batch function, in the order a batch runs them (finishes last: ride-along claims follow them).
_FUNCTIONS: dict[type, Callable[..., list[Any]]] = {StartCommand: start, RenewCommand: renew, FinishCommand: finish}



class CommandResults(Protocol):
    """Where a command's outcome goes: its connection's inbox (``session_inbox.SessionInbox``)."""

    def command_done(self, request: Any, outcome: Any) -> None:
        """Post the outcome (a CommandAck, a Refusal, or the exception that failed the batch); never apply it here."""


class WorkNews(Protocol):
    """Who hears that a batch made work others may take: the session hub (``hub.py``)."""

    def wake(self) -> None:
        """Ask the dispatcher for a pass now."""

    def announce(self) -> None:
        """Tell a serve group's other members."""


class RideAlong(Protocol):
    """Claims for the slots a batch's finishes free, run in the batch's transaction (``ride_along.py``)."""

    def plan(self, finishes: Sequence[FinishCommand], now: Any) -> Any:
        """What to claim, decided before the batch runs (None: nothing).

        ``plan.lock_sessions(tx)`` runs first in the batch's transaction, ``plan.claims(tx, results)`` last;
        ``plan.settle()`` once the batch is over, whatever its outcome.
        """

    def committed(self, claims: Any) -> None:
        """The batch committed (its acks are posted): post the offers its claims made."""

    def uncertain(self, plan: Any) -> None:
        """The batch failed or fell back: count the leases the plan's claims may have made."""

    def statistics(self) -> dict[str, int]: ...


@dataclasses.dataclass(eq=False, slots=True)
class _Pending:
    command: AnyLeaseCommand
    results: CommandResults
    request: Any  # the frame that asked, handed back with the outcome


class LeaseCommandBatcher:
    def __init__(self, store: Store, clock: ServiceClock, news: WorkNews) -> None:
        self.store = store
        self.clock = clock
        #: Told when a batch's finishes let a key's set-aside tasks compete again.
        self.news = news
        self._queue: collections.deque[_Pending] = collections.deque()
        # Idle lanes park here; a submit wakes one. (One Event that every
        # waking lane replaced would strand lanes on events nobody sets.)
        self._idle_lanes = trio.lowlevel.ParkingLot()
        # A lane has been woken and has not yet looked at the queue: the
        # commands submitted meanwhile (a cohort's, read in one chunk) are
        # its batch, so they wake no other lane.
        self._waking = False
        self._held: set[str] = set()
        #: Claims for the slots a batch's finishes free, in its transaction (None: the dispatcher's only).
        self.ride_along: RideAlong | None = None
        self.batches = 0
        self.commands = 0

    def submit(self, command: AnyLeaseCommand, results: CommandResults, request: Any) -> None:
        """Queue one command; ``results.command_done(request, outcome)`` is posted once its batch has run."""
        self._queue.append(_Pending(command, results, request))
        self._wake_a_lane()

    def _wake_a_lane(self) -> None:
        """Wake an idle lane for what is queued, unless one woken already has yet to look at the queue."""
        if not self._waking:
            self._waking = bool(self._idle_lanes.unpark())

    def statistics(self) -> dict[str, float]:
        riding = self.ride_along.statistics() if self.ride_along is not None else {"claims": 0, "offers": 0}
        return {"batches": self.batches, "commands": self.commands, "queued": len(self._queue),
                "mean_batch": self.commands / self.batches if self.batches else 0.0,
                "ride_along_claims": riding["claims"], "ride_along_offers": riding["offers"]}

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(LANES):
                nursery.start_soon(self._lane)

    async def _lane(self) -> None:
        while True:
            batch = _take_batch(self._queue, self._held) if self._queue else []
            if not batch:
                try:
                    await self._idle_lanes.park()
                finally:
                    self._waking = False  # woken (or stopped): the next submit wakes a lane again
                continue
            if self._queue:  # past MAX_BATCH, or repeats of held leases: another lane takes what it can
                self._wake_a_lane()
            try:
                await self._run(batch)
            finally:
                # What waited for these leases goes in this lane's next batch (it loops at once).
                self._held.difference_update(p.command.lease_id for p in batch)

    async def _run(self, batch: Sequence[_Pending]) -> None:
        grouped: dict[type, list[_Pending]] = {kind: [] for kind in _FUNCTIONS}
        for pending in batch:
            grouped[type(pending.command)].append(pending)
        groups = {kind: items for kind, items in grouped.items() if items}
        now = self.clock.now()
        calls = [(_FUNCTIONS[kind], {"commands": [p.command for p in items], "now": now})
                 for kind, items in groups.items()]
        ride_along = self.ride_along
        plan = None
        if ride_along is not None and FinishCommand in groups:  # finishes run last: their results end the list
            plan = ride_along.plan([p.command for p in groups[FinishCommand]], now)
        try:
            if plan is None:
                outcomes = await self.store.run_batch(calls)
            else:
                outcomes = await self.store.run_batch(calls, then=plan.claims, first=plan.lock_sessions)
        except Exception as exc:  # the store gave up: every caller answers internal
            log.warning("lease command batch of %d failed: %r", len(batch), exc)
            outcomes = [exc] * len(calls)
        except BaseException:
            if plan is not None:
                ride_along.uncertain(plan)
                plan.settle()
            raise
        try:
            self._complete(batch, groups, outcomes, plan, len(calls))
        finally:
            if plan is not None:
                plan.settle()

    def _complete(self, batch: Sequence[_Pending], groups: dict[type, list[_Pending]], outcomes: list,
                  plan: Any, calls: int) -> None:
        """Post every command's outcome to its connection's inbox, then the batch's ride-along offers."""
        ride_along = self.ride_along
        claims = None
        if plan is not None:
            if len(outcomes) > calls:
                claims = outcomes.pop()
            else:  # it failed or fell back after its claims may have run: their outcome is unknown
                ride_along.uncertain(plan)
        self.batches += 1
        self.commands += len(batch)
        for (kind, items), outcome in zip(groups.items(), outcomes, strict=True):
            for i, pending in enumerate(items):
                try:
                    pending.results.command_done(pending.request,
                                                 outcome if isinstance(outcome, BaseException) else outcome[i])
                except Exception:  # one connection's bug must not cost the others their answers
                    log.exception("completing %s of lease %s failed", kind.__name__, pending.command.lease_id)
        if claims:  # after the acks, with no await between: the same inbox take, and counts never low
            ride_along.committed(claims)
        if FinishCommand in groups and _freed_work(outcomes[list(groups).index(FinishCommand)]):
            self.news.wake()  # from the batch: the finishing connection may be gone, its ack dropped
            self.news.announce()


def _freed_work(outcome: Any) -> bool:
    """The finishes' outcome says their released permits let a key's set-aside tasks compete again."""
    return not isinstance(outcome, BaseException) and any(getattr(r, "freed_work", False) for r in outcome)


def _take_batch(queue: collections.deque[_Pending], held: set[str]) -> list[_Pending]:
    """Up to MAX_BATCH queued commands, each lease once and none a running batch holds.

    The leases taken join ``held`` (the lane releases them once its batch
    has run); repeats and held leases stay queued, in order. The batch ends
    before a finish whose outcome would take its finishes past
    MAX_BATCH_OUTCOME_CHARS: that one starts the next batch.
    """
    batch: list[_Pending] = []
    waiting: list[_Pending] = []
    outcome_chars = 0
    while queue and len(batch) < MAX_BATCH:
        item = queue.popleft()
        if item.command.lease_id in held:
            waiting.append(item)
            continue
        chars = _outcome_chars(item.command)
        if outcome_chars and outcome_chars + chars > MAX_BATCH_OUTCOME_CHARS:
            queue.appendleft(item)
            break
        outcome_chars += chars
        held.add(item.command.lease_id)
        batch.append(item)
    queue.extendleft(reversed(waiting))
    return batch


def _outcome_chars(command: AnyLeaseCommand) -> int:
    """The characters a command adds to its batch's outcome UPDATE: a finish's result and message."""
    if type(command) is not FinishCommand:
        return 0
    report = command.report
    return len(report.result_json) + len(report.error_message or "")
