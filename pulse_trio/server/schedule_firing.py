"""The schedule fire loop: every serve process runs it, the database decides who fires a tick.

Each pass runs :func:`pulse_trio.store.schedule.schedules.fire` until a batch comes
back short: due schedules are locked with ``FOR UPDATE SKIP LOCKED``, so
processes that wake at the same moment split the work and never wait on
each other, and each tick's task is inserted in the transaction that moves
the schedule past it. No process is special: a killed one simply stops
taking part, and the rows it held unlock when its connection closes.

Between passes it sleeps until the earliest next tick of any ACTIVE
schedule, but never longer than ``POLL_MAX_S``, so a schedule created or
resumed through another process is seen within that time.
"""

from __future__ import annotations

import logging

import trio

from pulse_trio.server.clock import ServiceClock
from pulse_trio.server.hub import SessionHub
from pulse_trio.server.outage_log import OutageLog
from pulse_trio.store.schedule import schedules
from pulse_trio.store.engine.trio_bridge import Store

log = logging.getLogger("pulse_trio.schedules")

#: The longest sleep between passes (how soon another process's new schedule is seen).
POLL_MAX_S = 1.0
#: The shortest: a tick another process holds right now is not polled in a spin.
POLL_FLOOR_S = 0.05
MAX_ROUNDS = 20  # bounded catch-up per pass


class ScheduleFiring:
    def __init__(self, *, store: Store, clock: ServiceClock, hub: SessionHub) -> None:
        """``hub``: wakes this process's dispatcher per batch, and tells a serve group's other members once a pass."""
        self.store, self.clock, self.hub = store, clock, hub
        #: Tasks this process created from ticks (a tick another process fired is counted there).
        self.created = 0
        self._scope = trio.CancelScope()

    async def run(self) -> None:
        """Fire due ticks until :meth:`stop` (or until cancelled with the service)."""
        outage = OutageLog(log, "firing schedules failed (database unavailable?)", "schedules fire again")
        with self._scope:
            while True:
                try:
                    await self.fire_due()
                    delay = await self.until_next()
                except Exception:
                    outage.failed()
                    delay = POLL_MAX_S
                else:
                    outage.worked()
                await trio.sleep(delay)

    def stop(self) -> None:
        """Fire no more ticks: a stopping instance leaves them to the others from its stop's first moment.

        Its stop waits for its sessions and HTTP requests to end; ticks fired meanwhile would be
        fired by a process that is going away. A pass whose transaction is under way commits first.
        """
        self._scope.cancel()

    @property
    def stopped(self) -> bool:
        return self._scope.cancel_called

    async def fire_due(self) -> int:
        """Fire every due tick now; the number of tasks this pass created."""
        created = 0
        for _ in range(MAX_ROUNDS):
            result = await self.store.run(schedules.fire, now=self.clock.now())
            created += result.created
            if result.created:
                self.hub.wake()
            if not result.more:
                break
        self.created += created
        if created:
            self.hub.announce()
        return created

    async def until_next(self) -> float:
        """Seconds until the earliest next tick, within the floor and the ceiling."""
        upcoming = await self.store.run(schedules.next_fire_at)
        if upcoming is None:
            return POLL_MAX_S
        wait = self.clock.trio_time_at(upcoming) - trio.current_time()
        return min(POLL_MAX_S, max(POLL_FLOOR_S, wait))
