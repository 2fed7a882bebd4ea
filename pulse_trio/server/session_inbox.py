"""One connection's inbox: all that other tasks tell a session, applied by the connection's own task.

A session's state (its leases, its chart, the frames it sends) changes in
the connection's own tasks only: its reader (``receive``, a resume) and
its results task (:meth:`LiveSession.apply_results
<pulse_trio.server.live_session.LiveSession.apply_results>`), which runs in
the connection's nursery beside its reader and writer. Everyone else who
has news for the session posts it here, and the results task applies
everything posted since it last ran, in order, with no await between:

* the batcher's lanes (``batcher.py``): each lease command's outcome, and
  a batch's ride-along offers (``ride_along.py``) right after its acks, so
  the acks and offers of one batch leave in one outbox write;
* the dispatcher (``dispatcher.py``): the offers its claims committed, and
  the leases a failed claim may have made;
* the timers (``timers.py``): a lease a timer ended, a reconciliation of
  the session's leases with the database, a cancel notice to push, the
  revocation of the session's token;
* the HTTP side (``live.py``): an operator's drain, an offer its cancel revoked;
* another connection's reader: a lease its resume took from this session;
* the service and node liveness (``wire.py``): the instance is stopping.

What does not belong to the connection is taken at the door, by the
poster, whether or not the connection is still there: the command
counters, the assignment metrics, the listeners told that a task's attempt
ended. A command that was queued always runs, even if its connection has
gone since; once the inbox is closed (the connection has ended) the rest
of any post is dropped: a command's commit is in the database, a replay
finds the receipt, and an offer nobody receives lapses after the start
timeout, as it did when it was pushed to a closed connection.

Cost: no task, lock or channel per post. A post appends to a list; the
first post after the results task parked reschedules it, so a burst of
posts (a batch, a dispatch round, a timer tick) costs each connection one
wake-up however many of them are its own.

Bounds: the connection's in-flight limit (``in_flight_limit``) bounds its
commands between read and answer, and an outcome counts as in flight
until applied; each ride-along entry (offers, or the leases a failed
batch may have made) rides on a finish of the same batch, one per session
and batch. The other posters post at most once per session per claim,
lease ended, reconciliation, cancel notice or revocation, and the results
task takes everything at its next wake-up.

What the dispatcher reads counts posts at once, so no claim over-offers
and no drained session is offered work meanwhile: leases posted and not
yet applied (offers, and the leases a failed claim may have made) count as
the session's (:attr:`SessionInbox.leases_posted`, part of
``LiveSession.active_leases``), and a posted drain closes its free slots
(:attr:`SessionInbox.drain_posted`). News that a lease ended only lowers
the count once applied: until then the count is high, which is safe. A
lease never comes back to a session it left (it ends, or a resume moves
it to a session of a newer epoch), so news of its end, applied late, can
never forget a lease the session got since.

The claims in flight that took the session's count
(:meth:`SessionInbox.claim_begun`) live here too: the dispatcher and the
lanes register them, and a resume waits for them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import trio

from pulse_trio.contract import messages as m
from pulse_trio.store.engine.results import AssignResult, CancelNotice, Refusal

log = logging.getLogger("pulse_trio.connection")

# The heads of the entries that are not a command's outcome (those are headed by their request frame).
#: A claim's committed offers (the dispatcher's, or a batch's ride-along): an AssignResult.
OFFERS = "offers"
#: Lease ids a failed claim may have made for the session.
UNCERTAIN = "uncertain"
#: ``(lease_id, news)``: a lease that ended elsewhere than in the session's own finish (a timer, a
#: resume elsewhere, a cancel through this instance's HTTP API); ``news``: the end may have made work
#: ready (the dispatcher fills every free slot).
ENDED = "ended"
#: ``(known, live)``: the timers' reconciliation of the session's leases with the database.
RECONCILE = "reconcile"
#: A CancelNotice to push to the worker.
CANCEL = "cancel"
#: An operator's drain committed (through this instance's HTTP API).
DRAIN = "drain"
#: The instance is stopping, or its node was fenced: server_shutting_down, then close.
SHUTDOWN = "shutdown"
#: The token the session was opened with has been revoked: a fatal permission_denied, then close.
REVOKED = "revoked"


class SessionInbox:
    """What other tasks post for one connection; taken by its results task, all at once."""

    __slots__ = ("_items", "_parked", "closed", "leases_posted", "drain_posted", "_claims", "_count_command",
                 "_task_ended", "_observe_assign", "_now", "_refresh")

    def __init__(self, *, count_command: Callable[[Any, Any], None], task_ended: Callable[[str], None],
                 observe_assign: Callable[[Any, Any], None], now: Callable[[], Any],
                 refresh: Callable[[], None]) -> None:
        #: ``(request, outcome)`` of a command, or ``(head, payload)`` with one of the heads above.
        self._items: list[tuple[Any, Any]] = []
        self._parked: trio.lowlevel.Task | None = None  # the results task, while it waits for a post
        self.closed = False
        #: Leases in posted entries not yet taken: the session counts them as its own meanwhile.
        self.leases_posted = 0
        #: A drain posted and not yet taken: the session offers no free slot meanwhile.
        self.drain_posted = False
        #: One event per claim in flight that was built with the session's count (:meth:`claim_begun`).
        self._claims: set[trio.Event] = set()
        self._count_command = count_command
        self._task_ended = task_ended
        self._observe_assign = observe_assign
        self._now = now
        #: Re-files the session in the hub after a post changed what the dispatcher reads of it.
        self._refresh = refresh

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

    # -- the claims' side (the dispatcher, the lanes' ride-along) ---------------------
    def offers_committed(self, result: AssignResult) -> None:
        """A claim for this session committed: its offers count at once, and go out after what was posted before."""
        offers = result.offers
        if not offers:
            return
        now = self._now()
        for offer in offers:
            self._observe_assign(offer, now)
        if self.closed:
            _undelivered(result)
            return
        self.leases_posted += len(offers)
        self._items.append((OFFERS, result))
        self._wake()
        self._refresh()

    def leases_uncertain(self, lease_ids: Iterable[str]) -> None:
        """A claim whose outcome is unknown may have made these leases for the session: count them."""
        if self.closed:
            return
        ids = tuple(lease_ids)
        self.leases_posted += len(ids)
        self._items.append((UNCERTAIN, ids))
        self._wake()
        self._refresh()

    # -- the timers', the HTTP side's and the other connections' side ---------------------
    def lease_ended(self, lease_id: str, *, news: bool = False) -> None:
        """One of the session's leases ended (a timer, a cancel) or moved (a resume elsewhere): free its slot."""
        self._post(ENDED, (lease_id, news))

    def reconcile(self, known: frozenset[str], live: frozenset[str]) -> None:
        """Forget the leases of ``known`` (read before ``live``) that the database no longer has live here."""
        self._post(RECONCILE, (known, live))

    def notify_cancel(self, notice: CancelNotice) -> None:
        """Push ``task.cancel`` for one of the session's leases (the database marked it told)."""
        self._post(CANCEL, notice)

    def drain_hinted(self) -> None:
        """An operator drained the session: no more offers, from now on."""
        if self.closed:
            return
        self.drain_posted = True
        self._post(DRAIN, None)
        self._refresh()

    def shutdown(self) -> None:
        """The instance is stopping: send server_shutting_down and close."""
        self._post(SHUTDOWN, None)

    def token_revoked(self) -> None:
        """The session's token was revoked: end the session, as its handshake would be refused now."""
        self._post(REVOKED, None)

    def _post(self, head: str, payload: Any) -> None:
        if self.closed:
            return
        self._items.append((head, payload))
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
        posted (and a drain) stop counting here and count in the session from then on.
        """
        if not self._items:
            self._parked = trio.lowlevel.current_task()

            def abort(_: Any) -> trio.lowlevel.Abort:
                self._parked = None
                return trio.lowlevel.Abort.SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort)
        items, self._items = self._items, []
        self.leases_posted = 0
        self.drain_posted = False
        return items

    def close(self) -> None:
        """The connection has ended: drop what is posted and what will be (the posters still take their share)."""
        self.closed = True
        for head, payload in self._items:
            if head is OFFERS:
                _undelivered(payload)
        self._items = []
        self.leases_posted = 0
        self.drain_posted = False

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

    def claims(self) -> list[trio.Event]:
        """The tokens of the claims built with the session's count and not yet settled (a resume waits for them)."""
        return list(self._claims)


def _undelivered(result: AssignResult) -> None:
    """Offers whose connection has ended: nobody receives them, and each lapses after the start timeout."""
    for offer in result.offers:
        log.info("offer %s not delivered; it will lapse", offer.lease.lease_id)


__all__ = ["CANCEL", "DRAIN", "ENDED", "OFFERS", "RECONCILE", "REVOKED", "SHUTDOWN", "UNCERTAIN", "SessionInbox"]
