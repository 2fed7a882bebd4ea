"""One lease, from offer to finish: steps completed by their acks, and the handler run in a task of the worker's pool.

Theory of operation. A runner owns one lease and never lets two commands
on it overlap: each command carries the revision the previous ack returned,
so ordering is the whole correctness argument. A command is a *step*
(:class:`_Step`): issued, sent on the ready connection, and completed by a
callback that the connection calls from its reader when the answer comes.
A runner holds at most one step, so the order is kept without a lock, and
no task waits for an ack:

1. At the offer, ``task.start``. Only its ack starts the handler, in a
   task of the worker's pool (``pool``: one handler at a time per task, in
   a context of its own; an offer is not permission to act). Every command
   frame is joined from the lease's fields encoded once (``frames``).
2. While the handler runs: a renewal every third of the time left on the
   lease, and a watchdog that stops the handler when the local estimate of
   ``expires_at`` passes without a renewal (the lease is lost: someone else
   may run the task now). Both are one timer on the worker's
   :class:`~pulse_trio.sdk.clock.LeaseClock`, re-armed at every ack; the
   timer's callback issues the renewal. A renewal showing
   ``cancel_requested_at`` or a ``task.cancel`` push cancels the handler's
   scope.
3. ``task.finish`` with the mapped outcome, issued as the handler returns,
   or, when a renewal is under way, at its ack (the finish needs the
   revision it returns). The handler's job ends there (its task goes back
   to the pool); the finish's ack retires the runner.

The runner's phases (starting, running, finishing, retired) and a step's
states (parked, sent, retrying, answered) are the charts ``worker_lease``
and ``worker_command`` in ``statecharts/``, read once at import
(:mod:`pulse_trio.sdk.lifecycle`): the code fires a trigger, the chart says
where it leads.

Reconnects. A step whose connection dropped before its ack keeps its exact
content as ``inflight``, and the runner *parks*. On the next connection the
worker calls :meth:`reattach` before declaring capacity: the in-flight
command is sent again, same revision, same content; the server answers from
its receipts (``duplicate: true``) if it had committed, or refuses it (this
session does not own the lease yet) if it had not. Then ``worker.resume``
moves the lease here and the ack's new revision is used from then on. A
finish that turns out committed needs no resume. Once the connection is
ready the worker calls :meth:`connected`: a recovered ack completes the
parked step, and a command that was not committed goes out again at the new
revision. The handler is never interrupted by any of this: a dropped socket
is not a lost lease; only the watchdog, or a refusal saying the lease is
gone, loses it.

Settling. A finish (or the renewal it waits for, or a start) that is still
unanswered when the lease's local expiry passes is not written off: the service may
have committed it, and the contract lets the worker ask again. The runner
keeps waiting for the answer, re-sends the same command after a reconnect
(a committed finish replays its receipt) and after an ``internal`` answer
(with backoff, on the same connection), for up to ``SETTLE_AFTER_EXPIRY_S``.
A lease is counted *lost* only when the service said it is gone, or its
expiry passed with nothing of ours in flight that could have kept it; a
runner that stops asking without an answer counts its task as *outcome
unknown to this worker* (``stats.unsettled``).

A handler is only called with at least ``min(MIN_HANDLER_LEASE_S, half the
ttl granted)`` of its lease left; a start acknowledged later than that is
renewed first, and the handler is called once a renewal gives it the time.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from pulse_trio.contract import messages as m
from pulse_trio.contract.frozen import frozen
from pulse_trio.sdk import outcome as oc
from pulse_trio.sdk.context import CANCEL_REQUESTED, LEASE_LOST, TaskContext
from pulse_trio.sdk.errors import CommandRefused, ConnectionLost
from pulse_trio.sdk.frames import PLAIN_TAIL, LeaseFrames, finish_tail
from pulse_trio.sdk.invoke import call_handler
from pulse_trio.sdk.lifecycle import COMMAND, LEASE
from pulse_trio.sdk.registry import Handler

if TYPE_CHECKING:
    from pulse_trio.sdk.clock import LeaseClock, Timer
    from pulse_trio.sdk.transport import Answer, Connection
    from pulse_trio.sdk.stats import WorkerStats
    from pulse_trio.sdk.threads import HandlerThreads

log = logging.getLogger("pulse_trio.sdk")

#: Refusals that mean this worker no longer holds the lease.
GONE = frozenset({"lease_not_found", "lease_expired", "lease_not_owned", "task_cancelled", "revision_conflict",
                  "invalid_transition"})
#: Finish refusals about the content: resend as a plain FAILED so the task does not hang.
CONTENT = frozenset({"invalid_result", "result_too_large", "cancel_not_requested"})
MIN_RENEW_INTERVAL_S = 0.05
#: A handler is called only with this much lease left (or half the ttl granted, if less); else renew first.
MIN_HANDLER_LEASE_S = 1.0
#: How long past its local expiry a runner keeps asking what became of an unanswered finish.
SETTLE_AFTER_EXPIRY_S = 60.0
#: A command answered ``internal`` is sent again after RETRY_INITIAL_S, doubling up to RETRY_MAX_S.
RETRY_INITIAL_S = 0.05
RETRY_MAX_S = 2.0

# The phases of a runner: chart ``worker_lease`` (docs/statecharts/worker_lease.md) names them and
# says which trigger leads where; :meth:`LeaseRunner._move` is the one place a phase changes.
STARTING = LEASE.state("starting")    # task.start issued; no handler yet
RUNNING = LEASE.state("running")      # the handler's task runs; renewals are due
FINISHING = LEASE.state("finishing")  # the handler returned; task.finish is issued (or waits for a renewal's ack)
RETIRED = LEASE.state("retired")      # finished, lost or never started: the worker has forgotten it

# The states of a step: chart ``worker_command`` (docs/statecharts/worker_command.md); a step moves
# only through :meth:`_Step.move`.
SENT = COMMAND.state("sent")          # on a live connection, its answer due
PARKED = COMMAND.state("parked")      # waiting for a connection: not sent, or sent on one that dropped (``inflight``)
RETRYING = COMMAND.state("retrying")  # refused for now (internal, retry_after_ms): resent by a timer


@frozen
class Credentials:
    """A worker instance's identity, needed to resume its leases from a later session."""

    instance_id: str
    instance_secret: str = dataclasses.field(repr=False)


class LeaseHost(Protocol):
    """What a runner needs from its worker."""

    stats: WorkerStats
    threads: HandlerThreads
    clock: LeaseClock

    def ready_connection(self, *, not_: Connection | None = None) -> Connection | None: ...

    def spawn(self, fn: Callable[[], Any]) -> None: ...

    def stopped_hard(self) -> bool: ...

    def retire(self, runner: LeaseRunner) -> None: ...

    def thread_stuck(self, stuck: bool) -> None: ...


class _Step:
    """One command of a lease, from issue to its ack; ``answer`` is what the connection calls back."""

    __slots__ = ("runner", "cls", "outcome", "tail", "done", "refused", "state", "conn", "sent_at", "tries")

    def __init__(self, runner: LeaseRunner, cls: type, outcome: oc.Outcome | None, tail: bytes,
                 done: Callable[[m.CommandResult], None], refused: Callable[[CommandRefused], None]) -> None:
        self.runner = runner
        self.cls = cls
        self.outcome = outcome  # a finish's fields after the lease's
        self.tail = tail  # the frame after the revision: encoded once per command
        self.done = done
        self.refused = refused
        self.state = COMMAND.initial
        self.conn: Connection | None = None
        self.sent_at = 0.0
        self.tries = 0  # answers of ``internal`` so far (the retry backoff's exponent)

    def answer(self, result: Answer) -> None:
        self.runner._answered(self, result)

    def move(self, trigger: str) -> None:
        """Where chart ``worker_command`` sends this step on ``trigger`` (a ChartError if it declares no such move)."""
        self.state = COMMAND.next(trigger, self.state)


class LeaseRunner:
    def __init__(self, host: LeaseHost, offer: m.TaskAssign, handler: Handler, conn: Connection,
                 owner: Credentials) -> None:
        self.host = host
        self.handler = handler
        self.task = offer.task
        self.lease_id = offer.lease.lease_id
        self._secret = offer.lease.lease_secret
        self.frames = LeaseFrames(self.task.task_id, self.lease_id, self._secret)  # encoded once for every command
        self.lease = offer.lease
        self._now = now = host.clock.now
        self.deadline = conn.local_deadline(offer.lease.expires_at)
        self._absorbed_at = now()
        self._granted = math.inf  # the ttl the last acknowledged command granted, in the server's clock
        self._can_extend = True
        self._handler_called = False
        self._stuck = False  # the lease is lost while its def handler is still in its thread
        self._max_result_bytes = conn.max_result_bytes
        self.owners: list[Credentials] = [owner]
        self.phase = LEASE.initial
        #: The command sent on a connection that dropped before its ack: (type, revision, finish outcome).
        self.inflight: tuple[type, int, oc.Outcome | None] | None = None
        self.replayed: m.CommandResult | None = None  # its ack, recovered by reattach
        self.lost: str | None = None
        self.finished = False
        self.ctx = TaskContext(offer.task, self.lease_id)
        self.ctx._set_deadline(self.deadline - self._absorbed_at)
        self._handler_scope = anyio.CancelScope()
        self._step: _Step | None = None
        self._outcome: oc.Outcome | None = None  # the finish to issue once the renewal under way is acked
        self._fell_back = False
        self._timer: Timer | None = None  # the renewal or the watchdog
        self._retry: Timer | None = None

    def __repr__(self) -> str:
        return f"LeaseRunner({self.task.task_id} {self.task.queue}/{self.task.kind} {self.lease_id})"

    @property
    def handler_called(self) -> bool:
        """Whether this attempt's handler was called (a cancel or a lost lease may come before)."""
        return self._handler_called

    @property
    def finish_unanswered(self) -> bool:
        """``task.finish`` was sent and its answer not taken here (lost with its connection, or recovered by
        reattach and not settled yet): the service may have recorded the outcome."""
        return ((self.inflight is not None and self.inflight[0] is m.TaskFinish)
                or (self.replayed is not None and self.replayed.receipt.command == m.TaskFinish.TYPE))

    @property
    def label(self) -> str:
        return f"{self.task.task_id} {self.task.queue}/{self.task.kind} (attempt {self.task.attempt})"

    # -- the attempt --------------------------------------------------------------
    def begin(self) -> None:
        """At the offer (in the connection's reader): arm the watchdog and issue task.start."""
        self._arm()
        self._issue(m.TaskStart, None, self._started, self._start_refused)

    def _started(self, body: m.CommandResult) -> None:
        self.host.stats.started += 1
        if log.isEnabledFor(logging.INFO):  # the label and outcome text are built per task: skip them when quiet
            log.info("task %s started", self.label)
        self._move("started")
        self._call_or_renew()

    def _call_or_renew(self) -> None:
        """Call the handler if the lease leaves it time enough; else renew first (nothing has happened yet).

        A cancel known by now (pushed while the start was unanswered, or
        shown by its ack or a resume) is reported without calling it.
        """
        if self.ctx.stop_reason == CANCEL_REQUESTED:  # nothing happened: report the cancel at once
            self._move("cancelled_before_call")
            self._finish(oc.cancelled(self.ctx.cancel_reason))
            self._arm()  # the watchdog at this lease's expiry, until the finish's ack
            return
        left = self.deadline - self._now()
        if left >= self.min_handler_lease or not self._can_extend:
            self._handler_called = True
            self._arm()
            self.host.spawn(self._run_handler)
            return
        log.info("task %s: %.0f ms of lease left; renewing before the handler is called", self.label,
                 max(0.0, left) * 1000)
        self._issue(m.TaskRenew, None, self._renewed, self._renew_refused)
        self._arm()

    @property
    def min_handler_lease(self) -> float:
        return min(MIN_HANDLER_LEASE_S, self._granted / 2)

    @property
    def ttl(self) -> float:
        """The ttl the service last granted this lease (inf until an ack said): what the heartbeat keeps up with."""
        return self._granted

    def _start_refused(self, exc: CommandRefused) -> None:
        log.warning("task %s not started: %s", self.label, exc)
        self._retire("start_refused")

    async def _run_handler(self) -> None:
        """The handler's job in a pool task: run it, then issue the finish and end."""
        try:
            outcome = await self._call_handler()
        except BaseException:  # the worker is stopping hard: nothing is finished
            self._retire("stopped")
            raise
        finally:
            if self._stuck:
                self._stuck = False
                self.host.thread_stuck(False)
        if self.phase is RETIRED:
            return
        self._move("handler_returned")  # no new renewal; the watchdog stays until the finish's ack
        if self.lost is not None or outcome is None:
            self._count_lost()
            self._retire("lost")
        elif self._step is None:
            self._finish(outcome)
        else:
            self._outcome = outcome

    async def _call_handler(self) -> oc.Outcome | None:
        """Run the handler in its own cancel scope; None when it was stopped for a lost lease."""
        return await call_handler(self.handler, self.ctx, self._handler_scope, threads=self.host.threads,
                                  max_result_bytes=self._max_result_bytes, stopped=self.host.stopped_hard)

    def _finish(self, outcome: oc.Outcome) -> None:
        self._outcome = outcome
        self._issue(m.TaskFinish, outcome, self._finished, self._finish_refused)

    def _finished(self, body: m.CommandResult) -> None:
        outcome = self._outcome
        assert outcome is not None
        self.finished = True
        self.host.stats.count(outcome.status, duplicate=body.receipt.duplicate)
        if log.isEnabledFor(logging.INFO):
            log.info("task %s %s", self.label, outcome.describe())
        self._retire("finished")

    def _finish_refused(self, exc: CommandRefused) -> None:
        outcome = self._outcome
        assert outcome is not None
        if not self._fell_back and exc.code in CONTENT:
            log.warning("task %s: finish %s refused (%s); finishing FAILED", self.label, outcome.status, exc.code)
            self._fell_back = True
            self._finish(oc.fallback(outcome, exc.code, exc.message))
            return
        log.error("task %s: finish refused: %s", self.label, exc)
        self._lose(f"finish refused: {exc.code}")

    def _count_lost(self) -> None:
        if self.lost is not None:
            self.host.stats.lost += 1
            called = "" if self._handler_called else "; the handler was not called"
            log.warning("task %s: lease lost (%s); not finished here%s", self.label, self.lost, called)

    def _unsettled(self, reason: str) -> None:
        """Stop asking: the service may have committed what it was sent, and only its record knows."""
        if self.phase is RETIRED:
            return
        self.host.stats.unsettled += 1
        outcome = self._outcome.status if self._outcome is not None else "outcome"
        log.warning("task %s: outcome unknown to this worker (%s); the service may have recorded its %s: "
                    "see pulse-trio task show %s", self.label, reason, outcome, self.task.task_id)
        self._retire("unsettled")

    def _settling(self) -> bool:
        """A command the service may have committed is outstanding, and waiting for it harms nothing.

        The handler's outcome is known and its finish (or the renewal it
        waits for) is under way; or a start that reached the service is
        unanswered (no handler runs until it is).
        """
        step = self._step
        if step is None:
            return False
        if self.phase is FINISHING:
            return self._outcome is not None
        return self.phase is STARTING and (step.state is not PARKED or self.inflight is not None)

    def _move(self, trigger: str) -> None:
        """The one place the phase changes: where chart ``worker_lease`` sends it on ``trigger``."""
        self.phase = LEASE.next(trigger, self.phase)

    def _retire(self, trigger: str) -> None:
        """``trigger`` (finished, lost, ...) ends the runner: the worker forgets it. Retiring twice does nothing."""
        if self.phase is RETIRED:
            return
        self._move(trigger)
        self._step = None
        self._disarm()
        self.host.retire(self)

    # -- keeping the lease ----------------------------------------------------------
    def _arm(self) -> None:
        """(Re)set the lease's one timer: the next renewal while the handler runs, else the expiry."""
        clock = self.host.clock
        clock.cancel(self._timer)
        when = self.deadline
        if self.phase is RUNNING and self._step is None and self._can_extend:
            when = min(when, renew_due(self._absorbed_at, self.deadline))
        self._timer = clock.call_at(when, self._ring)

    def _disarm(self) -> None:
        clock = self.host.clock
        clock.cancel(self._timer)
        clock.cancel(self._retry)
        self._timer = self._retry = None

    def _ring(self) -> None:
        """The timer came up (in the clock's task): lose the lease, or issue its renewal."""
        self._timer = None
        if self.lost is not None or self.phase is RETIRED:
            return
        now = self._now()
        step = self._step
        if now >= self.deadline and self._settling():
            assert step is not None
            # The service decides now: the answer, a replayed receipt or a refusal settles it.
            limit = self.deadline + SETTLE_AFTER_EXPIRY_S
            if now < limit:
                self._timer = self.host.clock.call_at(limit, self._ring)
            elif self.phase is STARTING:
                self._lose(f"no answer to {step.cls.TYPE} {SETTLE_AFTER_EXPIRY_S:g}s after the offer's expiry")
            elif self.inflight is None and step.state is PARKED:
                self._lose(f"{step.cls.TYPE} never reached the service before the lease expired")
            else:
                self._unsettled(f"no answer to {step.cls.TYPE} {SETTLE_AFTER_EXPIRY_S:g}s after the lease's expiry")
            return
        if now >= self.deadline:
            if step is None:
                self._lose("its expiry passed without a renewal")
            elif step.state is SENT:
                self._lose(f"no answer to {step.cls.TYPE} before the lease expired")
            elif step.state is RETRYING:
                self._lose(f"{step.cls.TYPE} answered internal until the lease expired")
            else:
                self._lose("disconnected until its expiry")
            return
        if (self.phase is RUNNING and step is None and self._can_extend
                and now >= renew_due(self._absorbed_at, self.deadline)):
            self._issue(m.TaskRenew, None, self._renewed, self._renew_refused)
        self._arm()

    def _renewed(self, body: m.CommandResult) -> None:
        self.host.stats.renewals += 1
        if self.phase is FINISHING and self._outcome is not None:
            if self._step is None:  # else the ack's own cancel has already issued the finish
                self._finish(self._outcome)
        elif self.phase is RUNNING and not self._handler_called:
            self._call_or_renew()
        else:
            self._arm()

    def _renew_refused(self, exc: CommandRefused) -> None:
        self._lose(f"renew refused: {exc.code}")

    def _lose(self, reason: str) -> None:
        if self.lost is not None or self.phase is RETIRED:
            return
        self.lost = reason
        self._step = None
        if self.ctx._halt(LEASE_LOST, reason):
            self._handler_scope.cancel()
        self._disarm()
        if self.phase is STARTING:
            log.warning("task %s not started: %s", self.label, reason)
            self._retire("lost")
        elif self.phase is FINISHING or not self._handler_called:
            self._count_lost()
            self._retire("lost")
        elif self.handler.sync:  # its thread is held until the handler returns: no task may be offered for it
            self._stuck = True
            self.host.thread_stuck(True)
        # RUNNING: the handler's task retires the runner once the handler has stopped

    def request_cancel(self, reason: str) -> None:
        """A cancel push, or a lease showing cancel_requested_at: stop the handler."""
        if self.ctx._halt(CANCEL_REQUESTED, reason):
            log.info("task %s: cancel requested%s", self.label, f" ({reason})" if reason else "")
            self._handler_scope.cancel()
            if self.phase is RUNNING and not self._handler_called:  # started, handler not called: no effect
                self._move("cancelled_before_call")
                outcome = oc.cancelled(reason)
                if self._step is None:
                    self._finish(outcome)
                else:
                    self._outcome = outcome  # issued at the renewal's ack

    def _absorb(self, lease: m.Lease | None, conn: Connection, *, renewed: bool = False,
                granted_since: tuple[float, m.Receipt] | None = None) -> None:
        """Take the lease from an ack: revision, local deadline, cancellation.

        ``granted_since`` is (the loop time the command was sent, its receipt).
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
            if granted < self._granted:  # the first grant, or a shorter one: ping at least as often as it needs
                conn.pace(granted)
            self._granted = granted
        self._absorbed_at = self._now()
        self.ctx._set_deadline(self.deadline - self._absorbed_at)
        if lease.cancel_requested_at is not None:
            self.request_cancel("")

    # -- one command, through reconnects ---------------------------------------------
    def _issue(self, cls: type, outcome: oc.Outcome | None, done: Callable[[m.CommandResult], None],
               refused: Callable[[CommandRefused], None]) -> None:
        """Start the lease's next command; ``done`` or ``refused`` is called once it is answered."""
        assert self._step is None, "two commands of one lease at once"
        self._step = _Step(self, cls, outcome, finish_tail_of(outcome) if outcome is not None else PLAIN_TAIL,
                           done, refused)
        self._send()

    def _send(self) -> None:
        """Send the step on the ready connection at the current revision, or park it until there is one."""
        step = self._step
        assert step is not None
        conn = self.host.ready_connection()
        if conn is None:
            step.move("no_connection")
            return
        revision = self.lease.revision
        step.move("send")
        step.conn, step.sent_at = conn, self._now()
        try:
            conn.submit_lease(step.cls, self.frames, revision, step.tail, step.answer)
        except ConnectionLost:
            step.move("dropped")  # never sent: nothing to settle
            return
        self.inflight = (step.cls, revision, step.outcome)

    def _answered(self, step: _Step, result: Answer) -> None:
        """The connection's callback: the ack, a refusal, or ConnectionLost."""
        if step is not self._step or step.state is not SENT:
            return  # the lease was lost (or retired) meanwhile
        if isinstance(result, ConnectionLost):
            step.move("dropped")  # ``inflight`` stays: reattach settles it on the next connection
            return
        if isinstance(result, CommandRefused):
            if not retryable(result):  # an ``internal`` answer leaves it unknown whether it committed
                self.inflight = None
            self._refused(step, result)
            return
        self.inflight = None
        assert isinstance(result, m.CommandResult) and step.conn is not None
        step.move("answer")
        if result.receipt.duplicate:
            self.host.stats.duplicates += 1
        self._step = None
        self._absorb(result.lease, step.conn, renewed=step.cls is m.TaskRenew,
                     granted_since=(step.sent_at, result.receipt))
        step.done(result)

    def _refused(self, step: _Step, exc: CommandRefused) -> None:
        if exc.fatal:
            step.move("dropped")  # the connection is ending; nothing was committed
            return
        if retryable(exc):
            # Same revision, same content, a new request id: replay-safe (docs/protocol.md §4.5).
            step.move("retry_later")
            delay = self._retry_delay(step.tries, exc, finish=step.cls is m.TaskFinish)
            step.tries += 1
            self._retry = self.host.clock.call_at(self._now() + delay, self._resend)
            return
        step.move("answer")
        self._step = None
        if exc.code in GONE:
            self._lose(f"{step.cls.TYPE} refused: {exc.code}")
            return
        step.refused(exc)

    def _retry_delay(self, tries: int, exc: CommandRefused, *, finish: bool) -> float:
        """Backoff for a command answered ``internal``: doubling, at least ``retry_after_ms``.

        A start or renewal must land while the lease lasts, so it never waits
        past half of the time left; a finish is settled past the expiry too.
        """
        delay = max(min(RETRY_MAX_S, RETRY_INITIAL_S * 2 ** min(tries, 16)), (exc.retry_after_ms or 0) / 1000)
        left = self.deadline - self._now()
        if not finish and left > 0:  # past the expiry (a start being settled) the plain backoff applies
            delay = min(delay, max(MIN_RENEW_INTERVAL_S / 5, left / 2))
        return delay

    def _resend(self) -> None:
        self._retry = None
        step = self._step
        if step is not None and step.state is RETRYING and self.lost is None:
            self._send()

    def _park_retry(self) -> None:
        """The reattach settled the command a retry timer was waiting to send: ``connected`` takes it from here."""
        self.host.clock.cancel(self._retry)
        self._retry = None
        if self._step is not None and self._step.state is RETRYING:
            self._step.move("settled")

    def connected(self, conn: Connection) -> None:
        """The worker has a ready connection again: complete or send the parked step."""
        step = self._step
        if step is None or step.state is not PARKED or self.lost is not None:
            return
        if self.replayed is not None:  # reattach recovered its ack; the lease came from the resume
            body, self.replayed = self.replayed, None
            step.move("recovered")
            self._step = None
            step.done(body)
            return
        self._send()

    async def reattach(self, conn: Connection, owner: Credentials) -> None:
        """On a new connection, before capacity is declared: settle the in-flight command, resume."""
        if self.lost is not None or self.phase is RETIRED:
            return
        if self.replayed is not None and self.replayed.receipt.command == m.TaskFinish.TYPE:
            return  # an earlier reattach recovered the finish's ack, for `connected` to settle: nothing to resume
        if self.inflight is not None:
            cls, revision, outcome = self.inflight
            fields = dict(task_id=self.task.task_id, lease_id=self.lease_id, lease_secret=self._secret,
                          revision=revision, **(outcome.fields() if outcome is not None else {}))
            try:
                body = await self._ask(conn, cls, fields, finish=cls is m.TaskFinish)
            except CommandRefused as exc:
                if exc.fatal or retryable(exc):
                    return  # still unknown: asked again on the next connection
                self.inflight = None  # not committed: sent again at the new revision once connected
                self._park_retry()
            except ConnectionLost:
                return
            else:
                assert isinstance(body, m.CommandResult)
                self.inflight = None
                self._park_retry()
                self.replayed = body
                if body.receipt.duplicate:
                    self.host.stats.duplicates += 1
                log.info("task %s: %s was committed before the disconnect (duplicate=%s)", self.label,
                         cls.TYPE, str(body.receipt.duplicate).lower())
                if cls is m.TaskFinish:
                    return
        if self.lost is None and self.phase is not RETIRED:
            await self._resume(conn, owner)

    async def _ask(self, conn: Connection, cls: type, fields: dict[str, Any], *, finish: bool) -> m.AckBody:
        """One request on ``conn``, sent again (new id, same content) after each ``internal`` answer.

        It gives up (raising the last refusal) once the lease is lost, or its
        expiry passed (for a finish: the settling time after it).
        """
        tries = 0
        while True:
            try:
                return await conn.request(cls, **fields)
            except CommandRefused as exc:
                limit = self.deadline + (SETTLE_AFTER_EXPIRY_S if finish else 0.0)
                if not retryable(exc) or self.lost is not None or self.phase is RETIRED:
                    raise
                delay = self._retry_delay(tries, exc, finish=finish)
                if self._now() + delay >= limit:
                    raise
                tries += 1
                await anyio.sleep(delay)

    async def _resume(self, conn: Connection, owner: Credentials) -> None:
        for candidate in reversed(list(self.owners)):
            fields = dict(instance_id=candidate.instance_id, instance_secret=candidate.instance_secret,
                          task_id=self.task.task_id, lease_id=self.lease_id, lease_secret=self._secret)
            try:
                lease = await self._ask(conn, m.WorkerResume, fields, finish=False)
            except ConnectionLost:
                self.owners.append(owner)  # the resume may have committed: the next try may need these
                return
            except CommandRefused as exc:
                if exc.fatal or retryable(exc):
                    self.owners.append(owner)  # unknown whether it committed, as above
                    return
                if exc.code in ("lease_not_owned", "lease_not_found") and candidate is not self.owners[0]:
                    continue
                self._lose(f"resume refused: {exc.code}")
                return
            assert isinstance(lease, m.Lease)
            self.owners = [owner]
            if self.lost is not None or self.phase is RETIRED:
                return
            self._absorb(lease, conn)
            conn.pace(self._granted)  # a new connection: its heartbeat has not heard of this lease
            self._arm()
            self.host.stats.resumed += 1
            log.info("task %s: lease resumed at revision %d", self.label, lease.revision)
            return


_SUCCEEDED_EMPTY_TAIL = finish_tail(**oc.SUCCEEDED_EMPTY.fields())


def finish_tail_of(outcome: oc.Outcome) -> bytes:
    """A finish's encoded fields after the revision (the common empty success is encoded once for all)."""
    if outcome is oc.SUCCEEDED_EMPTY:
        return _SUCCEEDED_EMPTY_TAIL
    return finish_tail(**outcome.fields())


def retryable(exc: CommandRefused) -> bool:
    """A refusal that says nothing about the lease: a storage failure, try again (docs/protocol.md §4.8)."""
    return not exc.fatal and (exc.code == "internal" or exc.retry_after_ms is not None)


def renew_due(absorbed_at: float, deadline: float) -> float:
    """When to renew: a third of the way from the last ack to the local expiry."""
    left = deadline - absorbed_at
    return absorbed_at + max(MIN_RENEW_INTERVAL_S, left / 3) if math.isfinite(left) else math.inf
