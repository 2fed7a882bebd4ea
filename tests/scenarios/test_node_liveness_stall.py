"""Stalls that must not get a healthy node declared lost: the database's, and a stuck timers tick.

A database stall (statements block, then all succeed) longer than a lapse declares nobody lost.

Every node computes its heartbeat's ``now`` before the statement runs, so
the heartbeat that lands after the stall carries an ``expires_at`` that has
already passed. A node whose own heartbeat took that long must not judge
the others until they have had a lapse to beat again.
"""

from __future__ import annotations

import trio

from pulse_trio.config import Settings
from pulse_trio.server.clock import ServiceClock
from pulse_trio.store.instance import nodes
from pulse_trio.store.engine.trio_bridge import Store
from scenario_support import lone_node
from sql_support import rows as sql_rows

HEARTBEAT = 1.0
LAPSE = 3.0
STALL = LAPSE + 0.5  # the database answers nothing for a little over a lapse, then everything succeeds


class StallingStore:
    """The real store; while ``stalled``, each heartbeat waits STALL seconds first (as if the DB hung)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.node_id = store.node_id
        self.stalled = False

    async def run(self, fn, **kwargs):
        if self.stalled and fn is nodes.heartbeat:
            await trio.sleep(STALL)
        return await self.store.run(fn, **kwargs)


def _state(db, node_id):
    ((state,),) = sql_rows(db, "SELECT state FROM server_nodes WHERE node_id = %s", (node_id,))
    return state


async def test_a_db_stall_longer_than_a_lapse_declares_no_healthy_node_lost(virtual_clock, db):
    settings = Settings(node_heartbeat=HEARTBEAT, node_lapse=LAPSE)
    clock = ServiceClock(virtual=True)
    stores, lives = [], []
    for letter in "AB":
        real = Store(db, pool_size=2, node_id="nod_" + letter * 26)
        virtual_clock.limiters.append(real.limiter)
        store = StallingStore(real)
        stores.append(store)
        lives.append(lone_node(store, settings, clock))
    a, b = lives
    try:
        assert await a.start() and await b.start()
        for _ in range(round(LAPSE / HEARTBEAT) + 1):  # both steady for over a lapse
            await trio.sleep(HEARTBEAT)
            async with trio.open_nursery() as n:
                n.start_soon(a.beat)
                n.start_soon(b.beat)
        assert a.may_sweep and b.may_sweep
        # The database stalls for every node alike; both heartbeats land late, but they land.
        await trio.sleep(HEARTBEAT)
        for s in stores:
            s.stalled = True
        async with trio.open_nursery() as n:
            n.start_soon(a.beat)
            n.start_soon(b.beat)
        for s in stores:
            s.stalled = False
        # Each timers tick sweeps right after its heartbeat.
        await b.sweep()
        await a.sweep()
        states = [await trio.to_thread.run_sync(_state, db, live.node_id) for live in lives]
        assert states == ["ALIVE", "ALIVE"], (states, a.may_sweep, b.may_sweep)
        assert not a.may_sweep and not b.may_sweep  # each waits a lapse from its slow heartbeat
        for _ in range(round(LAPSE / HEARTBEAT) + 1):  # steady again: sweeping resumes, and finds nobody lapsed
            await trio.sleep(HEARTBEAT)
            async with trio.open_nursery() as n:
                n.start_soon(a.beat)
                n.start_soon(b.beat)
        assert a.may_sweep and b.may_sweep
        await a.sweep()
        await b.sweep()
        states = [await trio.to_thread.run_sync(_state, db, live.node_id) for live in lives]
        assert states == ["ALIVE", "ALIVE"]
    finally:
        for s in stores:
            s.store.close()


class StuckTimersStore:
    """The real store, but the timers' first read of each tick never returns (a tick stuck on a lock)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.node_id = store.node_id
        self.stuck = trio.Event()

    async def run(self, fn, **kwargs):
        from pulse_trio.store.views.timer_probe import due_work

        if fn is due_work:
            self.stuck.set()
            await trio.sleep_forever()
        return await self.store.run(fn, **kwargs)


async def test_a_stuck_timers_tick_never_holds_up_the_heartbeat(virtual_clock, db):
    """The heartbeat has a task of its own: a timers tick stuck for many lapses leaves it on time."""
    from pulse_trio.server.hub import SessionHub
    from pulse_trio.server.timers import Timers

    settings = Settings(node_heartbeat=HEARTBEAT, node_lapse=LAPSE, poll_interval=0.5)
    real = Store(db, pool_size=2, node_id="nod_" + "T" * 26)
    virtual_clock.limiters.append(real.limiter)
    store = StuckTimersStore(real)
    live = lone_node(store, settings, ServiceClock(virtual=True))
    timers = Timers(store=store, clock=live.clock, hub=SessionHub(), settings=live.settings, metrics=live.metrics,
                    node=live)
    beats = []
    try:
        assert await live.start()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(timers.run)
            nursery.start_soon(live.run_heartbeats)
            await store.stuck.wait()
            # Read between two beats: a read at a beat's own (virtual) moment races its write.
            await trio.sleep(HEARTBEAT / 2)
            for _ in range(round(4 * LAPSE / HEARTBEAT)):
                await trio.sleep(HEARTBEAT)
                beats.append(await trio.to_thread.run_sync(
                    lambda: _heartbeat_at(db, live.node_id)))
            nursery.cancel_scope.cancel()
        gaps = [(b - a).total_seconds() for a, b in zip(beats, beats[1:])]
        assert gaps and all(HEARTBEAT - 0.5 <= gap <= HEARTBEAT + 0.5 for gap in gaps), gaps  # on time
        assert _state(db, live.node_id) == "ALIVE"
    finally:
        real.close()


def _heartbeat_at(db, node_id):
    ((heartbeat_at,),) = sql_rows(db, "SELECT heartbeat_at FROM server_nodes WHERE node_id = %s", (node_id,))
    return heartbeat_at
