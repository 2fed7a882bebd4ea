"""Server-process liveness on the virtual clock: lapsed nodes, a node lost while alive, who may sweep.

A process that died is played by its transaction functions: a Store that
carries a node id records the node, registers a session on it and starts a
lease, then goes quiet (no heartbeat, no disconnect) — what a SIGKILL
leaves behind. The live instances are real services on real sockets.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import socket

import pytest
import trio

from pulse_trio.config import Settings
from pulse_trio.server.clock import ServiceClock
from pulse_trio.store import (
    NewInstance, StartCommand, SubscribedQueue, assign, new_credentials, nodes, register, set_capacity, start,
)
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.engine.tx import db_time

from scenario_support import eventually, lone_node, running
from sql_support import rows as sql_rows

HEARTBEAT = 1.0
LAPSE = 3.0
TICK = 1.0  # the timers' interval with the scenarios' 0.5 s poll
LIVENESS = {"node_heartbeat": HEARTBEAT, "node_lapse": LAPSE}


class DeadProcess:
    """What a SIGKILLed serve leaves: its node row, a session on it, a running lease; then silence."""

    def __init__(self, db, node_id: str = "nod_" + "D" * 26) -> None:
        self.db = db
        self.node_id = node_id
        self.store = Store(db, pool_size=1, node_id=node_id)

    def run(self, fn, now, **kwargs):
        return self.store.run_sync(fn, now=now, **kwargs)

    async def live_until(self, service, submitted_task, *, ago: float = 0.0) -> str:
        """Start the node and a session with one running lease at ``service``'s now (minus ``ago`` seconds)."""
        now = service.clock.now() - dt.timedelta(seconds=ago)

        def work():
            self.run(nodes.start, now, lapse_ms=round(LAPSE * 1000), host="gone", pid=1)
            reg = self.run(register, now, instance=NewInstance("ghost", (SubscribedQueue("q"),)))
            session = reg.instance.session_id
            self.run(set_capacity, now, session_id=session, sequence=1, capacity=1, drain=False)
            result = self.run(assign, now, session_id=session, credentials=new_credentials(1),
                              start_timeout_ms=60_000, default_lease_ttl_ms=30_000)
            (offer,) = result.offers
            assert offer.task.task_id == submitted_task["task_id"]
            self.run(start, now, commands=[StartCommand(session, offer.task.task_id, offer.lease.lease_id,
                                                        offer.lease_secret, 1)])
            return session

        return await trio.to_thread.run_sync(work)

    def close(self) -> None:
        self.store.close()


@pytest.fixture
def dead(db):
    process = DeadProcess(db)
    yield process
    process.close()


async def _session(db, session_id: str):
    rows = await trio.to_thread.run_sync(lambda: sql_rows(
        db, "SELECT state, disconnected_at FROM worker_instances WHERE session_id = %s", (session_id,)))
    return rows[0]


async def _node(db, node_id: str):
    rows = await trio.to_thread.run_sync(lambda: sql_rows(
        db, "SELECT state, expires_at, lost_at, lost_by FROM server_nodes WHERE node_id = %s", (node_id,)))
    return rows[0]


async def _leases(db):
    return await trio.to_thread.run_sync(lambda: sql_rows(
        db, "SELECT lease_id, state, expires_at, owner_session_id, revision FROM leases ORDER BY lease_id"))


async def test_a_dead_process_sessions_are_disconnected_within_its_lapse_and_its_leases_expire_on_their_own(
        virtual_clock, scenario_service, submit, operator, db, dead):
    service = await scenario_service(**LIVENESS, lease_ttl=30)
    ops = operator(service)
    task = await submit(service)
    session = await dead.live_until(service, task)
    leases = await _leases(db)
    (_, expires_at, _, _) = await _node(db, dead.node_id)

    async def gone():
        state, at = await _session(db, session)
        return at if state == "DISCONNECTED" else None

    disconnected_at = await eventually(gone, step=0.1)
    late = (disconnected_at - expires_at).total_seconds()
    assert 0 <= late <= TICK + 0.5, late  # never before the lapse, and within a tick of it
    state, _, lost_at, lost_by = await _node(db, dead.node_id)
    assert (state, lost_at, lost_by) == ("LOST", disconnected_at, service.node.node_id)
    assert await _leases(db) == leases  # the sweep never touches a lease
    assert service.metrics.nodes_declared_lost == 1 and service.metrics.lost_node_sessions == 1
    # The lease expires on its own, by its ttl, as after any disconnect: safe retry decides.
    view = await ops.wait_state(task["task_id"], "UNKNOWN")
    assert view["outcome"]["error_code"] == "lease_expired"


async def test_a_new_instance_sweeps_only_after_a_whole_lapse_of_its_own_heartbeats(
        virtual_clock, scenario_service, submit, db, dead):
    """After a database outage every heartbeat is overdue: the first node back must not judge the others yet."""
    first = await scenario_service(**LIVENESS)
    task = await submit(first)
    first.stop()  # graceful: only the dead process is left behind
    with trio.fail_after(30):
        while first.connections:
            await trio.sleep(0.1)
    # Long lapsed, and nobody was there to notice. (Each service anchors its clock to the wall
    # clock when it starts, and virtual time runs ahead of the wall: "long ago" must be far enough
    # back to be in the past for the next service's clock too.)
    session = await dead.live_until(first, task, ago=120)
    await trio.sleep(LAPSE * 4)
    assert (await _session(db, session))[0] == "ACTIVE"
    late = await scenario_service(**LIVENESS)
    (_, expires_at, _, _) = await _node(db, dead.node_id)
    assert expires_at < db_time(late.clock.now())  # lapsed by the new service's own clock
    started = trio.current_time()
    await trio.sleep(LAPSE - 0.5)
    assert (await _session(db, session))[0] == "ACTIVE"  # not steady for a lapse yet

    async def gone():
        return (await _session(db, session))[0] == "DISCONNECTED"

    await eventually(gone, step=0.1)
    assert LAPSE <= trio.current_time() - started <= LAPSE + HEARTBEAT + TICK + 0.5
    assert (await _node(db, dead.node_id))[3] == late.node.node_id


async def test_a_live_instance_declared_lost_closes_its_connections_and_rejoins(
        virtual_clock, scenario_service, connect_worker, submit, db):
    service = await scenario_service(**LIVENESS)
    me = service.node.node_id
    await submit(service)
    async with connect_worker(service) as old:
        await old.capacity(1)
        held = await running(old)
        # Another instance saw this one's heartbeat lapse (a pause, a cut-off database, a skewed clock).
        sweeper = Store(db, pool_size=1, node_id="nod_" + "S" * 26)
        try:
            later = service.clock.now() + dt.timedelta(seconds=LAPSE * 2)
            result = await trio.to_thread.run_sync(lambda: sweeper.run_sync(nodes.lose, now=later))
        finally:
            sweeper.close()
        assert result.lost_nodes == (me,) and result.count == 1
        assert (await _session(db, old.session_id))[0] == "DISCONNECTED"
        # At its next heartbeat the instance learns it; the worker is told to go and reconnect.
        with trio.fail_after(HEARTBEAT + TICK + 5):
            shutdown = await old.push("error")
        assert shutdown["error"]["code"] == "server_shutting_down"

    async def rejoined():  # the connections are told before the rejoin commits: wait for the rejoin itself
        row = await _node(db, me)
        return row if row[0] == "ALIVE" and service.metrics.node_rejoins else None

    state, expires_at, _, lost_by = await eventually(rejoined, timeout=5, step=0.1)
    assert state == "ALIVE" and lost_by == "nod_" + "S" * 26
    assert expires_at > db_time(service.clock.now())
    assert service.metrics.node_rejoins == 1
    async with connect_worker(service) as new:  # the instance takes sessions again, and the lease resumes
        assert (await _session(db, new.session_id))[0] == "ACTIVE"
        resumed = await held.resume_on(new)
        assert resumed["type"] == "ack", resumed
        assert (await held.finish())["type"] == "ack"
    rows = await trio.to_thread.run_sync(lambda: sql_rows(
        db, "SELECT node_id FROM worker_instances WHERE session_id = %s", (new.session_id,)))
    assert rows == [(me,)]


async def test_a_missed_heartbeat_or_a_long_pause_restarts_the_wait_before_sweeping(virtual_clock, db):
    """The rule behind the previous test, driven beat by beat on a real store."""
    settings = Settings(**LIVENESS)
    store = Store(db, pool_size=1, node_id="nod_" + "L" * 26)
    virtual_clock.limiters.append(store.limiter)
    live = lone_node(store, settings, ServiceClock(virtual=True))
    try:
        assert await live.start()

        async def beats(seconds: float) -> None:
            for _ in range(round(seconds / HEARTBEAT)):
                await trio.sleep(HEARTBEAT)
                await live.beat()

        await beats(LAPSE - HEARTBEAT)
        assert not live.may_sweep
        await beats(HEARTBEAT)
        assert live.may_sweep
        # A heartbeat that fails (the database is away for this node) ...
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            closed_port = probe.getsockname()[1]
        away = Store(dataclasses.replace(db, host="127.0.0.1", port=closed_port, unix_socket=None,
                                         connect_timeout=1.0), pool_size=1, max_attempts=1, node_id=live.node_id)
        live.store = away
        await trio.sleep(HEARTBEAT)
        with pytest.raises(Exception):
            await live.beat()
        live.store = store
        away.close()
        assert not live.may_sweep
        await beats(LAPSE - HEARTBEAT)
        assert not live.may_sweep  # the wait starts again from the first heartbeat back
        await beats(HEARTBEAT * 2)
        assert live.may_sweep
        # ... and a pause longer than a lapse (heartbeats that land, but late) does the same.
        await trio.sleep(LAPSE + HEARTBEAT)
        await live.beat()
        assert not live.may_sweep
        await beats(LAPSE)
        assert live.may_sweep
    finally:
        store.close()


async def test_a_start_whose_commit_landed_unseen_is_found_by_the_next_try(virtual_clock, db):
    """The store gave up on a start whose COMMIT had landed (its answer lost): the next try is not refused.

    The heartbeat that tries again must find the row as its own, not insert it
    again (a duplicate key, at every heartbeat, for the life of the process).
    """
    store = Store(db, pool_size=1, node_id="nod_" + "R" * 26)
    virtual_clock.limiters.append(store.limiter)
    clock = ServiceClock(virtual=True)
    live = lone_node(store, Settings(**LIVENESS), clock)
    try:
        # What the lost answer leaves behind: the row is recorded, and the process does not know it.
        await store.run(nodes.start, now=clock.now(), lapse_ms=round(LAPSE * 1000), host="h", pid=1)
        assert await live.start()
        await trio.sleep(HEARTBEAT)
        await live.beat()
        state, expires_at, _, _ = await _node(db, live.node_id)
        assert state == "ALIVE" and expires_at == db_time(clock.now() + dt.timedelta(seconds=LAPSE))
    finally:
        store.close()
