"""The dispatcher: offers READY tasks to this instance's sessions.

One loop per instance. A pass runs when woken (a slot came free, capacity
was declared, a submit arrived through this instance) or every
``poll_interval`` (submits from other processes). Each pass fills free
capacity in rounds: in every round each session with free slots claims a
share proportional to its free slots, so a large worker cannot starve the
small ones, and one transaction claims a whole batch for one session.

Offers are committed before they are pushed; an offer whose push is lost
(the connection died) simply lapses after the start timeout, costing no
attempt.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import trio
from transitions import MachineError

from pulse_trio.server import views
from pulse_trio.server.hub import LiveSession
from pulse_trio.store.assign import assign, new_credentials
from pulse_trio.store.results import AssignResult, Refusal

if TYPE_CHECKING:
    from pulse_trio.server.service import ServiceContext

log = logging.getLogger("pulse_trio.dispatcher")

MAX_BATCH = 64
ROUND_SHARE = 4  # a session claims about 1/ROUND_SHARE of its free slots per round


class Dispatcher:
    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx

    async def run(self) -> None:
        ctx = self.ctx
        while True:
            await ctx.hub.wait_woken(ctx.settings.poll_interval)
            try:
                await self.dispatch_pass()
            except Exception:
                log.exception("dispatch pass failed; retrying at the next poll")
                await trio.sleep(ctx.settings.poll_interval)

    async def dispatch_pass(self) -> int:
        """Fill free capacity until the sessions are full or the queues are dry."""
        dry: set[str] = set()
        second_chance: set[str] = set()
        offered = 0
        while True:
            hungry = [s for s in self.ctx.hub if s.free_slots > 0 and s.session_id not in dry]
            if not hungry:
                return offered
            counts: dict[str, int] = {}
            async with trio.open_nursery() as nursery:
                for session in hungry:
                    share = min(MAX_BATCH, max(1, math.ceil(session.free_slots / ROUND_SHARE)))
                    nursery.start_soon(self._claim, session, share, dry, counts)
            claimed = sum(counts.values())
            offered += claimed
            if claimed == 0:
                return offered
            # A session that came up empty while others found work may have claimed
            # before that work committed (a burst landing mid-pass): ask it once more
            # in this pass, or the others would take the whole burst in later rounds.
            for session in hungry:
                sid = session.session_id
                if not counts.get(sid) and sid in dry and sid not in second_chance:
                    second_chance.add(sid)
                    dry.discard(sid)

    async def _claim(self, session: LiveSession, want: int, dry: set[str], counts: dict[str, int]) -> None:
        ctx = self.ctx
        credentials = new_credentials(want)
        result = await ctx.store.run(
            assign, session_id=session.session_id, credentials=credentials, now=ctx.clock.now(),
            start_timeout_ms=ctx.start_timeout_ms, default_lease_ttl_ms=ctx.lease_ttl_ms,
        )
        if isinstance(result, Refusal):
            dry.add(session.session_id)
            return
        counts[session.session_id] = len(result.offers)
        self._deliver(session, result, want, dry)

    def _deliver(self, session: LiveSession, result: AssignResult, want: int, dry: set[str]) -> None:
        offers = result.offers
        session.active_leases = session.capacity - result.free_slots + len(offers)
        if len(offers) < want:
            dry.add(session.session_id)
        now = self.ctx.clock.now()
        for offer in offers:
            try:
                frame = session.connection.session.assign(
                    views.assigned_task(offer.task), views.lease(offer.lease, secret=offer.lease_secret))
            except MachineError:  # drained or closing since the claim committed
                frame = None
            if frame is None or not session.connection.push(frame):
                log.info("offer %s not delivered; it will lapse", offer.lease.lease_id)
            self.ctx.metrics.observe_assign(offer, now)
