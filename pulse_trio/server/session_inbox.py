"""One connection's inbox: what the command lanes hand back, applied by the connection's own task.

The batcher's lanes (``batcher.py``) run the commands of every connection,
and ride-along claims (``ride_along.py``) make offers for them; neither
applies what comes back to a session. A lane posts each outcome here and
wakes the connection's results task (:meth:`LiveSession.apply_results
<pulse_trio.server.live_session.LiveSession.apply_results>`), which runs
in the connection's own nursery beside its reader and writer and applies
everything posted since it last ran, in order, with no await between: the
in-flight count and the reader's room, the session's leases, the frames
out. So only the connection's own tasks change its session, and the acks
and offers of one batch still leave in one outbox write.

What does not belong to the connection is taken at the door, in the lane,
whether or not the connection is still there: the command counters, the
assignment metrics, the listeners told that a task's attempt ended. A
command that was queued always runs, even if its connection has gone
since; once the inbox is closed (the connection has ended) the rest of an
outcome is dropped: its commit is in the database, a replay finds the
receipt, and an offer nobody receives lapses after the start timeout.

Cost: no task, lock or channel per command. A post appends to a list; the
first post after the results task parked reschedules it, so a batch costs
each of its connections one wake-up however many of its commands it holds.

Bounds: the connection's in-flight limit (``in_flight_limit``) bounds its
commands between read and answer, and an outcome counts as in flight
until applied; each ride-along entry (offers, or the leases a failed
batch may have made) rides on a finish of the same batch, one per session
and batch. So the inbox holds at most twice the in-flight limit.

Leases posted and not yet applied (ride-along offers, the leases a failed
batch's claims may have made) count as the session's at once
(:attr:`SessionInbox.leases_posted`, part of ``LiveSession.active_leases``):
a claim built before the results task runs never takes a count lower than
the database's. The claims in flight that took the session's count
(:meth:`SessionInbox.claim_begun`) live here too: the dispatcher and the
lanes register them, and a resume waits for them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import trio

from pulse_trio.contract import messages as m
from pulse_trio.store.engine.results import AssignResult, Refusal

log = logging.getLogger("pulse_trio.connection")

#: The head of an entry that carries a ride-along claim's committed offers.
OFFERS = "offers"
#: The head of an entry that carries lease ids a failed batch's claims may have made.
UNCERTAIN = "uncertain"


class SessionInbox:
    """Outcomes posted by the lanes for one connection; taken by its results task, all at once."""

    __slots__ = ("_items", "_parked", "closed", "leases_posted", "_claims", "_count_command", "_task_ended",
                 "_observe_assign", "_now")

    def __init__(self, *, count_command: Callable[[Any, Any], None], task_ended: Callable[[str], None],
                 observe_assign: Callable[[Any, Any], None], now: Callable[[], Any]) -> None:
        #: ``(request, outcome)`` of a command, or ``(OFFERS, AssignResult)``, or ``(UNCERTAIN, lease ids)``.
        self._items: list[tuple[Any, Any]] = []
        self._parked: trio.lowlevel.Task | None = None  # the results task, while it waits for a post
        self.closed = False
        #: Leases in posted entries not yet taken: the session counts them as its own meanwhile.
        self.leases_posted = 0
        #: One event per claim in flight that was built with the session's count (:meth:`claim_begun`).
        self._claims: set[trio.Event] = set()
        self._count_command = count_command
        self._task_ended = task_ended
        self._observe_assign = observe_assign
        self._now = now

    # -- the lanes' side ---------------------------------------------------------
    def command_done(self, request: m.TaskStart | m.TaskRenew | m.TaskFinish, outcome: Any) -> None:
        """A command's batch has run: ``outcome`` is a CommandAck, a Refusal, or the exception that failed it."""
        if isinstance(outcome, BaseException):
            log.error("lease command %s failed in the store: %r", request.id, outcome)
        elif not isinstance(outcome, Refusal):
            self._count_command(request, outcome)
            if type(request) is m.TaskFinish and not outcome.receipt.duplicate:
                self._task_ended(request.task_id)
        if self.closed:
            return
        self._items.append((request, outcome))
        self._wake()

    def offers_committed(self, result: AssignResult) -> None:
        """A ride-along claim for this session committed: its offers go out after the acks posted before."""
        offers = result.offers
        now = self._now()
        for offer in offers:
            self._observe_assign(offer, now)
        if self.closed:
            for offer in offers:
                log.info("offer %s not delivered; it will lapse", offer.lease.lease_id)
            return
        self.leases_posted += len(offers)
        self._items.append((OFFERS, result))
        self._wake()

    def leases_uncertain(self, lease_ids: Iterable[str]) -> None:
        """A claim whose outcome is unknown may have made these leases for the session: count them."""
        if self.closed:
            return
        ids = tuple(lease_ids)
        self.leases_posted += len(ids)
        self._items.append((UNCERTAIN, ids))
        self._wake()

    def _wake(self) -> None:
        task = self._parked
        if task is not None:
            self._parked = None
            trio.lowlevel.reschedule(task)

    # -- the connection's side -----------------------------------------------------
    async def take(self) -> list[tuple[Any, Any]]:
        """Everything posted since the last take, in order; waits for a post when there is none.

        The caller applies what it took before its next await: the leases
        posted stop counting here and count in the session from then on.
        """
        if not self._items:
            self._parked = trio.lowlevel.current_task()

            def abort(_: Any) -> trio.lowlevel.Abort:
                self._parked = None
                return trio.lowlevel.Abort.SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort)
        items, self._items = self._items, []
        self.leases_posted = 0
        return items

    def close(self) -> None:
        """The connection has ended: drop what is posted and what will be (the lanes still take their share)."""
        self.closed = True
        self._items = []
        self.leases_posted = 0

    # -- claims that took the session's count ------------------------------------------
    def claim_begun(self) -> trio.Event:
        """A claim took the session's lease count as given (``assign(held=...)``).

        Until :meth:`claim_settled`, a lease resumed into the session would
        not be in that count, and the claim could fill the slot the resume
        took: a resume waits for the claims begun before it (a claim is
        short, and resumes are rare). Returns the claim's token.
        """
        claim = trio.Event()
        self._claims.add(claim)
        return claim

    def claim_settled(self, claim: trio.Event) -> None:
        """The claim committed (its offers counted) or failed (its leases counted as uncertain)."""
        claim.set()
        self._claims.discard(claim)

    @property
    def claims_in_flight(self) -> int:
        """Claims built with the session's count and not yet settled (a resume waits for them)."""
        return len(self._claims)

    def claims(self) -> list[trio.Event]:
        """The tokens of the claims in flight now."""
        return list(self._claims)


__all__ = ["OFFERS", "UNCERTAIN", "SessionInbox"]
