"""One lease, from offer to finish: the Trio task that runs one attempt.

Theory of operation. A runner owns one lease and never lets two commands
on it overlap: each command carries the revision the previous ack returned,
so ordering is the whole correctness argument. The structure keeps them
apart, with no lock: ``task.start`` is awaited before anything else runs;
renewals run one at a time, only while the handler runs, in a nursery that
is closed (so any renewal under way has its ack) before ``task.finish``.

1. ``task.start``, and only after its ack, the handler (an offer is not
   permission to act).
2. While the handler runs: a renew every third of the time left on the
   lease, and a watchdog that stops the handler when the local estimate of
   ``expires_at`` passes without a renewal (the lease is lost: someone else
   may run the task now). Both are one timer on the worker's
   :class:`~pulse_trio.sdk.clock.LeaseClock`, re-armed at every ack; a due
   renewal is started in the runner's nursery. A renewal showing
   ``cancel_requested_at`` or a ``task.cancel`` push cancels the handler's
   scope.
3. ``task.finish`` with the mapped outcome.

Reconnects. A command whose connection dropped before its ack stays
``inflight`` with its exact content. On the next connection the worker
calls :meth:`reattach` before declaring capacity: the in-flight command is
sent again, same revision, same content; the server answers from its
receipts (``duplicate: true``) if it had committed, or refuses it (this
session does not own the lease yet) if it had not. Then ``worker.resume``
moves the lease here and the ack's new revision is used from then on. A
finish that turns out committed needs no resume. The handler is never
interrupted by any of this: a dropped socket is not a lost lease.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import TYPE_CHECKING, Any, Protocol

import trio

from pulse_trio.contract import messages as m
from pulse_trio.sdk import outcome as oc
from pulse_trio.sdk.context import CANCEL_REQUESTED, LEASE_LOST, TaskContext
from pulse_trio.sdk.errors import CommandRefused, ConnectionLost, HandlerOutcome, LeaseLost, TaskCancelled
from pulse_trio.sdk.registry import Handler

if TYPE_CHECKING:
    from pulse_trio.sdk.clock import LeaseClock, Timer
    from pulse_trio.sdk.transport import Connection
    from pulse_trio.sdk.worker import WorkerStats

log = logging.getLogger("pulse_trio.sdk")

#: Refusals that mean this worker no longer holds the lease.
GONE = frozenset({"lease_not_found", "lease_expired", "lease_not_owned", "task_cancelled", "revision_conflict",
                  "invalid_transition"})
#: Finish refusals about the content: resend as a plain FAILED so the task does not hang.
CONTENT = frozenset({"invalid_result", "result_too_large", "cancel_not_requested"})
MIN_RENEW_INTERVAL_S = 0.05


@dataclasses.dataclass(frozen=True, slots=True)
class Credentials:
    """A worker instance's identity, needed to resume its leases from a later session."""

    instance_id: str
    instance_secret: str = dataclasses.field(repr=False)


class LeaseHost(Protocol):
    """What a runner needs from its worker."""

    stats: WorkerStats
    thread_limiter: trio.CapacityLimiter
    clock: LeaseClock

    def ready_connection(self, *, not_: Connection | None = None) -> Connection | None: ...

    async def connection(self, *, not_: Connection | None = None) -> Connection: ...


class LeaseRunner:
    def __init__(self, host: LeaseHost, offer: m.TaskAssign, handler: Handler, conn: Connection,
                 owner: Credentials) -> None:
        self.host = host
        self.handler = handler
        self.task = offer.task
        self.lease_id = offer.lease.lease_id
        self._secret = offer.lease.lease_secret
        self.lease = offer.lease
        self.deadline = conn.local_deadline(offer.lease.expires_at)
        self._absorbed_at = trio.current_time()
        self._can_extend = True
        self._max_result_bytes = conn.max_result_bytes
        self.owners: list[Credentials] = [owner]
        self.inflight: tuple[type, dict[str, Any]] | None = None
        self.replayed: m.CommandResult | None = None
        self.lost: str | None = None
        self.finished = False
        self.ctx = TaskContext(offer.task, self.lease_id)
        self._handler_scope = trio.CancelScope()
        self._renewals: trio.Nursery | None = None  # open while the handler runs
        self._renewing = False
        self._watching = False  # the clock holds a timer for this lease
        self._timer: Timer | None = None

    def __repr__(self) -> str:
        return f"LeaseRunner({self.task.task_id} {self.task.queue}/{self.task.kind} {self.lease_id})"

    @property
    def label(self) -> str:
        return f"{self.task.task_id} {self.task.queue}/{self.task.kind} (attempt {self.task.attempt})"

    # -- the attempt --------------------------------------------------------------
    async def run(self) -> None:
        try:
            await self._command(m.TaskStart)
        except (LeaseLost, CommandRefused) as exc:
            log.warning("task %s not started: %s", self.label, exc)
            return
        self.host.stats.started += 1
        if log.isEnabledFor(logging.INFO):  # the label and outcome text are built per task: skip them when quiet
            log.info("task %s started", self.label)
        self._watching = True
        try:
            async with trio.open_nursery() as renewals:
                self._renewals = renewals
                self._arm()
                try:
                    outcome = await self._call_handler()
                finally:
                    # No new renewal, whatever the handler raised; one under way
                    # gets its ack before the nursery closes (and before the finish).
                    self._renewals = None
        finally:
            self._disarm()
        if outcome is not None and self.lost is None:
            await self._finish(outcome)
        if self.lost is not None:
            self.host.stats.lost += 1
            log.warning("task %s: lease lost (%s); not finished here", self.label, self.lost)

    async def _call_handler(self) -> oc.Outcome | None:
        """Run the handler in its own cancel scope; None when it was stopped for a lost lease."""
        ctx, handler = self.ctx, self.handler
        result: oc.Outcome | None = None
        with self._handler_scope:
            try:
                if handler.sync:
                    value = await trio.to_thread.run_sync(handler.fn, ctx, limiter=self.host.thread_limiter)
                else:
                    value = await handler.fn(ctx)
                result = oc.succeeded(value, self._max_result_bytes)
            except TaskCancelled as exc:
                result = None if ctx.stop_reason == LEASE_LOST else oc.from_exception(
                    exc, cancel_requested=ctx.stop_reason == CANCEL_REQUESTED)
            except Exception as exc:
                if ctx.stop_reason == LEASE_LOST:
                    return None
                if not isinstance(exc, HandlerOutcome):
                    log.exception("handler %s raised for task %s", handler.name, self.task.task_id)
                result = oc.from_exception(exc, cancel_requested=ctx.stop_reason == CANCEL_REQUESTED,
                                           max_bytes=self._max_result_bytes)
        if self._handler_scope.cancelled_caught:
            if ctx.stop_reason == CANCEL_REQUESTED:
                return oc.cancelled(ctx.cancel_reason or "cancelled by request")
            return None
        return result

    async def _finish(self, outcome: oc.Outcome) -> None:
        for attempt in range(2):
            try:
                body = await self._command(m.TaskFinish, **outcome.fields())
            except LeaseLost:
                return
            except CommandRefused as exc:
                if attempt == 0 and exc.code in CONTENT:
                    log.warning("task %s: finish %s refused (%s); finishing FAILED", self.label,
                                outcome.status, exc.code)
                    outcome = oc.fallback(outcome, exc.code, exc.message)
                    continue
                log.error("task %s: finish refused: %s", self.label, exc)
                self._lose(f"finish refused: {exc.code}")
                return
            self.finished = True
            self.host.stats.count(outcome.status, duplicate=body.receipt.duplicate)
            if log.isEnabledFor(logging.INFO):
                log.info("task %s %s", self.label, outcome.describe())
            return

    # -- keeping the lease ----------------------------------------------------------
    def _arm(self) -> None:
        """(Re)set the lease's one timer: the next renewal while the handler runs, else the expiry."""
        clock = self.host.clock
        clock.cancel(self._timer)
        when = self.deadline
        if self._renewals is not None and self._can_extend and not self._renewing:
            when = min(when, renew_due(self._absorbed_at, self.deadline))
        self._timer = clock.call_at(when, self._ring)

    def _disarm(self) -> None:
        self._watching = False
        self.host.clock.cancel(self._timer)
        self._timer = None

    def _ring(self) -> None:
        """The timer came up (in the clock's task): lose the lease, or start its renewal."""
        self._timer = None
        if self.lost is not None or not self._watching:
            return
        now = trio.current_time()
        if now >= self.deadline:
            self._lose("its expiry passed without a renewal")
            return
        if (self._renewals is not None and self._can_extend and not self._renewing
                and now >= renew_due(self._absorbed_at, self.deadline)):
            self._renewing = True
            self._renewals.start_soon(self._renew)
        self._arm()

    async def _renew(self) -> None:
        try:
            await self._command(m.TaskRenew)
            self.host.stats.renewals += 1
        except LeaseLost:
            pass
        except CommandRefused as exc:
            self._lose(f"renew refused: {exc.code}")
        finally:
            self._renewing = False
            if self._watching and self.lost is None:
                self._arm()

    def _lose(self, reason: str) -> None:
        if self.lost is None:
            self.lost = reason
            if self.ctx._halt(LEASE_LOST, reason):
                self._handler_scope.cancel()
            self._disarm()

    def request_cancel(self, reason: str) -> None:
        """A cancel push, or a lease showing cancel_requested_at: stop the handler."""
        if self.ctx._halt(CANCEL_REQUESTED, reason):
            log.info("task %s: cancel requested%s", self.label, f" ({reason})" if reason else "")
            self._handler_scope.cancel()

    def _absorb(self, lease: m.Lease | None, conn: Connection, *, renewed: bool = False,
                granted_since: tuple[float, m.Receipt] | None = None) -> None:
        """Take the lease from an ack: revision, local deadline, cancellation.

        ``granted_since`` is (the Trio time the command was sent, its receipt).
        The local deadline comes from the clock offset measured at the welcome;
        it is capped at the send time plus what the server granted, read in
        the server's own clock (``expires_at − committed_at``), because the
        command committed after it was sent. So a step of the server's wall
        clock after the welcome can only shorten the local lease, never
        stretch it past the server's.
        """
        if lease is None:
            return
        # A renewal that did not move expires_at hit the cancel grace
        # deadline: renewing again cannot help, the watchdog takes over.
        self._can_extend = not renewed or lease.expires_at > self.lease.expires_at
        self.lease = lease
        self.deadline = conn.local_deadline(lease.expires_at)
        if granted_since is not None:
            sent, receipt = granted_since
            granted = (lease.expires_at - receipt.committed_at).total_seconds()
            self.deadline = min(self.deadline, sent + granted)
        self._absorbed_at = trio.current_time()
        if self._watching:
            self._arm()
        if lease.cancel_requested_at is not None:
            self.request_cancel("")

    # -- one command, through reconnects ---------------------------------------------
    async def _command(self, cls: type, **extra: Any) -> m.CommandResult:
        """Commit one lease command; raises LeaseLost, or CommandRefused for other refusals.

        Never called while another command of this lease is under way (see the module docstring).
        """
        conn: Connection | None = None
        while True:
            if self.lost is not None:
                raise LeaseLost(self.lost)
            conn = await self._next_connection(conn)
            if self.replayed is not None:  # reattach recovered the lost ack
                body, self.replayed = self.replayed, None
                return body
            fields = dict(task_id=self.task.task_id, lease_id=self.lease_id, lease_secret=self._secret,
                          revision=self.lease.revision, **extra)
            self.inflight = (cls, fields)
            sent = trio.current_time()
            try:
                with trio.move_on_at(self.deadline) as late:
                    body = await conn.request(cls, **fields)
            except ConnectionLost:
                continue  # reattach on the next connection settles it
            except CommandRefused as exc:
                self.inflight = None
                if exc.fatal:
                    continue  # the connection is ending; nothing was committed
                if exc.code == "internal" or exc.retry_after_ms is not None:
                    await trio.sleep((exc.retry_after_ms or 1000) / 1000)
                    continue
                if exc.code in GONE:
                    self._lose(f"{cls.TYPE} refused: {exc.code}")
                    raise LeaseLost(self.lost or exc.code) from None
                raise
            if late.cancelled_caught:
                self._lose(f"no answer to {cls.TYPE} before the lease expired")
                raise LeaseLost(self.lost or "")
            self.inflight = None
            assert isinstance(body, m.CommandResult)
            if body.receipt.duplicate:
                self.host.stats.duplicates += 1
            self._absorb(body.lease, conn, renewed=cls is m.TaskRenew, granted_since=(sent, body.receipt))
            return body

    async def _next_connection(self, previous: Connection | None) -> Connection:
        """A ready connection other than ``previous``, or LeaseLost once the lease must have expired."""
        conn = self.host.ready_connection(not_=previous)
        if conn is not None:
            return conn
        while True:
            with trio.move_on_at(self.deadline):
                return await self.host.connection(not_=previous)
            if self.lost is not None:
                raise LeaseLost(self.lost)
            if trio.current_time() >= self.deadline:
                self._lose("disconnected until its expiry")
                raise LeaseLost(self.lost or "")

    async def reattach(self, conn: Connection, owner: Credentials) -> None:
        """On a new connection, before capacity is declared: settle the in-flight command, resume."""
        if self.lost is not None or self.finished:
            return
        if self.inflight is not None:
            cls, fields = self.inflight
            try:
                body = await conn.request(cls, **fields)
            except CommandRefused:
                self.inflight = None  # not committed: the runner sends it again at the new revision
            except ConnectionLost:
                return
            else:
                assert isinstance(body, m.CommandResult)
                self.inflight = None
                self.replayed = body
                if body.receipt.duplicate:
                    self.host.stats.duplicates += 1
                log.info("task %s: %s was committed before the disconnect (duplicate=%s)", self.label,
                         cls.TYPE, str(body.receipt.duplicate).lower())
                if cls is m.TaskFinish:
                    return
        await self._resume(conn, owner)

    async def _resume(self, conn: Connection, owner: Credentials) -> None:
        for candidate in reversed(list(self.owners)):
            try:
                lease = await conn.request(
                    m.WorkerResume, instance_id=candidate.instance_id, instance_secret=candidate.instance_secret,
                    task_id=self.task.task_id, lease_id=self.lease_id, lease_secret=self._secret)
            except ConnectionLost:
                self.owners.append(owner)  # the resume may have committed: the next try may need these
                return
            except CommandRefused as exc:
                if exc.code in ("lease_not_owned", "lease_not_found") and candidate is not self.owners[0]:
                    continue
                self._lose(f"resume refused: {exc.code}")
                return
            assert isinstance(lease, m.Lease)
            self.owners = [owner]
            self._absorb(lease, conn)
            self.host.stats.resumed += 1
            log.info("task %s: lease resumed at revision %d", self.label, lease.revision)
            return


def renew_due(absorbed_at: float, deadline: float) -> float:
    """When to renew: a third of the way from the last ack to the local expiry."""
    left = deadline - absorbed_at
    return absorbed_at + max(MIN_RENEW_INTERVAL_S, left / 3) if math.isfinite(left) else math.inf
