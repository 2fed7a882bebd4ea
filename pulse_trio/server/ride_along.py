"""Ride-along claims: a finish batch offers the next work for the slots its own finishes freed.

While the queues are deep (:attr:`Dispatcher.backlogged`), a slot that a
finish frees would otherwise sit idle until the dispatcher wakes, runs a
pass and commits a claim transaction of its own. Instead, the command
batch that commits the finish claims for that slot in the same
transaction, with the same :func:`~pulse_trio.store.lease.assign.assign` as the
dispatcher (pick-up order, permits, keys set aside, paused queues), and
the offers leave in the same outbox write as the finish acks.

The rules (docs/priority-and-fairness.md §4):

* only while the dispatcher found the queues deep when the batch started;
  scarce work still goes through its fair rounds, and a ride-along claim
  that comes back short of work ends the deep spell, as a short claim of a pass does;
* per session, at most as many offers as the batch's accepted finishes of
  that session's leases freed; the claim never raises the session's live
  lease count in the database, so it needs no exclusive lock on the
  session's row and may run beside the dispatcher's claims and other
  batches' (the count stays within the capacity the database holds, and
  the claim's ``held`` keeps it within a lowered capacity). The batch
  locks its riders' session rows shared before anything else, so the
  lock order stays session -> lease -> task (docs/storage.md §3);
* nothing for a session that drains or closes, or left the hub;
* offers are posted to the session's inbox (``session_inbox.py``) only
  once the batch committed, right after its acks; the session's own
  results task pushes them, and they count as the session's leases from
  the post on; a batch whose outcome
  is unknown (it failed, or fell back to one transaction per command
  after a ride-along claim had run) counts the leases its claims may have
  made as held, until reconciliation forgets those that do not exist.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pulse_trio.store.lease.assign import LeaseCredential, assign, new_credentials
from pulse_trio.store.instance.instances import share_lock_sessions
from pulse_trio.store.engine.results import AssignResult, CommandAck

if TYPE_CHECKING:
    from pulse_trio.server.dispatcher import Dispatcher
    from pulse_trio.server.hub import SessionHub
    from pulse_trio.server.live_settings import LiveSettings
    from pulse_trio.server.live_session import LiveSession
    from pulse_trio.store.engine.inputs import FinishCommand
    from pulse_trio.store.engine.tx import Tx


@dataclasses.dataclass(slots=True)
class _Rider:
    """One session whose finishes are in the batch: what its claim may take."""

    session: LiveSession
    held: int  # the session's live leases as counted when the batch started (its finishes among them)
    leases: frozenset[str]  # its finishing leases that count was made of
    credentials: tuple[LeaseCredential, ...]  # one per finish: the most it may be offered
    claim: Any = None  # the session's token for this claim (SessionInbox.claim_begun): resumes wait for it


@dataclasses.dataclass(slots=True)
class RideAlongPlan:
    """The ride-along claims of one batch, decided in the Trio thread, run in the batch's transaction."""

    riders: dict[str, _Rider]  # by session id, in session-id order: batches lock session rows in one order
    commands: Sequence[FinishCommand]  # the batch's finish commands, in the order of their results
    now: dt.datetime  # the batch's time
    start_timeout_ms: int
    lease_ttl_ms: int
    paused: frozenset[str] | None
    ran: bool = False  # a transaction ran the claims (they may have committed)
    #: The riders' session rows as lock_sessions read them, under the shared lock the claims rely on.
    sessions: dict[str, Any] = dataclasses.field(default_factory=dict)

    def settle(self) -> None:
        """The batch is over (committed, failed or cancelled): resumes into the riders may go on."""
        for rider in self.riders.values():
            if rider.claim is not None:
                rider.session.inbox.claim_settled(rider.claim)
                rider.claim = None

    def lock_sessions(self, tx: Tx) -> None:
        """First in the batch's transaction: the riders' session rows, shared, before any lease is locked."""
        self.sessions = share_lock_sessions(tx, list(self.riders))

    def claims(self, tx: Tx, results: list[Any]) -> list[tuple[_Rider, int, Any]]:
        """In the batch's transaction, after its commands: each rider claims what its accepted finishes freed.

        ``results[-1]`` is the finish group's results (finishes run last).
        """
        self.ran = True
        riders = self.riders
        freed: dict[str, int] = {}
        for command, outcome in zip(self.commands, results[-1], strict=True):
            rider = riders.get(command.session_id)
            if (rider is not None and type(outcome) is CommandAck and not outcome.receipt.duplicate
                    and command.lease_id in rider.leases):
                freed[command.session_id] = freed.get(command.session_id, 0) + 1
        out = []
        for sid, rider in riders.items():
            count = freed.get(sid, 0)
            if not count:
                continue
            # Its finishes that ended here were in ``held``: the claim sees the count after them.
            result = assign(tx, session_id=sid, credentials=rider.credentials, want=count, now=self.now,
                            start_timeout_ms=self.start_timeout_ms, default_lease_ttl_ms=self.lease_ttl_ms,
                            paused=self.paused, held=rider.held - count, shared_lock=True,
                            session=self.sessions.get(sid))
            out.append((rider, count, result))
        return out


class RideAlong:
    """Plans a batch's ride-along claims and posts their offers to the sessions' inboxes.

    It reads the sessions (to plan) but never changes one: what it hands a
    session goes through the session's inbox, applied by the session's own task.
    """

    def __init__(self, *, hub: SessionHub, dispatcher: Dispatcher, settings: LiveSettings) -> None:
        self.hub, self.dispatcher, self.settings = hub, dispatcher, settings
        self.claims = 0  # ride-along claims committed
        self.offers = 0  # offers they made

    def plan(self, finishes: Sequence[FinishCommand], now: dt.datetime) -> RideAlongPlan | None:
        """The ride-along claims for a batch with these finishes; None when the queues are not deep."""
        if not finishes or not self.dispatcher.backlogged:
            return None
        hub = self.hub
        by_session: dict[str, list[str]] = {}
        for command in finishes:
            by_session.setdefault(command.session_id, []).append(command.lease_id)
        riders: dict[str, _Rider] = {}
        for sid in sorted(by_session):
            session = hub.get(sid)
            if session is None or session.drain or session.ending or session.capacity <= 0:
                continue
            mine = frozenset(lease for lease in by_session[sid] if session.holds(lease))
            if mine:
                riders[sid] = _Rider(session, session.active_leases, mine, new_credentials(len(mine)))
        if not riders:
            return None
        for rider in riders.values():  # its held= is a count taken now (see SessionInbox.claim_begun)
            rider.claim = rider.session.inbox.claim_begun()
        settings = self.settings
        return RideAlongPlan(riders, finishes, now, settings.start_timeout_ms, settings.lease_ttl_ms, hub.paused)

    def committed(self, claims: list[tuple[_Rider, int, Any]]) -> None:
        """The batch committed (its acks are posted): post the offers after them, for the same outbox write."""
        for rider, want, result in claims:
            if not isinstance(result, AssignResult):
                continue  # the session is gone (refused): nothing was offered
            self.claims += 1
            self.offers += len(result.offers)
            # Counted at once (the inbox re-files the session in the hub), pushed by the session's own task.
            rider.session.inbox.offers_committed(result)
            if len(result.offers) < min(want, result.free_slots):
                # Short of work, not of room (a lowered capacity, a drain): the queues are not deep any more.
                self.dispatcher.backlogged = False

    def uncertain(self, plan: RideAlongPlan) -> None:
        """The batch's outcome is unknown after its claims ran: count the leases they may have made."""
        if plan.ran:
            for rider in plan.riders.values():
                rider.session.inbox.leases_uncertain(c.lease_id for c in rider.credentials)

    def statistics(self) -> dict[str, int]:
        return {"claims": self.claims, "offers": self.offers}
