"""One worker session live on this instance, without its socket.

Not to be confused with :class:`pulse_trio.session.ServerSession`, the
sans-IO protocol state of the server's side of the wire, which this class
drives (``self.protocol``): that one knows frames and the session chart,
this one the instance around them (store, batcher, hub).

The transport (``wire.py``) owns the bytes: it hands every complete text
message to :meth:`LiveSession.receive` and sends what the service puts
in its :class:`Outbox`. Everything else about the session lives here, in
one place:

* request handling: hello, capacity and resume run their transaction and
  answer before the next frame is read (they are rare and their order
  matters; hello and capacity share their transaction with other
  connections', ``registrations.py``); lease commands go to the command
  batcher, whose lanes post each outcome to this session's
  :class:`~pulse_trio.server.session_inbox.SessionInbox`; the session's
  results task (:meth:`LiveSession.apply_results`, run in the connection's
  nursery by the transport) applies them, so a connection costs no Trio
  task per command;
* the live record the dispatcher reads (capacity, drain, active leases,
  subscriptions): only the connection's own tasks change it (the reader:
  hello, capacity, resume; the results task: everything else), and each
  change re-files the session in the hub as hungry or not
  (``SessionHub.refresh``), so a dispatch pass finds the hungry sessions
  without walking the others;
* backpressure: at most :func:`in_flight_limit` lease commands at once,
  which grows with the declared capacity; the transport stops reading
  while the limit is reached.

Whoever else has news for the session posts it to the inbox and never
calls a method here that changes the session: the lanes (outcomes,
ride-along offers), the dispatcher (its offers, the leases a failed claim
may have made), the timers (a lease a timer ended, reconciliation, a
cancel notice, a revoked token), the HTTP side (an operator's drain, an offer its cancel revoked),
another connection (a lease its resume took from this one) and the
service (shutdown). They
may read what :data:`OUTSIDE_READS` names. The tests hold every
connection to this rule (``tests/server/ownership_support.py``).

Nothing about a session's leases is decided here: a closing connection
leaves them valid until they expire, so the worker can resume them on a
new connection, on this instance or another.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

import trio

from pulse_trio.contract import errors as e
from pulse_trio.contract import limits as lim
from pulse_trio.contract import messages as m
from pulse_trio.contract.grammar import new_id
from pulse_trio.contract.trusted import trusted
from pulse_trio.server import to_wire
from pulse_trio.server.session_inbox import (CANCEL, DRAIN, ENDED, OFFERS, RECONCILE, REVOKED, SHUTDOWN, UNCERTAIN,
                                             SessionInbox)
from pulse_trio.session import Close, Reject, Request, ServerSession
from pulse_trio.store.instance import instances
from pulse_trio.store.engine.results import AssignResult, CancelNotice, Refusal
from pulse_trio.store.lease.resume import ResumeRequest, resume
from pulse_trio.store.engine.inputs import AnyLeaseCommand, FinishCommand, FinishReport, RenewCommand, StartCommand

if TYPE_CHECKING:
    from pulse_trio.server.endpoint import SessionServices
    from pulse_trio.tokens import TokenInfo

log = logging.getLogger("pulse_trio.connection")
#: A task.finish's report for the store: the frame passed the same outcome rules (``check_outcome``) as it was
#: decoded, so they are not asked again.
_FINISH_REPORT = trusted(FinishReport)

#: What tasks other than the connection's own may use of a session besides its plain attributes
#: and its inbox: reads only (the tests check that nothing else is called from elsewhere).
OUTSIDE_READS = frozenset({"active_leases", "free_slots", "refill_at", "drain", "holds", "held_leases", "ending"})

#: Lease commands a connection may have in flight however small its capacity.
MIN_IN_FLIGHT = 64


def in_flight_limit(capacity: int) -> int:
    """Lease commands read ahead of their answers: twice the capacity, at least MIN_IN_FLIGHT.

    A worker sends at most one command per lease at a time, and may hold
    more leases than its capacity for a while after lowering it; so a
    compliant worker never waits on this limit, and a worker that floods
    the connection is held to a bound set by its own declaration.
    """
    return max(MIN_IN_FLIGHT, 2 * capacity)


INTERNAL_RETRY_AFTER_MS = 1000
REFILL_MAX = 16
_LEASE_COMMANDS = (m.TaskStart, m.TaskRenew, m.TaskFinish)


class Outbox(Protocol):
    """What the transport offers the session: frames out, and a close."""

    def send(self, frame: bytes) -> bool:
        """Queue one text frame; False when the connection is ending (the frame is dropped)."""

    def close(self, code: int, reason: str) -> None:
        """Close after what is queued has been sent."""

    @property
    def closing(self) -> bool:
        """The connection has begun to close: frames sent from now on are dropped."""


class LiveSession:
    """Requests, lease counting and drain bookkeeping of one connection."""

    def __init__(self, services: SessionServices, token: TokenInfo, outbox: Outbox) -> None:
        self.services = services
        # Called for every lease command: bound once here, not looked up through the services each time.
        self._submit_command = services.submit_command
        self._hub = services.hub
        #: Where every other task posts news for this session; only :meth:`apply_results` takes them.
        self.inbox = SessionInbox(count_command=services.count_command, task_ended=services.hub.task_ended,
                                  observe_assign=services.observe_assign, now=services.clock.now,
                                  refresh=lambda: self._hub.refresh(self))
        self.token = token
        self.outbox = outbox
        self.protocol = ServerSession(new_id("ses_"))
        self.session_id = self.protocol.session_id
        # The live record, as the dispatcher sees it (set at hello).
        self.instance_id: str | None = None
        #: A registration was sent to the store: it may have committed even if no answer came back.
        self._registering = False
        self.epoch = 0
        self.queues: dict[str, frozenset[str] | None] = {}  # queue -> kinds (None: every kind)
        self.concurrency_keys = False
        self.cancellation_notifications = False
        self.capacity = 0
        #: The leases this session holds, as this process knows them: every lease it
        #: gets (an offer, a resume) is added once committed, and removed when it ends
        #: here or reconciliation finds it gone. Never fewer than the database holds,
        #: so a claim can take ``active_leases`` as given (``assign(held=...)``).
        self._held: set[str] = set()
        self._resuming = 0  # resumes in flight: counted before they commit
        self.closing = False
        self._in_flight = 0
        self.in_flight_limit = MIN_IN_FLIGHT  # follows the declared capacity
        self._room: trio.Event | None = None

    # -- what the dispatcher reads ------------------------------------------
    @property
    def active_leases(self) -> int:
        """Offered or running leases this session holds: an upper bound of the database's count.

        Leases posted to the inbox and not yet applied count already (``SessionInbox.leases_posted``).
        """
        return len(self._held) + self._resuming + self.inbox.leases_posted

    @property
    def ending(self) -> bool:
        """The connection has begun to close (or has closed): no offer could reach the worker any more."""
        return self.closing or self.outbox.closing

    @property
    def free_slots(self) -> int:
        if self.drain or self.ending or self.inbox.drain_posted:
            return 0
        return max(0, self.capacity - self.active_leases)

    @property
    def refill_at(self) -> int:
        """Free slots worth a claim when the only news is finished work.

        A session still busy with three quarters of its capacity has work to
        do; topping it up one slot per finish would cost one claim
        transaction per task. News (new work, new capacity) and the
        dispatcher's periodic fill-all pass still serve every free slot.
        """
        return max(1, min(self.capacity // 4, REFILL_MAX))

    # -- frames in (from the transport) -------------------------------------
    async def receive(self, data: bytes) -> bool:
        """Handle one complete text message; False when the connection must stop reading."""
        event = self.protocol.receive(data)
        if type(event) is Request:
            message = event.message
            if type(message) in _LEASE_COMMANDS:
                self._submit(message)
                if self._in_flight >= self.in_flight_limit:
                    self._room = trio.Event()
                    await self._room.wait()
                return True
            if type(message) is m.WorkerCapacity:
                await self._guarded(message.id, self._capacity(message))
                return True
            if type(message) is m.WorkerResume:
                await self._guarded(message.id, self._resume(message))
                return True
            return await self._hello(message)
        if type(event) is Close:
            self.outbox.close(event.code, event.reason)
            return False
        return self._send_reject(event)

    def hello_timed_out(self) -> None:
        timeout = self.services.settings.current.hello_timeout
        self._send_reject(self.protocol.fail(e.HELLO_REQUIRED, f"no worker.hello within {timeout:g}s"))

    async def release(self) -> None:
        """The connection has ended: close the inbox, leave the hub, record the disconnect (call shielded).

        The results task has ended with the connection's nursery: outcomes
        posted since, and from now on, are dropped (their commands committed).
        """
        self.closing = True
        self.inbox.close()
        if self.instance_id is not None or self._registering:  # a session nobody ends stays ACTIVE
            services = self.services
            services.hub.remove(self.session_id)
            with trio.move_on_after(10):
                try:
                    await services.run_in_store(instances.disconnect, session_id=self.session_id,
                                                now=services.clock.now())
                except Exception:  # the lease timers clean up after a lost disconnect
                    log.warning("disconnect of %s not recorded", self.session_id, exc_info=True)
        self.protocol.release()

    # -- requests --------------------------------------------------------------
    async def _guarded(self, reply_to: str, work: Any) -> None:
        """Run one request's work; a storage failure becomes ``internal``."""
        try:
            await work
        except trio.Cancelled:
            raise
        except Exception:
            log.exception("request %s failed in the store", reply_to)
            self._refuse_internal(reply_to)

    def _refuse_internal(self, reply_to: str, *, fatal: bool | None = None) -> None:
        reject = self.protocol.refuse(reply_to, e.INTERNAL, "storage failure; retry later", fatal=fatal,
                                      retry_after_ms=INTERNAL_RETRY_AFTER_MS)
        if reject is not None:
            self._send_reject(reject)

    async def _hello(self, hello: m.WorkerHello) -> bool:
        services = self.services
        new = instances.NewInstance(
            worker_name=hello.worker_name,
            subscriptions=instances.subscriptions_from([(s.queue, s.kinds) for s in hello.subscriptions]),
            cancellation_notifications=hello.cancellation_notifications,
            concurrency_keys=hello.concurrency_keys,
            client_json=json.dumps({"name": hello.client.name, "version": hello.client.version})
            if hello.client else None,
            token_id=self.token.token_id,
            session_id=self.session_id,
        )
        self._registering = True
        try:
            result = await services.call_request(instances.register, instance=new, now=services.clock.now(),
                                                 allowed_queues=self.token.queues or None)
        except Exception:
            log.exception("registration failed in the store")
            self._refuse_internal(hello.id, fatal=True)
            return False
        if isinstance(result, Refusal):
            reject = self.protocol.refuse(hello.id, result.code, self._hello_refusal(hello, result))
            if reject is not None:
                self._send_reject(reject)
            return False
        # Before the welcome, which a closing connection drops: release() must end what was registered.
        self.instance_id = result.instance.instance_id
        settings = services.settings
        body = to_wire.welcome(result.instance, lease_ttl_ms=settings.lease_ttl_ms,
                               start_timeout_ms=settings.start_timeout_ms, now=services.clock.now(),
                               secret=result.instance_secret)
        frame = self.protocol.welcome(hello.id, body)
        if frame is None:
            return False
        self.outbox.send(frame)
        self.epoch = result.instance.epoch
        self.queues = {s.queue: (frozenset(s.kinds) if s.kinds is not None else None) for s in hello.subscriptions}
        self.concurrency_keys = hello.concurrency_keys
        self.cancellation_notifications = hello.cancellation_notifications
        services.hub.add(self)
        log.info("session registered", extra={"session_id": self.session_id, "instance_id": self.instance_id})
        return True

    def _hello_refusal(self, hello: m.WorkerHello, result: Refusal) -> str:
        """The refusal's message in the worker's terms: which queues the token leaves out, or its revoke.

        Read from the guard that refused (``Refusal.guard``), not from the
        order the chart checks them in: a hello that is both outside the
        token's queues and from a revoked token is told what the store found.
        """
        if result.guard == instances.QUEUES_ALLOWED:
            allowed = self.token.queues
            denied = [s.queue for s in hello.subscriptions if s.queue not in allowed]
            names = ", ".join(repr(q) for q in denied)
            message = (f"token does not allow queue{'s' if len(denied) > 1 else ''} {names}; "
                       f"it allows: {sorted(allowed)}")
            return message[:lim.MAX_ERROR_MESSAGE_CHARS]
        if result.guard == instances.TOKEN_LIVE:
            return "the worker token of this connection was revoked"
        return result.message or result.code

    async def _capacity(self, msg: m.WorkerCapacity) -> None:
        services = self.services
        result = await services.call_request(instances.set_capacity, session_id=self.session_id,
                                             sequence=msg.sequence, capacity=msg.capacity, drain=msg.drain,
                                             now=services.clock.now())
        if isinstance(result, Refusal):
            self._refuse(msg.id, e.INVALID_TRANSITION, result.message or result.code)
            return
        if result.applied:
            # The stored state decides drain: an operator's drain outlives drain=false frames.
            self.protocol.capacity_applied(result.instance.drain)
            self.capacity = msg.capacity
            self.in_flight_limit = in_flight_limit(msg.capacity)
            services.hub.refresh(self)
            services.hub.wake()
        elif result.instance.drain:
            # A repeated sequence asks for the stored state (the SDK's drain check): an
            # operator's drain made through another instance reaches this session here.
            self._drain_hinted()
        settings = services.settings
        body = to_wire.welcome(result.instance, lease_ttl_ms=settings.lease_ttl_ms,
                               start_timeout_ms=settings.start_timeout_ms, now=services.clock.now())
        self._send(self.protocol.ack(msg.id, body))

    async def _resume(self, msg: m.WorkerResume) -> None:
        services = self.services
        request = ResumeRequest(session_id=self.session_id, instance_id=msg.instance_id,
                                instance_secret=msg.instance_secret, task_id=msg.task_id,
                                lease_id=msg.lease_id, lease_secret=msg.lease_secret)
        # Counted before it can commit: a claim built from now on leaves its slot alone. A claim
        # built before took the session's count without it: let that claim settle first.
        self._resuming += 1
        services.hub.refresh(self)
        try:
            for claim in self.inbox.claims():
                await claim.wait()
            result = await services.run_in_store(resume, request=request, now=services.clock.now(),
                                                 start_timeout_ms=services.settings.start_timeout_ms)
        except BaseException:
            self._leases_uncertain((msg.lease_id,))  # it may have committed
            raise
        finally:
            self._resuming -= 1
        if not isinstance(result, Refusal):
            self._held.add(msg.lease_id)
            if result.operator_drained:  # inherited with the lease, or made before: no offer from now on
                self.protocol.operator_drained()
        services.hub.refresh(self)
        if isinstance(result, Refusal):
            # A pass while it waited left the slot it counted alone: that slot is capacity again (news).
            services.hub.wake()
            fatal = False if result.code == e.PERMISSION_DENIED else None
            self._refuse(msg.id, result.code, result.message or result.code, fatal=fatal)
            return
        # The lease left its previous owner: when that session lives here, tell it
        # (its own task frees the slot, as a finish does: not news, as that connection is most likely
        # the one the worker left; elsewhere, that instance's timers reconcile its count).
        previous = services.hub.by_instance(msg.instance_id)
        if previous is not None and previous is not self:
            previous.inbox.lease_ended(msg.lease_id)
        self._send(self.protocol.ack(msg.id, to_wire.lease(result.lease)))

    def _submit(self, msg: m.TaskStart | m.TaskRenew | m.TaskFinish) -> None:
        command: AnyLeaseCommand
        if type(msg) is m.TaskFinish:
            report = _FINISH_REPORT(msg.status, str(msg.result), msg.error_code or None, msg.error_message or None,
                                    msg.retryable)
            command = FinishCommand(self.session_id, msg.task_id, msg.lease_id, msg.lease_secret, msg.revision,
                                    report)
        elif type(msg) is m.TaskStart:
            command = StartCommand(self.session_id, msg.task_id, msg.lease_id, msg.lease_secret, msg.revision)
        else:
            command = RenewCommand(self.session_id, msg.task_id, msg.lease_id, msg.lease_secret, msg.revision)
        self._in_flight += 1
        self._submit_command(command, self.inbox, msg)

    # -- outcomes back (the connection's results task) ---------------------------
    async def apply_results(self) -> None:
        """The connection's results task: apply what was posted to the inbox, in order, until cancelled.

        Run by the transport in the connection's nursery, so only the
        connection's own tasks change this session. Each wake-up applies
        everything posted since, with no await between: a batch's acks and
        offers leave in one outbox write.
        """
        take = self.inbox.take
        notices = self._NOTICES
        while True:
            for head, outcome in await take():
                try:
                    if head is OFFERS:
                        self._offers_arrived(outcome)
                    elif type(head) is str:
                        getattr(self, notices[head])(outcome)
                    else:
                        self._command_done(head, outcome)
                except Exception:  # a bug in one outcome must not cost the connection the others
                    log.exception("applying an outcome to %s failed", self.session_id)

    def _command_done(self, msg: m.TaskStart | m.TaskRenew | m.TaskFinish, outcome: Any) -> None:
        """One command's outcome (the lane counted it already): free its in-flight place, answer."""
        self._in_flight -= 1
        if self._room is not None and self._in_flight < self.in_flight_limit:
            self._room.set()
            self._room = None
        if isinstance(outcome, BaseException):  # the lane logged it
            self._refuse_internal(msg.id)
            return
        if isinstance(outcome, Refusal):
            self._refuse(msg.id, outcome.code, outcome.message or outcome.code)
            return
        if type(msg) is m.TaskFinish and not outcome.receipt.duplicate:
            self._lease_ended(msg.lease_id)
            if outcome.freed_work:  # a key's set-aside task competes again, and this session's slot is free now:
                self._hub.wake()  # the batch's own wake (batcher.py) may have run its pass before the slot was
        self._send(self.protocol.ack(msg.id, to_wire.command_result(outcome)))

    def _offers_arrived(self, result: AssignResult) -> None:
        """A claim's offers (counted and measured at the door already): hold them, push them.

        The dispatcher's claims and a batch's ride-along claims post them alike.
        """
        offers = result.offers
        held = self._held
        for offer in offers:
            held.add(offer.lease.lease_id)
        self._hub.refresh(self)
        for offer in offers:
            frame = self.protocol.assign(to_wire.assigned_task(offer.task),
                                         to_wire.lease(offer.lease, secret=offer.lease_secret))
            if frame is None or not self.outbox.send(frame):
                log.info("offer %s not delivered; it will lapse", offer.lease.lease_id)

    def _leases_uncertain(self, lease_ids: Iterable[str]) -> None:
        """A claim or resume whose outcome is unknown may have given these leases: count them.

        Reconciliation forgets those the database does not hold for this session.
        """
        self._held.update(lease_ids)
        self._hub.refresh(self)

    def _lease_ended(self, lease_id: str) -> None:
        """One of this session's leases ended (finish, a timer, a resume elsewhere); told twice is told once."""
        self._held.discard(lease_id)
        hub = self._hub
        hub.refresh(self)
        hub.slot_freed()

    def _ended_elsewhere(self, end: tuple[str, bool]) -> None:
        """A timer ended one of the leases, or a resume moved it: ``news`` wakes a pass that fills every slot."""
        lease_id, news = end
        self._lease_ended(lease_id)
        if news:
            self._hub.wake()

    def _reconcile(self, check: tuple[frozenset[str], frozenset[str]]) -> None:
        """Forget the leases of ``known`` that the database no longer has live here; a freed slot wakes a pass.

        ``known`` was read from :meth:`held_leases` before ``live`` was read
        from the database, so each of them had committed: one missing from
        ``live`` has ended or moved to a newer session, for good. Leases
        added since are not in ``known`` and stay; one that ended here
        meanwhile is already gone.
        """
        known, live = check
        gone = (known - live) & self._held
        if not gone:
            return
        self._held -= gone
        hub = self._hub
        hub.refresh(self)
        hub.slot_freed()  # not news: the leases ended elsewhere, their tasks were seen there

    def _drain_hinted(self, _: Any = None) -> None:
        """The session is drained (an operator's drain seen elsewhere): no more offers."""
        self.protocol.operator_drained()
        self._hub.refresh(self)

    def _notify_cancel(self, notice: CancelNotice) -> None:
        frame = self.protocol.cancel(notice.task_id, notice.lease_id, notice.cancel_requested_at,
                                     notice.grace_expires_at or notice.cancel_requested_at, notice.reason or None)
        if frame is not None:  # closing or otherwise unable: the next holder is told after its resume
            self.outbox.send(frame)

    def _shutdown(self, _: Any = None) -> None:
        """Send server_shutting_down and close (the instance is stopping)."""
        reject = self.protocol.shutdown()
        if reject is not None:
            self._send_reject(reject)
        else:
            self.outbox.close(e.CLOSE_GOING_AWAY, "server shutting down")

    def _token_revoked(self, _: Any = None) -> None:
        """The token this session was opened with is revoked: a fatal permission_denied, then close (1008).

        What a hello with that token would get now; the leases stay as a
        closed connection leaves them.
        """
        self._send_reject(self.protocol.fail(e.PERMISSION_DENIED, "the worker token of this session was revoked"))

    #: The method that applies each entry that is neither a command's outcome nor offers (rare). Looked up by
    #: name, so the class attribute is what runs: the tests' ownership checker wraps the class's methods.
    _NOTICES = {UNCERTAIN: "_leases_uncertain", ENDED: "_ended_elsewhere", RECONCILE: "_reconcile",
                CANCEL: "_notify_cancel", DRAIN: "_drain_hinted", SHUTDOWN: "_shutdown",
                REVOKED: "_token_revoked"}

    # -- what others may read ----------------------------------------------------
    def holds(self, lease_id: str) -> bool:
        """This session counts the lease among its own (a finish of it frees one of its slots)."""
        return lease_id in self._held

    def held_leases(self) -> frozenset[str]:
        """The lease ids this session is known to hold (what reconciliation checks)."""
        return frozenset(self._held)

    @property
    def drain(self) -> bool:
        """Whether the session drains: its chart's state (``ServerSession.draining``), the one owner of it."""
        return self.protocol.draining

    # -- frames out ------------------------------------------------------------
    def _send(self, frame: bytes | None) -> None:
        if frame is not None:
            self.outbox.send(frame)

    def _refuse(self, reply_to: str, code: str, message: str, *, fatal: bool | None = None) -> None:
        reject = self.protocol.refuse(reply_to, code, message, fatal=fatal)
        if reject is not None:
            self._send_reject(reject)

    def _send_reject(self, reject: Reject | None) -> bool:
        """Send an error frame (and close after it when fatal); False when the connection ends."""
        if reject is None:
            return True
        self.services.count_error(reject.code)
        self.outbox.send(reject.frame)
        if reject.close_code is not None:
            self.outbox.close(reject.close_code, reject.code)
            return False
        return True
