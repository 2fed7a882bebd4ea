"""This serve process's liveness record (chart ``node``), and the sweep of dead ones.

Theory of operation. The process is a *node*: ``serve`` binds its ports,
then records it ALIVE before they listen (:meth:`NodeLiveness.start`) and STOPPED after its last
connection closed (:meth:`stop`). A task of its own (:meth:`run_heartbeats`)
beats every ``--node-heartbeat``, so no timer batch, however long, delays
it; the timers loop calls :meth:`sweep` on every tick, which declares LOST
any other node whose heartbeat is past its lapse and disconnects the
sessions it held (``pulse_trio.store.instance.nodes``).

Two rules keep a live process from being declared lost, or from acting as
if it had not been:

* A node sweeps only once its own heartbeats have landed, each sent before
  its own row had lapsed and each recorded within ``lapse − heartbeat``
  of being sent, for a whole lapse counted from a landing; and never while
  its own row is lapsed by the clock it judges the others with. After an
  outage of the database every heartbeat is overdue; after a pause of the
  processes (a VM or a host paused, a debugger) every node's beat is
  overdue alike, and the first one to wake may tick before its own beat
  lands; and after a stall (the database hung, then answered everything)
  every node's heartbeat lands with an ``expires_at`` computed before the
  stall, already past or nearly. Either way the first node through must
  give the others a lapse to beat before it judges them.
* The heartbeat interval and the lapse are cluster settings and may change
  while the node runs (``settings_sync.py``). Every heartbeat writes the
  lapse of one snapshot of the settings into the node's row, and the next
  beat is due by the interval of the same snapshot, at most half that lapse
  (or sooner, once the node notices a shorter interval);
  so whatever changes, and whenever each node notices, no row ever promises
  a beat later than its node will send one. Each row is judged by the lapse
  it carries, so nodes that have not noticed a change yet are judged by the
  values they still beat by.
* Fencing: when no heartbeat has landed for longer than the lapse the last
  one wrote (the writer is unreachable, or every node of the cluster
  refuses), the other instances are about to declare this node lost, and
  its sessions can do nothing useful: every lease command would fail. Each
  is told ``server_shutting_down`` at once, so its worker goes to another
  instance (or retries here) instead of idling on a dead path.
* A heartbeat refused with ``node_lost`` means another instance has already
  disconnected this node's sessions. Their connections are still open here,
  so each is told ``server_shutting_down`` (the workers reconnect and resume
  their leases, here or elsewhere) before the node rejoins as ALIVE.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import socket
from collections.abc import Collection
from typing import TYPE_CHECKING

import trio

from pulse_trio.cluster_settings import milliseconds
from pulse_trio.server.clock import ServiceClock
from pulse_trio.server.live_settings import LiveSettings
from pulse_trio.server.metrics import ServiceMetrics
from pulse_trio.server.outage_log import OutageLog
from pulse_trio.store.instance import nodes
from pulse_trio.store.engine.codes import NODE_LOST
from pulse_trio.store.engine.results import Refusal
from pulse_trio.store.engine.rows import NodeRow
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.engine.tx import db_time

if TYPE_CHECKING:
    from pulse_trio.config import Settings
    from pulse_trio.server.settings_sync import SettingsSync
    from pulse_trio.server.endpoint import OpenConnection

log = logging.getLogger("pulse_trio.liveness")

MAX_SWEEP_ROUNDS = 20  # batches per tick, like the other timers
# A failed heartbeat is tried again this soon (or at the heartbeat interval, if shorter); the heartbeat
# loop wakes at least as often, so it follows a shortened interval without waiting for the beat it scheduled.
MAX_RETRY_S = 1.0
#: How long a stop gives its node's STOPPED, on a connection of its own (``Store.run_once``: run again on a
#: conflict, given up at once without an answer). A database that hangs must not hold the stop; the other
#: instances declare the node lost after its lapse instead.
STOP_RECORD_TIMEOUT_S = 3.0


class NodeLiveness:
    """Start, heartbeat, sweep and stop for the node whose id the service's Store carries."""

    def __init__(self, *, store: Store, clock: ServiceClock, settings: LiveSettings, metrics: ServiceMetrics,
                 connections: Collection[OpenConnection], settings_sync: SettingsSync | None = None) -> None:
        if store.node_id is None:
            raise ValueError("the service's Store must carry its node id")
        self.store, self.clock, self.settings, self.metrics = store, clock, settings, metrics
        #: This node's open connections: shut down when it is fenced or finds itself declared lost.
        self.connections = connections
        #: Loaded before the node is recorded, so its first row carries the cluster's lapse (None: as given).
        self.settings_sync = settings_sync
        self.node_id: str = store.node_id
        self._next_beat = -math.inf
        self._expires_at: dt.datetime | None = None  # our own row's expires_at, as our last heartbeat left it
        self._last_beat: float | None = None  # Trio time the last recorded heartbeat was sent
        self._steady_since: float | None = None
        self._started = False
        self._stopping = False
        self._landed_at: float | None = None  # Trio time of the last heartbeat recorded
        self._landed_lapse = math.inf  # the lapse it wrote: the others judge this node by it until the next lands
        self.fenced = False  # cut off from the database for over a lapse; sessions ended

    @property
    def heartbeat_s(self) -> float:
        return self.settings.current.node_heartbeat

    @property
    def lapse_s(self) -> float:
        return self.settings.current.node_lapse

    @property
    def may_sweep(self) -> bool:
        """Our own heartbeats have landed, on time, for a whole lapse (see the module docstring)."""
        if self._lapsed(self.clock.now()):
            self._steady_since = None  # paused or stalled past our own lapse: so may every other node have been
        return self._steady_since is not None and trio.current_time() - self._steady_since >= self.lapse_s

    async def start(self) -> bool:
        """Record this node ALIVE; False (logged) if the database is away: :meth:`beat` retries.

        ``serve`` calls it before listening, but must come up without a
        database all the same (``/healthz`` answers, ``/readyz`` says 503);
        until the node is recorded, a ``worker.hello`` is refused with
        ``server_shutting_down`` and the worker tries again.
        """
        sent = trio.current_time()
        try:
            if self.settings_sync is not None:  # the cluster's settings (this node's lapse among them) first
                await self.settings_sync.load()
            settings = self.settings.current
            row = await self.store.run(nodes.start, now=self.clock.now(), lapse_ms=_lapse_ms(settings),
                                       host=socket.gethostname(), pid=os.getpid())
        except Exception:
            await trio.lowlevel.checkpoint()  # a start abandoned meanwhile (store cut short) ends here: no outage
            log.warning("node %s not recorded yet (database unavailable); retrying at the next heartbeat",
                        self.node_id, exc_info=True)
            self._next_beat = sent + self.heartbeat_s
            return False
        self._started = True
        self._landed(sent, row, settings=settings)
        log.info("node %s started (heartbeat %gs, lapse %gs)", self.node_id, self.heartbeat_s, self.lapse_s)
        return True

    async def run_heartbeats(self) -> None:
        """Beat every ``--node-heartbeat`` until cancelled; a failure is logged and retried soon."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_for_cut_off)
            await self._heartbeats()

    async def _watch_for_cut_off(self) -> None:
        """Fence (see the module docstring) even while a heartbeat hangs on an unreachable database."""
        while True:
            await trio.sleep(min(MAX_RETRY_S, self.heartbeat_s))
            self.check_cut_off()

    def check_cut_off(self) -> None:
        if self._landed_at is None or self._stopping or self.fenced:
            return
        away = trio.current_time() - self._landed_at
        if away <= self._landed_lapse:  # not the current lapse: a shorter one applies from the next heartbeat
            return
        self.fenced = True
        self.metrics.node_fenced += 1
        connections = list(self.connections)
        log.warning("node %s: no heartbeat recorded for %.1fs (over the %gs lapse): the database writer is "
                    "unreachable; ending %d session(s) so their workers go elsewhere",
                    self.node_id, away, self._landed_lapse, len(connections))
        for connection in connections:
            connection.shutdown()

    @property
    def _due(self) -> float:
        """The next heartbeat: as the last one scheduled it, or sooner once the interval has shrunk since."""
        if self._last_beat is None:
            return self._next_beat
        return min(self._next_beat, self._last_beat + self.heartbeat_s)

    async def _heartbeats(self) -> None:
        outage = OutageLog(log, f"node {self.node_id}: heartbeat failed (database unavailable?)",
                           f"node {self.node_id}: heartbeats work again")
        while True:
            try:
                await self.beat()
            except Exception:
                outage.failed()
            else:
                outage.worked()
            now = trio.current_time()
            retry = now + min(MAX_RETRY_S, self.heartbeat_s)
            # The next heartbeat when this one landed; soon again when it did not, or to look whether it is due.
            await trio.sleep_until(self._due if now < self._due < retry else retry)

    async def beat(self) -> None:
        """Heartbeat if one is due; if another instance declared us lost, close our connections and rejoin."""
        if self._stopping or trio.current_time() < self._due:
            return
        if not self._started:
            await self.start()
            return
        settings = self.settings.current  # one snapshot: the lapse written and the next beat go together
        sent = trio.current_time()
        try:
            result = await self.store.run(nodes.heartbeat, now=self.clock.now(), lapse_ms=_lapse_ms(settings))
        except BaseException:
            self._steady_since = None  # a missed heartbeat: start counting again
            raise
        landed = trio.current_time()
        if isinstance(result, Refusal):
            if result.code == NODE_LOST:
                await self._rejoin()
                return
            # Not ours to repair (the row was removed by hand?): no sweeping until a heartbeat lands.
            self._steady_since = None
            log.error("node %s heartbeat refused: %s (%s)", self.node_id, result.code, result.message)
            return
        self._landed(sent, result, landed, settings)

    async def sweep(self) -> None:
        """Declare lapsed nodes lost and disconnect their sessions (SKIP LOCKED, shared by every node)."""
        metrics = self.metrics
        for _ in range(MAX_SWEEP_ROUNDS):
            if not self.may_sweep:  # asked each round: the process may have been paused during the last one
                return
            result = await self.store.run(nodes.lose, now=self.clock.now())
            for node_id in result.lost_nodes:
                log.warning("node %s declared lost: its heartbeat lapsed; disconnecting its sessions", node_id)
            metrics.nodes_declared_lost += len(result.lost_nodes)
            metrics.lost_node_sessions += result.count
            if result.count:
                log.info("disconnected %d session(s) of lost node(s)", result.count)
            if not result.more:
                break

    async def stop(self) -> None:
        """STOPPED, after the connections closed; a failure only means the others will declare us lost."""
        self._stopping = True
        if not self._started:
            return
        try:
            result = await self.store.run_once(nodes.stop, timeout_s=STOP_RECORD_TIMEOUT_S, now=self.clock.now())
        except trio.TooSlowError:
            log.warning("node %s: stop not recorded (no answer from the database within %gs); other instances "
                        "will declare it lost after %gs", self.node_id, STOP_RECORD_TIMEOUT_S, self.lapse_s)
            return
        except Exception:
            log.warning("node %s: stop not recorded; other instances will declare it lost after %gs",
                        self.node_id, self.lapse_s, exc_info=True)
            return
        if isinstance(result, Refusal):
            log.warning("node %s: stop refused: %s", self.node_id, result.message)
        elif result:
            log.warning("node %s stopped with %d session(s) still recorded open; disconnected them",
                        self.node_id, result)

    async def _rejoin(self) -> None:
        connections = list(self.connections)
        log.warning("node %s was declared lost by another instance (paused or cut off for over %gs); "
                    "closing its %d connection(s), then rejoining", self.node_id, self.lapse_s, len(connections))
        for connection in connections:
            connection.shutdown()  # their sessions are DISCONNECTED already; the workers reconnect and resume
        settings = self.settings.current
        sent = trio.current_time()
        result = await self.store.run(nodes.rejoin, now=self.clock.now(), lapse_ms=_lapse_ms(settings))
        if isinstance(result, Refusal):
            raise RuntimeError(f"node {self.node_id} could not rejoin: {result.code} ({result.message})")
        self.metrics.node_rejoins += 1
        self._steady_since = None
        self._landed(sent, result, settings=settings)

    def _lapsed(self, at: dt.datetime) -> bool:
        """By ``at``, our own row has lapsed: another node judging it then would declare us lost."""
        return self._expires_at is not None and db_time(self._expires_at) <= db_time(at)

    def _landed(self, sent: float, row: NodeRow, landed: float | None = None,
                settings: Settings | None = None) -> None:
        """A heartbeat sent at Trio time ``sent`` was recorded as ``row`` at ``landed`` (now, if not given).

        ``settings`` is the snapshot whose lapse the heartbeat wrote: the next
        beat is due by its interval, which is at most half that lapse.
        """
        landed = trio.current_time() if landed is None else landed
        settings = settings or self.settings.current
        lapse_s, heartbeat_s = settings.node_lapse, settings.node_heartbeat
        self._landed_at, self._landed_lapse, self.fenced = landed, lapse_s, False
        away = self._lapsed(row.heartbeat_at)
        slow = landed - sent > lapse_s - heartbeat_s
        if away or slow:
            # We were away longer than a lapse, or the database stalled: every
            # node's heartbeat may have lapsed meanwhile. Give them a lapse.
            self._steady_since = None
        if self._steady_since is None:
            self._steady_since = landed
        self._expires_at = row.expires_at
        self._last_beat = sent
        self._next_beat = sent + heartbeat_s


def _lapse_ms(settings: Settings) -> int:
    return milliseconds(settings.node_lapse)
