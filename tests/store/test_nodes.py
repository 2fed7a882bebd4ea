"""Chart ``node``: serve-process liveness, and the sessions of a node that is gone.

Each node is a Store carrying its ``node_id`` (as ``serve`` builds it);
``now`` is injected, so a lapse is a ``world.advance``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
import trio

from pulse_trio.dburl import connect
from pulse_trio.store import NewInstance, Refusal, SubscribedQueue, assign, new_credentials, register
from pulse_trio.server.liveness import STOP_RECORD_TIMEOUT_S
from pulse_trio.store.instance import nodes
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.engine.results import NODE_LOST, SERVER_SHUTTING_DOWN
from pulse_trio.store.engine.tx import Tx, db_time

LAPSE_MS = 15_000


class Node:
    """One serve process as the store sees it: its own Store, and the world's clock."""

    def __init__(self, world, node_id: str) -> None:
        self.world = world
        self.node_id = node_id
        self.store = Store(world.db, pool_size=2, node_id=node_id)

    def run(self, fn, **kwargs):
        kwargs.setdefault("now", self.world.now)
        return self.store.run_sync(fn, **kwargs)

    def start(self, lapse_ms: int = LAPSE_MS):
        return self.run(nodes.start, lapse_ms=lapse_ms, host="test-host", pid=4242)

    def register(self, *, drain: bool = False) -> str:
        reg = self.run(register, instance=NewInstance("w", (SubscribedQueue("q"),)))
        assert not isinstance(reg, Refusal), reg
        if drain:
            self.world._sequence += 1
            from pulse_trio.store import set_capacity
            self.world.run(set_capacity, session_id=reg.instance.session_id, sequence=self.world._sequence,
                           capacity=1, drain=True)
        return reg.instance.session_id

    def row(self) -> dict:
        (row,) = self.world.sql("SELECT state, heartbeat_at, expires_at, lost_at, lost_by, stopped_at, lapse_ms"
                                " FROM server_nodes WHERE node_id = %s", (self.node_id,))
        return dict(zip(("state", "heartbeat_at", "expires_at", "lost_at", "lost_by", "stopped_at", "lapse_ms"),
                        row))


@pytest.fixture
def node(world) -> Iterator:
    made: list[Node] = []

    def make(name: str, *, started: bool = True, lapse_ms: int = LAPSE_MS) -> Node:
        n = Node(world, f"nod_{name.upper():0>26}")
        made.append(n)
        if started:
            n.start(lapse_ms)
        return n

    yield make
    for n in made:
        n.store.close()


def sessions(world, *session_ids: str) -> dict[str, tuple]:
    rows = world.sql("SELECT session_id, state, disconnected_at, node_id FROM worker_instances"
                     " WHERE session_id IN %s", (session_ids,))
    return {r[0]: r[1:] for r in rows}


def states(world, *session_ids: str) -> dict[str, str]:
    return {k: v[0] for k, v in sessions(world, *session_ids).items()}


# -- start, heartbeat, register ------------------------------------------------------------


def test_start_records_the_node_alive_until_now_plus_its_lapse(world, node):
    a = node("a")
    row = a.row()
    assert row["state"] == "ALIVE" and row["lapse_ms"] == LAPSE_MS
    assert row["heartbeat_at"] == db_time(world.now)
    assert row["expires_at"] == db_time(world.now + dt.timedelta(milliseconds=LAPSE_MS))


def test_heartbeat_moves_expires_at_by_the_nodes_own_lapse(world, node):
    a = node("a", lapse_ms=2_000)
    world.advance(1_500)
    result = a.run(nodes.heartbeat)
    assert result.state == "ALIVE"
    assert a.row()["heartbeat_at"] == db_time(world.now)
    assert a.row()["expires_at"] == db_time(world.now + dt.timedelta(milliseconds=2_000))
    before = a.row()
    assert a.run(nodes.heartbeat).state == "ALIVE"  # the same instant again: nothing to change
    assert a.run(nodes.heartbeat, now=world.now - dt.timedelta(seconds=1)).state == "ALIVE"  # a clock step back
    assert a.row() == before  # ... never shortens expires_at


def test_register_records_the_node_holding_the_session(world, node):
    a = node("a")
    session = a.register()
    assert sessions(world, session)[session][2] == a.node_id
    plain = world.worker("q")  # outside any serve process: no node
    assert sessions(world, plain.session_id)[plain.session_id][2] is None


def test_node_functions_refuse_a_store_without_a_node(world):
    with pytest.raises(ValueError, match="node_id"):
        world.run(nodes.heartbeat)
    with pytest.raises(ValueError, match="node_id"):
        world.run(nodes.lose)


# -- lose: the sweep ------------------------------------------------------------------------


def test_lose_changes_nothing_before_the_lapse_and_everything_at_it(world, node):
    a, b = node("a"), node("b")
    active, draining = a.register(), a.register(drain=True)
    world.advance(LAPSE_MS - 1)
    result = b.run(nodes.lose)
    assert (result.count, result.lost_nodes) == (0, ())
    assert a.row()["state"] == "ALIVE"
    assert set(states(world, active, draining).values()) == {"ACTIVE", "DRAINING"}
    world.advance(1)  # exactly expires_at
    result = b.run(nodes.lose)
    assert (result.count, result.more, result.lost_nodes) == (2, False, (a.node_id,))
    row = a.row()
    assert (row["state"], row["lost_at"], row["lost_by"]) == ("LOST", db_time(world.now), b.node_id)
    assert row["expires_at"] is None  # every session done: out of the sweep
    got = sessions(world, active, draining)
    assert {s: (v[0], v[1]) for s, v in got.items()} == {
        active: ("DISCONNECTED", db_time(world.now)), draining: ("DISCONNECTED", db_time(world.now))}


def test_lose_touches_only_the_lost_nodes_open_sessions_and_no_lease(world, node):
    a, b = node("a"), node("b")
    mine = a.register()
    theirs = b.register()
    closed = a.register()
    from pulse_trio.store import disconnect
    a.run(disconnect, session_id=closed)
    from pulse_trio.store import set_capacity
    world._sequence += 1
    world.run(set_capacity, session_id=mine, sequence=world._sequence, capacity=2, drain=False)
    world.submit()
    world.submit()
    world.run(assign, session_id=mine, credentials=new_credentials(2), start_timeout_ms=60_000,
              default_lease_ttl_ms=60_000)
    before = world.sql("SELECT lease_id, state, expires_at, owner_session_id, revision FROM leases ORDER BY lease_id")
    disconnected_at = sessions(world, closed)[closed][1]
    world.advance(LAPSE_MS)
    b.run(nodes.heartbeat)
    assert b.run(nodes.lose).count == 1
    assert states(world, mine, theirs, closed) == {mine: "DISCONNECTED", theirs: "ACTIVE", closed: "DISCONNECTED"}
    assert sessions(world, closed)[closed][1] == disconnected_at  # an ended session keeps its own time
    after = world.sql("SELECT lease_id, state, expires_at, owner_session_id, revision FROM leases ORDER BY lease_id")
    assert after == before and {r[1] for r in after} == {"OFFERED"}


def test_a_node_never_declares_itself_lost(world, node):
    a = node("a")
    session = a.register()
    world.advance(LAPSE_MS * 10)  # its own heartbeat is long overdue (a paused process)
    assert a.run(nodes.lose).count == 0
    assert a.row()["state"] == "ALIVE" and states(world, session) == {session: "ACTIVE"}
    # ... and the chart says so too, whatever query found it
    from types import SimpleNamespace

    from pulse_trio.store import decide
    from pulse_trio.store.engine.guard_context import NodeContext
    row = SimpleNamespace(node_id=a.node_id, state="ALIVE", expires_at=world.now - dt.timedelta(seconds=1))
    assert isinstance(decide("node", "lose", "ALIVE", NodeContext(node=row, now=world.now,
                                                                  declared_by=a.node_id)), Refusal)
    assert decide("node", "lose", "ALIVE", NodeContext(node=row, now=world.now, declared_by="nod_other")) == "LOST"


def test_the_sweep_goes_in_batches_and_the_node_leaves_it_when_done(world, node):
    a, b = node("a"), node("b")
    made = [a.register() for _ in range(7)]
    world.advance(LAPSE_MS)
    first = b.run(nodes.lose, limit=3)
    assert (first.count, first.more, first.lost_nodes) == (3, True, (a.node_id,))
    assert a.row()["state"] == "LOST" and a.row()["expires_at"] is not None  # sessions left: still due
    second = b.run(nodes.lose, limit=3)
    assert (second.count, second.more, second.lost_nodes) == (3, True, ())
    third = b.run(nodes.lose, limit=3)
    assert (third.count, third.more) == (1, False)
    assert a.row()["expires_at"] is None
    assert set(states(world, *made).values()) == {"DISCONNECTED"}
    assert b.run(nodes.lose).count == 0


def test_more_lapsed_nodes_than_one_batch_takes_ask_for_another_batch(world, node):
    """A host running a serve group dies: its nodes are declared in the sweep's next rounds, not one batch a tick."""
    sweeper = node("s")
    dead = {node(f"d{i}").node_id for i in range(5)}
    world.advance(LAPSE_MS)
    sweeper.run(nodes.heartbeat)
    first = sweeper.run(nodes.lose, max_nodes=3)
    assert len(first.lost_nodes) == 3 and first.more  # a full batch of nodes: more may have lapsed
    second = sweeper.run(nodes.lose, max_nodes=3)
    assert len(second.lost_nodes) == 2 and not second.more
    assert set(first.lost_nodes + second.lost_nodes) == dead


def _open_tx(world, node_id: str | None = None):
    conn = connect(world.db)
    cur = conn.cursor()
    return conn, Tx(cur, node_id=node_id)


def test_a_session_locked_elsewhere_is_skipped_and_swept_on_a_later_pass(world, node):
    a, b = node("a"), node("b")
    busy, free = a.register(), a.register()
    world.advance(LAPSE_MS)
    conn, _ = _open_tx(world)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT session_id FROM worker_instances WHERE session_id = %s FOR UPDATE", (busy,))
        result = b.run(nodes.lose)
        assert (result.count, result.lost_nodes) == (1, (a.node_id,))
        assert states(world, busy, free) == {busy: "ACTIVE", free: "DISCONNECTED"}
        assert a.row()["state"] == "LOST" and a.row()["expires_at"] is not None
        assert b.run(nodes.lose).count == 0  # still locked: skipped again, nothing written
    finally:
        conn.rollback()
        conn.close()
    world.advance(1_000)
    result = b.run(nodes.lose)
    assert (result.count, result.lost_nodes) == (1, ())
    assert states(world, busy) == {busy: "DISCONNECTED"} and a.row()["expires_at"] is None


def test_two_sweepers_never_take_the_same_node(world, node):
    """SKIP LOCKED: while one sweeper holds a lapsed node, another one passes it by."""
    a, b, c = node("a"), node("b"), node("c")
    session = a.register()
    world.advance(LAPSE_MS)
    b.run(nodes.heartbeat)
    c.run(nodes.heartbeat)
    conn, tx = _open_tx(world, b.node_id)
    try:
        first = nodes.lose(tx, now=world.now)  # b's sweep, not yet committed
        assert first.lost_nodes == (a.node_id,)
        second = c.run(nodes.lose)
        assert (second.count, second.lost_nodes) == (0, ())
        conn.commit()
    finally:
        conn.close()
    assert a.row()["lost_by"] == b.node_id and states(world, session) == {session: "DISCONNECTED"}
    assert c.run(nodes.lose).count == 0


def test_a_registration_in_flight_is_either_swept_or_refused(world, node):
    """register share-locks its node: the sweep skips the node until it commits, then sweeps it too."""
    a, b = node("a"), node("b")
    world.advance(LAPSE_MS)
    b.run(nodes.heartbeat)
    conn, tx = _open_tx(world, a.node_id)
    try:
        reg = register(tx, instance=NewInstance("w", (SubscribedQueue("q"),)), now=world.now)
        assert b.run(nodes.lose).lost_nodes == ()  # the node row is share-locked: skipped
        conn.commit()
    finally:
        conn.close()
    assert b.run(nodes.lose).lost_nodes == (a.node_id,)
    assert states(world, reg.instance.session_id) == {reg.instance.session_id: "DISCONNECTED"}
    refused = a.run(register, instance=NewInstance("w", (SubscribedQueue("q"),)))
    assert isinstance(refused, Refusal) and refused.code == SERVER_SHUTTING_DOWN
    assert world.sql("SELECT COUNT(*) FROM worker_instances")[0][0] == 1  # nothing written


def test_a_session_on_a_node_that_is_not_alive_is_refused(world, node):
    ghost = node("ghost", started=False)  # a node id without a row
    refused = ghost.run(register, instance=NewInstance("w", (SubscribedQueue("q"),)))
    assert isinstance(refused, Refusal) and refused.code == SERVER_SHUTTING_DOWN
    a = node("a")
    a.run(nodes.stop)
    refused = a.run(register, instance=NewInstance("w", (SubscribedQueue("q"),)))
    assert isinstance(refused, Refusal) and refused.code == SERVER_SHUTTING_DOWN


# -- a node that was alive after all; a graceful stop ---------------------------------------


def test_a_lost_node_is_told_at_its_heartbeat_and_rejoins(world, node):
    a, b = node("a"), node("b")
    old = a.register()
    world.advance(LAPSE_MS)
    b.run(nodes.lose)
    refused = a.run(nodes.heartbeat)
    assert isinstance(refused, Refusal) and refused.code == NODE_LOST
    assert a.row()["state"] == "LOST"
    back = a.run(nodes.rejoin)
    assert back.state == "ALIVE"
    row = a.row()
    assert row["expires_at"] == db_time(world.now + dt.timedelta(milliseconds=LAPSE_MS))
    assert row["lost_by"] == b.node_id  # the last loss stays on record
    assert a.run(nodes.heartbeat).state == "ALIVE"
    new = a.register()
    assert states(world, old, new) == {old: "DISCONNECTED", new: "ACTIVE"}
    assert isinstance(a.run(nodes.rejoin), Refusal)  # only a LOST node rejoins


def test_stop_disconnects_what_is_left_and_leaves_the_sweep(world, node):
    a, b = node("a"), node("b")
    left_open, drained = a.register(), a.register(drain=True)
    world.advance(1_000)
    assert a.run(nodes.stop) == 2
    row = a.row()
    assert (row["state"], row["stopped_at"], row["expires_at"]) == ("STOPPED", db_time(world.now), None)
    assert set(states(world, left_open, drained).values()) == {"DISCONNECTED"}
    world.advance(LAPSE_MS * 10)
    assert b.run(nodes.lose).lost_nodes == ()  # a stopped node is never declared lost
    assert a.row()["state"] == "STOPPED"
    refused = a.run(nodes.heartbeat)
    assert isinstance(refused, Refusal) and refused.code != NODE_LOST


def test_a_lost_node_can_still_stop(world, node):
    a, b = node("a"), node("b")
    a.register()
    world.advance(LAPSE_MS)
    b.run(nodes.lose)
    assert a.run(nodes.stop) == 0
    assert a.row()["state"] == "STOPPED"


# -- a stop's last record: one bound, conflicts tried again within it -----------------------


async def test_a_stops_record_waits_out_a_lock_on_its_node_row_within_its_bound(world, node, monkeypatch):
    """The STOPPED (``Store.run_once``) meets its row held past the lock wait, a conflict: the database is up.

    It runs again within its bound and lands. Given up at the first
    conflict, a healthy stop left its node ALIVE, to be declared lost a
    lapse later as after a crash.
    """
    from pulse_trio.store.engine import pool

    monkeypatch.setattr(pool, "LOCK_WAIT_TIMEOUT_S", 1)  # a lock wait shorter than the bound
    a = node("a")
    holder = connect(world.db)
    try:
        with holder.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SELECT state FROM server_nodes WHERE node_id = %s FOR UPDATE", (a.node_id,))

        async def release_after_the_first_lock_wait() -> None:
            await trio.sleep(1.3)
            holder.rollback()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(release_after_the_first_lock_wait)
            assert await a.store.run_once(nodes.stop, timeout_s=STOP_RECORD_TIMEOUT_S, now=world.now) == 0
    finally:
        holder.close()
    assert a.row()["state"] == "STOPPED"


@pytest.mark.live  # a port that refuses, or accepts and never answers
@pytest.mark.parametrize("away", ["refuses", "never-answers"])
async def test_a_stops_record_gives_up_at_once_on_a_database_that_is_away(away):
    """No answer is no conflict: the record is not tried again, and the bound is kept."""
    import socket

    from pulse_trio.dburl import parse_database_url
    from pulse_trio.store.engine.facade import StoreUnavailable

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        if away == "never-answers":
            listener.listen(8)  # accepts, never greets: a frozen host
        port = listener.getsockname()[1]
        store = Store(parse_database_url(f"mysql://u:p@127.0.0.1:{port}/pulse"), pool_size=1,
                      node_id="nod_AWAY00000000000000000000000")
        timeout_s = 1.0 if away == "never-answers" else STOP_RECORD_TIMEOUT_S
        began = trio.current_time()
        try:
            with pytest.raises((StoreUnavailable, trio.TooSlowError)):
                await store.run_once(nodes.stop, timeout_s=timeout_s, now=dt.datetime.now(dt.timezone.utc))
        finally:
            store.close()
        took = trio.current_time() - began
    assert took < (0.5 if away == "refuses" else timeout_s + 0.5), took


# -- cost ------------------------------------------------------------------------------------


class _CountingCursor:
    """Counts the statements a transaction function sends (the real cursor does the work)."""

    def __init__(self, cursor) -> None:
        self.cursor, self.statements = cursor, []

    def execute(self, sql, args=()):
        self.statements.append(sql)
        return self.cursor.execute(sql, args)

    def __getattr__(self, name):
        return getattr(self.cursor, name)


def test_an_idle_sweep_is_one_indexed_statement_at_ten_thousand_sessions(world, node):
    a, b = node("a"), node("b")
    for i in range(5):  # stopped nodes of the past stay out of the range
        node(f"old{i}").run(nodes.stop)
    world.sql(
        "INSERT INTO worker_instances (instance_id, session_id, epoch, secret_digest, state, worker_name,"
        " subscriptions, cancellation_notifications, concurrency_keys, node_id, capacity, registered_at, updated_at)"
        " SELECT CONCAT('ins_', LPAD(seq, 26, '0')), CONCAT('ses_', LPAD(seq, 26, '0')), seq, REPEAT('x', 32),"
        " IF(MOD(seq, 10) = 0, 'DRAINING', 'ACTIVE'), 'w', '[{\"queue\": \"q\"}]', 0, 0, IF(MOD(seq, 2) = 1, %s, %s), 1, %s, %s"
        " FROM seq_1_to_10000", (a.node_id, b.node_id, db_time(world.now), db_time(world.now)))
    world.advance(LAPSE_MS - 1)
    conn = connect(world.db)
    try:
        counting = _CountingCursor(conn.cursor())
        result = nodes.lose(Tx(counting, node_id=b.node_id), now=world.now)
        conn.rollback()
    finally:
        conn.close()
    assert result.count == 0 and len(counting.statements) == 1
    (sql,) = counting.statements
    plan = _analyze(world, sql, (db_time(world.now), b.node_id, 16))
    assert plan["key"] == "server_nodes_due", plan
    assert float(plan["r_rows"] or 0) == 0, plan
    assert "filesort" not in (plan["Extra"] or "").lower(), plan
    # and when the node lapses, its 5 000 sessions go in batches that read only what they lock
    world.advance(1)
    total = 0
    for _ in range(20):
        batch = b.run(nodes.lose, limit=500)
        total += batch.count
        if not batch.more:
            break
    assert total == 5_000
    assert world.sql("SELECT COUNT(*) FROM worker_instances WHERE node_id = %s AND state <> 'DISCONNECTED'",
                     (a.node_id,))[0][0] == 0
    assert world.sql("SELECT COUNT(*) FROM worker_instances WHERE node_id = %s AND state = 'DISCONNECTED'",
                     (b.node_id,))[0][0] == 0


def _analyze(world, sql, args):
    conn = connect(world.db)
    try:
        with conn.cursor() as cur:
            # ANALYZE runs the statement; drop the locking clause so it leaves nothing locked
            cur.execute("ANALYZE " + sql.replace(" FOR UPDATE SKIP LOCKED", ""), args)
            names = [d[0] for d in cur.description]
            (row,) = [dict(zip(names, r)) for r in cur.fetchall()]
        conn.rollback()
        return row
    finally:
        conn.close()


def test_a_heartbeat_writes_the_lapse_the_node_beats_by_now(world, node):
    """node_lapse is a cluster setting: a node that read a new value carries it from its next heartbeat on."""
    a = node("a")
    world.advance(1_000)
    grown = a.run(nodes.heartbeat, lapse_ms=60_000)
    assert grown.lapse_ms == 60_000 and a.row()["lapse_ms"] == 60_000
    assert a.row()["expires_at"] == db_time(world.now) + dt.timedelta(seconds=60)
    world.advance(1_000)
    kept = a.run(nodes.heartbeat)  # no lapse given: the row's stays
    assert kept.lapse_ms == 60_000 and a.row()["expires_at"] == db_time(world.now) + dt.timedelta(seconds=60)
    world.advance(1_000)
    a.run(nodes.heartbeat, lapse_ms=2_000)  # shrinking takes effect with the beat that says so, not before
    assert a.row()["expires_at"] == db_time(world.now) + dt.timedelta(seconds=2)
    with pytest.raises(ValueError, match="lapse_ms"):
        a.run(nodes.heartbeat, now=world.advance(1_000), lapse_ms=0)
