"""The shared timers: every instance runs them, SKIP LOCKED splits the work.

One loop, one tick every ``interval``: the sweep for other processes that
died without stopping (``liveness.py``; this process's own heartbeat runs
in a task of its own), then lapse unstarted offers, expire lost leases, promote
due scheduled tasks, end permit quarantines, and push ``task.cancel`` to
this instance's opted-in sessions. One statement first asks which of them
have anything due (``store/views/timer_probe.py``), so an idle tick costs one
read, not a transaction per timer. What it asks about this instance's own
sessions (cancels to push, lease counts to reconcile) names this process's
node, never a list of session ids: the statements keep their size however
many sessions are connected. (A store outside a serve process has no node;
it names the hub's sessions instead.) A batch that came
back full runs again at once; an ended lease frees a slot in its session
(when that session lives here) and wakes the dispatcher. In a serve group
(``serve --processes``) a tick that made tasks READY (promoted, an offer
lapsed, a lost attempt retried, a key's quarantined permit freed) tells the
other members once, at its end, as a submit does: their workers may be the
free ones.

The timers never change a session: what they learn about one (a lease a
timer ended, a reconciliation, a cancel notice) is posted to the session's
inbox (``session_inbox.py``) and applied by the connection's own results
task, in order with everything else posted to it.

Because another instance's timers (or an operator's cancel) may end a
lease of a session that lives here, or its resume may move one away, every
``RECONCILE_EVERY_S`` a tick also reconciles the local sessions' leases with
the database: one statement counts the live leases of this node's sessions,
and only the sessions that hold fewer than they count here have their
lease ids read, to forget those that ended; a slot that came free wakes the
dispatcher. A session's count here is never below the database's (it adds
a lease once committed, or when the outcome is unknown, and forgets one
only once it ended, or later: an end posted to the inbox counts once
applied), so the claim takes it as given (``assign(held=...)``).

A handshake checks its token once, so at the same pace a tick re-checks
the tokens of the local sessions: one statement asks which of the distinct
token ids they were opened with are still live, and each session whose
token was revoked is told through its inbox (a fatal ``permission_denied``,
then the close). A revoke thus ends the sessions opened before it within
``RECONCILE_EVERY_S`` and a tick (docs/operations.md §1.4).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import trio

from pulse_trio.charts import CHARTS
from pulse_trio.charts.states import dests_of
from pulse_trio.server.clock import ServiceClock
from pulse_trio.server.hub import SessionHub
from pulse_trio.server.live_settings import LiveSettings
from pulse_trio.server.metrics import ServiceMetrics
from pulse_trio.server.outage_log import OutageLog
from pulse_trio.store.cancellation import intents as cancellation
from pulse_trio.store.instance import instances
from pulse_trio.store.lease import timers as lease_timers
from pulse_trio.store.key_permit import permits
from pulse_trio.store.task import tasks
from pulse_trio.store.token.tokens import live_token_ids
from pulse_trio.store.engine.results import TimerResult
from pulse_trio.store.views.timer_probe import due_work
from pulse_trio.store.engine.trio_bridge import Store

if TYPE_CHECKING:
    from pulse_trio.server.liveness import NodeLiveness

log = logging.getLogger("pulse_trio.timers")

MAX_ROUNDS = 20  # bounded catch-up per tick, so one tick never runs forever
TICK_FLOOR_S = 0.1
RECONCILE_EVERY_S = 1.0  # lease counts are only the dispatcher's hint; tokens are re-checked as often (module docstring)


#: Where a lease's end can put its task back in the queue: a lapse, or an expiry retried with effect_uncertain.
_READY_AGAIN = frozenset(dests_of(CHARTS["task"], "lapse")) & frozenset(dests_of(CHARTS["task"], "expire"))


class Timers:
    def __init__(self, *, store: Store, clock: ServiceClock, hub: SessionHub, settings: LiveSettings,
                 metrics: ServiceMetrics, node: NodeLiveness | None = None) -> None:
        self.store, self.clock, self.hub, self.settings, self.metrics = store, clock, hub, settings, metrics
        self._made_ready = False  # this tick made tasks READY (a serve group's other members hear of it at its end)
        #: Swept for other lost nodes on every tick (None: a service without a node record).
        self.node = node
        self._reconciled_at = -math.inf
        #: Ask about this instance's sessions by its node (a serve process), or by their ids.
        self._by_node = getattr(store, "node_id", None) is not None
        self._sweep_outage = OutageLog(log, "the sweep for lost nodes failed", "the sweep for lost nodes works again")

    @property
    def interval(self) -> float:
        """Twice the poll interval, within 0.1-1 s.

        A tick costs several transactions even when there is nothing to do,
        so a fast dispatcher poll (to see other processes' submits sooner)
        must not make the timers spin: lease expiry has a granularity of
        seconds anyway.
        """
        return min(1.0, max(TICK_FLOOR_S, self.settings.current.poll_interval * 2))

    async def run(self) -> None:
        outage = OutageLog(log, "timer tick failed (database unavailable?)", "timer ticks work again")
        while True:
            try:
                await self.tick()
            except Exception:
                outage.failed()  # every tick through an outage: one traceback for the whole of it
            else:
                outage.worked()
            await trio.sleep(self.interval)

    async def tick(self) -> None:
        store, clock = self.store, self.clock
        if self.node is not None:
            # On its own, so a liveness failure never holds up lease expiry.
            # (The heartbeat has a task of its own: NodeLiveness.run_heartbeats.)
            try:
                await self.node.sweep()
            except Exception:
                self._sweep_outage.failed()
            else:
                self._sweep_outage.worked()
        due = await store.run(due_work, now=clock.now(), cancels=self.hub.any_opted_in)
        self._made_ready = False
        try:
            if due.lapse:
                await self._drain(lambda: store.run(lease_timers.lapse, now=clock.now()))
            if due.expire:
                quarantine_ms = self.settings.permit_quarantine_ms
                await self._drain(lambda: store.run(lease_timers.expire, now=clock.now(),
                                                    permit_quarantine_ms=quarantine_ms))
            if due.promote and await self._drain(lambda: store.run(tasks.promote, now=clock.now())):
                self._new_work()
            if due.quarantine and await self._drain(lambda: store.run(permits.release_after_quarantine,
                                                                       now=clock.now())):
                self._new_work()  # the keys' set-aside tasks compete again
        finally:
            if self._made_ready:
                self.hub.announce()  # once per tick, however many batches made work
        if due.cancels or (self.hub.any_opted_in and not self._by_node):
            await self.notify_cancels()
        if trio.current_time() >= self._reconciled_at + RECONCILE_EVERY_S:
            self._reconciled_at = trio.current_time()
            await self.reconcile()
            await self.end_revoked_sessions()

    async def reconcile(self) -> None:
        """Forget the leases that ended elsewhere (see the module docstring)."""
        hub = self.hub
        sessions = hub.busy()  # a session holding nothing has nothing to forget
        if not sessions:
            return
        if self._by_node:
            counts = await self.store.run(instances.live_lease_counts)
        else:
            counts = await self.store.run(instances.live_lease_counts, session_ids=[s.session_id for s in sessions])
        short = [s for s in sessions if counts.get(s.session_id, 0) < s.active_leases]
        if not short:
            return
        known = {s.session_id: s.held_leases() for s in short}  # before the read: each of them had committed
        live = await self.store.run(instances.live_lease_ids, session_ids=list(known))
        for session in short:  # each session forgets what ended, and wakes the dispatcher if a slot came free
            session.inbox.reconcile(known[session.session_id], live.get(session.session_id, frozenset()))

    async def end_revoked_sessions(self) -> None:
        """Tell each local session whose token was revoked since its handshake (see the module docstring)."""
        sessions = [s for s in self.hub if not s.ending]  # one that is closing already is offered nothing
        if not sessions:
            return
        live = await self.store.run(live_token_ids, token_ids={s.token.token_id for s in sessions})
        for session in sessions:
            if session.token.token_id not in live:  # its own task sends the error and closes
                session.inbox.token_revoked()

    async def _drain(self, run_batch) -> int:
        total = 0
        for _ in range(MAX_ROUNDS):
            result: TimerResult = await run_batch()
            total += result.count
            self._release_slots(result)
            if not result.more:
                break
        return total

    def _release_slots(self, result: TimerResult) -> None:
        if not result.ended:
            return
        hub, metrics = self.hub, self.metrics
        for end in result.ended:
            metrics.count_lease_end(end)
            session = hub.get(end.session_id)
            if session is not None:  # its own task frees the slot, and wakes the dispatcher again (news)
                session.inbox.lease_ended(end.lease_id, news=True)
            hub.task_ended(end.task_id)
        hub.wake()
        if any(end.task_state in _READY_AGAIN for end in result.ended):
            self._made_ready = True  # a lapsed offer, or a lost attempt retried: the other members hear of it

    def _new_work(self) -> None:
        """Work this tick made READY: a pass here now; the group's other members hear of it at the tick's end."""
        self.hub.wake()
        self._made_ready = True

    async def notify_cancels(self) -> None:
        hub = self.hub
        if not hub.any_opted_in:
            return
        if self._by_node:
            notices = await self.store.run(cancellation.notify, now=self.clock.now())
        else:
            opted = [s.session_id for s in hub if s.cancellation_notifications]
            notices = await self.store.run(cancellation.notify, session_ids=opted, now=self.clock.now())
        for notice in notices:
            session = hub.get(notice.session_id)
            if session is not None:  # its own task pushes task.cancel; a closed inbox drops it
                session.inbox.notify_cancel(notice)
