"""This instance's copy of the paused queues, re-read from the database every ``INTERVAL_S``.

A pause is a row (chart ``queue``), written by whichever process the
operator reached; every serve process must stop offering that queue's
tasks. Reading the row inside each claim would add a statement to the hot
path, so each instance keeps the paused set in memory (``SessionHub.paused``),
hands it to every claim, and re-reads it on a short interval: a pause
reaches every instance within ``INTERVAL_S`` plus one claim already under way.

Until the first read succeeds the set is unknown (None) and claims read it
in their own transaction, so a serve process that starts while the
database is slow never offers a paused queue's task.
"""

from __future__ import annotations

import logging

import trio

from pulse_trio.server.hub import SessionHub
from pulse_trio.server.outage_log import OutageLog
from pulse_trio.store.queue.queues import paused_queues
from pulse_trio.store.engine.trio_bridge import Store

log = logging.getLogger("pulse_trio.queues")

#: The longest a pause or a resume made elsewhere takes to reach this instance (docs/operations.md §9).
INTERVAL_S = 0.5


class PausedQueueSync:
    """Keeps ``hub.paused`` equal to the cluster's paused queues."""

    def __init__(self, *, store: Store, hub: SessionHub, interval: float = INTERVAL_S) -> None:
        self.store = store
        self.hub = hub
        self.interval = interval
        self._outage = OutageLog(log, "paused queues not re-read (database unavailable?); keeping the last set",
                                 "paused queues read again", level=logging.WARNING)
        self._begun = 0  # reads begun, in order
        self._applied = 0  # the latest begun read whose answer is in ``hub.paused``

    async def refresh(self) -> None:
        """Read the paused queues now (the HTTP API calls this after a pause or resume it made).

        Reads overlap (the periodic one, and one per pause or resume through
        this instance's API): an answer that lands after the answer of a read
        begun later is older than what the hub holds, and is dropped, or it
        would undo a pause the API has just answered until the next read.
        """
        self._begun += 1
        mine = self._begun
        paused = await self.store.run(paused_queues)
        if mine < self._applied:
            return
        self._applied = mine
        before = self.hub.paused
        if before is not None and paused != before:
            for queue in sorted(paused - before):
                log.info("queue %s paused: no new offers on this instance", queue)
            for queue in sorted(before - paused):
                log.info("queue %s resumed", queue)
        self.hub.set_paused(paused)

    async def run(self) -> None:
        """Re-read every :attr:`interval` until cancelled; a failure keeps the last set and tries again.

        Twice a second would be two warnings a second through an outage: the
        first failure is logged, then nothing until a read works again.
        """
        while True:
            try:
                await self.refresh()
            except Exception:
                self._outage.failed()
            else:
                self._outage.worked()
            await trio.sleep(self.interval)


__all__ = ["INTERVAL_S", "PausedQueueSync"]
