"""The async facade: worker threads, bounded retries, recovery after a lost COMMIT."""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import time

import pymysql
import pytest
import trio

from pulse_trio.client import Client
from pulse_trio.contract.limits import MAX_COUNTER
from pulse_trio.dburl import connect, connect_node
from pulse_trio.store import StoreUnavailable, assign, new_credentials, register, request_cancel, start
from pulse_trio.store.lease.leases import finish
from pulse_trio.store.engine.inputs import FinishReport
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.engine.inputs import NewInstance, SubscribedQueue
from pulse_trio.store.engine.registry import read_only


@read_only
def _ping(tx, *, value):
    return (tx.one("SELECT %s", (value,))[0], threading.get_ident())


async def test_run_goes_through_a_worker_thread(store):
    value, ident = await store.run(_ping, value=7)
    assert value == 7 and ident != threading.get_ident()


async def test_concurrent_runs_never_open_more_connections_than_the_pool(db):
    s = Store(db, pool_size=3)
    try:
        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(functools.partial(s.run, _ping, value=i))
        assert s.pool.opened <= 3
    finally:
        s.close()


async def test_cancellation_waits_for_the_thread(store):
    finished = threading.Event()

    @read_only
    def slow(tx):
        tx.one("SELECT SLEEP(0.3)")
        finished.set()
        return "done"

    with trio.move_on_after(0.05) as scope:
        result = await store.run(slow)
        assert finished.is_set() and result == "done", "the transaction ran to its end despite the cancel"
        await trio.sleep(0)  # the cancel is delivered at the caller's next checkpoint
    assert scope.cancelled_caught


def test_deadlocks_and_lock_waits_are_retried_then_given_up(store):
    calls = []

    @read_only
    def flaky(tx):
        calls.append(1)
        if len(calls) < 3:
            raise pymysql.err.OperationalError(1213 if len(calls) == 1 else 1205, "try again")
        return "ok"

    assert store.run_sync(flaky) == "ok" and len(calls) == 3

    @read_only
    def hopeless(tx):
        raise pymysql.err.OperationalError(1213, "Deadlock found")

    with pytest.raises(StoreUnavailable):
        Store(store.config, pool_size=1, max_attempts=3, backoff_s=0.0001).run_sync(hopeless)


def test_a_real_deadlock_is_retried(db, world):
    """Two transactions lock two rows in opposite order; the victim is re-run and succeeds."""
    world.submit(idempotency_key="a")
    world.submit(idempotency_key="b")
    ids = [r[0] for r in world.sql("SELECT task_id FROM tasks ORDER BY idempotency_key")]
    s = Store(db, pool_size=2, backoff_s=0.001)
    barrier = threading.Barrier(2)
    attempts = []

    def locker(order):
        @read_only
        def body(tx):
            attempts.append(order)
            tx.one("SELECT 1 FROM tasks WHERE task_id = %s FOR UPDATE", (order[0],))
            if len(attempts) <= 2:
                barrier.wait(timeout=5)
            tx.one("SELECT 1 FROM tasks WHERE task_id = %s FOR UPDATE", (order[1],))
            return "ok"
        return body

    results = []
    threads = [threading.Thread(target=lambda o=o: results.append(s.run_sync(locker(o)))) for o in (ids, ids[::-1])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    s.close()
    assert results == ["ok", "ok"] and len(attempts) == 3


class _CommitThenDrop:
    """A connection whose first COMMIT succeeds on the server but whose answer is lost."""

    armed = True

    def __init__(self, real):
        self._real = real

    def cursor(self):
        return self._real.cursor()

    def rollback(self):
        return self._real.rollback()

    def close(self):
        return self._real.close()

    def commit(self):
        self._real.commit()
        if _CommitThenDrop.armed:
            _CommitThenDrop.armed = False
            self._real.close()
            raise pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")


@pytest.fixture
def lossy(db):
    _CommitThenDrop.armed = False
    s = Store(db, pool_size=2, connector=lambda config: _CommitThenDrop(connect(config)))
    s.run_sync(_ping, value=0)  # open the pool's connection before arming
    yield s
    s.close()


def test_lost_commit_is_re_read_for_a_lease_command(world, lossy):
    w = world.worker("q")
    offer = world.offer(w)
    _CommitThenDrop.armed = True
    (result,) = lossy.run_sync(start, commands=[world.command(w, offer, 1)], now=world.now)
    assert lossy.statistics().recoveries == 1
    assert not result.receipt.duplicate and result.lease.revision == 2, "our own commit, not a replay"
    assert world.sql("SELECT COUNT(*) FROM command_receipts") == [(1,)]
    assert world.sql("SELECT state, revision FROM leases") == [("RUNNING", 2)]


def test_lost_commit_is_re_read_for_a_batch_assign(world, lossy):
    w = world.worker("q")
    for _ in range(3):
        world.submit()
    credentials = new_credentials(3)
    _CommitThenDrop.armed = True
    result = lossy.run_sync(assign, session_id=w.session_id, credentials=credentials, now=world.now,
                            start_timeout_ms=30_000, default_lease_ttl_ms=30_000)
    assert len(result.offers) == 3
    assert {o.lease_secret for o in result.offers} == {c.lease_secret for c in credentials}
    assert world.sql("SELECT COUNT(*) FROM leases") == [(3,)], "no second batch was claimed"
    assert world.start(w, result.offers[0]).lease.state == "RUNNING", "the recovered secret works"


def test_lost_commit_is_re_read_for_a_registration(world, lossy):
    _CommitThenDrop.armed = True
    instance = NewInstance("w", (SubscribedQueue("q"),))
    result = lossy.run_sync(register, instance=instance, now=world.now)
    assert result.instance.instance_id == instance.instance_id
    assert world.sql("SELECT COUNT(*) FROM worker_instances") == [(1,)]


def test_lost_commit_is_re_read_for_a_manual_retry(world, lossy):
    """The retry's id is made before its transaction, so the re-run knows the retry it finds as its own:
    created, as a first retry is (docs/task-recovery.md §2, §3), not "retried before"."""
    source = world.submit()
    world.run(request_cancel, task_id=source)
    _CommitThenDrop.armed = True
    text, created = Client(lossy.config, store=lossy).retry_json_text(source, now=world.now)
    assert lossy.statistics().recoveries == 1
    assert created, "this call made the retry: nobody retried the source before"
    assert world.task(source).retried_by == json.loads(text)["task_id"]
    assert world.sql("SELECT COUNT(*) FROM tasks WHERE retry_of = %s", (source,)) == [(1,)]


def test_a_connection_lost_before_commit_is_simply_replaced(world, store):
    """The server aborts an uncommitted transaction on disconnect: running again is safe."""
    killed = []

    @read_only
    def victim(tx):
        if not killed:
            (conn_id,) = tx.one("SELECT CONNECTION_ID()")
            killed.append(conn_id)
            world.sql(f"KILL {int(conn_id)}")
        return tx.one("SELECT 1")[0]

    assert store.run_sync(victim) == 1
    assert store.statistics().recoveries == 0 and store.pool.discarded == 1


def test_a_connection_silent_inside_a_transaction_loses_its_locks(world, db):
    """A host that dies mid-transaction leaves its connection open and silent; the server drops it.

    Its row locks (here, a lease) are released after the idle timeout, not
    after the server's default eight hours, and the transaction is rolled back.
    """
    from pulse_trio.store.engine.pool import ConnectionPool

    w = world.worker("q")
    offer = world.offer(w)
    pool = ConnectionPool(db, 1, server_idle_timeout_s=2)
    dead_host = pool.acquire()
    with dead_host.cursor() as cur:
        cur.execute("SELECT lease_id FROM leases WHERE lease_id = %s FOR UPDATE", (offer.lease.lease_id,))
        cur.execute("UPDATE leases SET ttl_ms = 1 WHERE lease_id = %s", (offer.lease.lease_id,))
    # ... and then nothing: no commit, no close, as from a host that vanished.
    other = connect(db)
    try:
        with other.cursor() as cur:
            cur.execute("SET SESSION innodb_lock_wait_timeout = 10")
            started = time.monotonic()
            cur.execute("SELECT ttl_ms FROM leases WHERE lease_id = %s FOR UPDATE", (offer.lease.lease_id,))
            waited = time.monotonic() - started
            assert cur.fetchone()[0] != 1, "the silent transaction was rolled back"
        other.rollback()
    finally:
        other.close()
        pool.discard(dead_host)
    assert 1 <= waited < 9, waited  # released by the 2 s idle timeout, well before the 10 s lock wait


def test_a_pooled_connection_waits_for_a_tables_lock_no_longer_than_for_a_rows(db):
    """A statement behind a migration's ALTER (a metadata lock) fails as a row-lock wait does, and is retried,
    rather than waiting out the server's default of a year until the statement timeout cuts it."""
    from pulse_trio.store.engine.pool import LOCK_WAIT_TIMEOUT_S, STATEMENT_TIMEOUT_S, ConnectionPool

    pool = ConnectionPool(db, 1)
    conn = pool.acquire()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@SESSION.lock_wait_timeout, @@SESSION.innodb_lock_wait_timeout")
            assert cur.fetchone() == (LOCK_WAIT_TIMEOUT_S, LOCK_WAIT_TIMEOUT_S)
    finally:
        pool.discard(conn)
    assert LOCK_WAIT_TIMEOUT_S < STATEMENT_TIMEOUT_S


def test_the_pool_replaces_a_connection_idle_for_half_the_server_timeout(db):
    store = Store(db, pool_size=2, server_idle_timeout_s=2)
    try:
        first = store.run_sync(_ping, value=1)
        assert store.pool.opened == 1
        time.sleep(1.1)  # past half the timeout: the server may be about to drop it
        assert store.run_sync(_ping, value=2)[0] == 2
        assert (store.pool.opened, store.pool.discarded) == (2, 1)
        assert store.run_sync(_ping, value=3)[0] == 3  # fresh again: reused, not replaced
        assert store.pool.opened == 2
        time.sleep(2.5)  # past the server's timeout: it has dropped the idle one
        assert store.run_sync(_ping, value=4)[0] == 4
        assert store.statistics().retries == 0, "a connection the server had dropped was handed out"
        assert first[0] == 1
    finally:
        store.close()


@pytest.mark.live  # a listening socket that never answers
def test_a_database_that_accepts_and_never_greets_fails_the_transaction_instead_of_hanging():
    """connect_timeout bounded the TCP connect alone: the greeting was read with no timeout, and the
    thread (which Trio waits for) blocked for good instead of the store giving up with StoreUnavailable."""
    import socket

    from pulse_trio.dburl import parse_database_url

    outcome: list = []
    with socket.socket() as hung:  # the kernel completes the handshake; nobody ever writes a greeting
        hung.bind(("127.0.0.1", 0))
        hung.listen(64)
        config = parse_database_url(f"mysql://u:p@127.0.0.1:{hung.getsockname()[1]}/pulse?connect_timeout=1")
        store = Store(config, pool_size=1, max_attempts=2)

        def run():
            try:
                outcome.append(store.run_sync(_ping, value=1))
            except BaseException as exc:  # the answer looked for
                outcome.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(15)  # two attempts of 1 s each, with room to spare
        # (closing the listening socket resets the pending connections and frees a thread still blocked)
    assert not thread.is_alive(), "run_sync still blocked reading the greeting of a server that never answers"
    assert outcome and isinstance(outcome[0], StoreUnavailable), outcome


def test_a_statement_may_run_longer_than_the_connect_timeout(db):
    """The handshake's bound is lifted once connected: a lock wait or a long statement is not cut short."""
    import dataclasses

    store = Store(dataclasses.replace(db, connect_timeout=0.5), pool_size=1, max_attempts=1)
    try:
        assert store.run_sync(_slow_ping, seconds=1.0) == 0
    finally:
        store.close()


@read_only
def _slow_ping(tx, *, seconds):
    return tx.one("SELECT SLEEP(%s)", (seconds,))[0]


def _two_claims_whose_commit_is_lost(world, db, *, max_attempts: int, then=None) -> None:
    """Two sessions' claims in one batch whose COMMIT lands and whose answer is lost; each gets its own offers."""
    _CommitThenDrop.armed = False
    s = Store(db, pool_size=2, max_attempts=max_attempts, connector=lambda config: _CommitThenDrop(connect(config)))
    try:
        s.run_sync(_ping, value=0)
        a, b = world.worker("q"), world.worker("q")
        for _ in range(6):
            world.submit()
        mine = {w.session_id: new_credentials(2) for w in (a, b)}
        calls = [(assign, {"session_id": sid, "credentials": creds, "now": world.now, "start_timeout_ms": 30_000,
                           "default_lease_ttl_ms": 30_000}) for sid, creds in mine.items()]
        _CommitThenDrop.armed = True
        results = s.run_batch_sync(calls, then=then)
    finally:
        s.close()
    assert [type(r).__name__ for r in results] == ["AssignResult", "AssignResult"], results
    for result, creds in zip(results, mine.values()):
        assert {o.lease_secret for o in result.offers} == {c.lease_secret for c in creds}
    assert world.sql("SELECT COUNT(*) FROM leases") == [(4,)], "the committed claims, and no second one"


def test_a_batch_whose_commit_was_lost_falls_back_to_calls_that_re_read(world, db):
    """The batch's COMMIT landed but its answer was lost and the retries ran out: each call recovers its own."""
    _two_claims_whose_commit_is_lost(world, db, max_attempts=1)


def test_a_batch_whose_re_run_after_a_lost_commit_fails_still_falls_back_to_calls_that_re_read(world, db):
    """The batch's COMMIT landed, its answer was lost, and the re-run failed with an error that is not run again
    (a node turned read-only, a bug in a hook): the fallback must still re-read, or each call does its work twice."""

    def then(tx, results):
        if tx.recovering:
            raise pymysql.err.OperationalError(1290, "The MariaDB server is running with the --read-only option")

    _two_claims_whose_commit_is_lost(world, db, max_attempts=3, then=then)


def _ride_along(world, w, credentials):
    """A finish batch's hooks as the server's ride-along uses them: session rows first, a claim after the finishes."""
    from pulse_trio.store.instance.instances import share_lock_sessions

    seen = []
    rows = {}

    def first(tx):
        rows.update(share_lock_sessions(tx, [w.session_id]))

    def then(tx, results):
        seen.append(results)
        freed = sum(1 for r in results[-1] if not isinstance(r, BaseException) and not r.receipt.duplicate)
        return assign(tx, session_id=w.session_id, credentials=credentials, want=freed, now=world.now,
                      start_timeout_ms=30_000, default_lease_ttl_ms=30_000, held=2 - freed, shared_lock=True,
                      session=rows.get(w.session_id))

    return first, then, seen


def test_a_batch_runs_its_hooks_in_its_transaction_and_appends_the_claim(world, store):
    w = world.worker("q", capacity=2)
    offers = [world.running(w), world.running(w)]
    waiting = world.submit()
    credentials = new_credentials(2)
    first, then, seen = _ride_along(world, w, credentials)
    report = FinishReport("SUCCEEDED", '{"ok":1}', None, None, False)
    calls = [(finish, {"commands": [world.command(w, offers[0], 2, report=report)], "now": world.now})]
    results = store.run_batch_sync(calls, then=then, first=first)
    assert len(results) == 2 and len(seen) == 1
    claim = results[-1]
    assert [o.task.task_id for o in claim.offers] == [waiting]  # one finish freed one slot: one offer
    assert claim.offers[0].lease.lease_id == credentials[0].lease_id
    assert world.sql("SELECT COUNT(*) FROM leases WHERE state IN ('OFFERED', 'RUNNING')") == [(2,)]


def test_a_ride_along_claim_whose_commit_was_lost_is_re_read_with_its_finish(world, lossy):
    w = world.worker("q", capacity=2)
    offers = [world.running(w), world.running(w)]
    world.submit(), world.submit()
    # Submitted at one instant: the pick-up order between them is the task ids'.
    head = world.sql("SELECT task_id FROM tasks WHERE pick_state = 'READY' ORDER BY effective_at, task_id LIMIT 1")
    credentials = new_credentials(2)
    first, then, seen = _ride_along(world, w, credentials)
    report = FinishReport("SUCCEEDED", '{"ok":1}', None, None, False)
    calls = [(finish, {"commands": [world.command(w, offers[0], 2, report=report)], "now": world.now})]
    _CommitThenDrop.armed = True
    results = lossy.run_batch_sync(calls, then=then, first=first)
    assert lossy.statistics().recoveries == 1 and len(seen) == 2  # the re-run ran the claim again
    (ack,), claim = results
    assert not ack.receipt.duplicate, "our own finish, re-read"
    assert [(o.task.task_id,) for o in claim.offers] == head
    assert claim.offers[0].lease_secret == credentials[0].lease_secret
    assert world.sql("SELECT COUNT(*) FROM leases WHERE state = 'OFFERED'") == [(1,)], "no second claim"


def test_a_ride_along_claim_takes_its_session_row_from_the_batchs_shared_lock(world):
    """The row share_lock_sessions read is the claim's: no second read of the session (one SELECT fewer)."""
    from pulse_trio.dburl import connect
    from pulse_trio.store.instance.instances import share_lock_sessions
    from pulse_trio.store.engine.tx import Tx

    w = world.worker("q", capacity=4)
    for _ in range(2):
        world.submit()

    def selects(handed: bool) -> int:
        conn = connect(world.db)
        try:
            with conn.cursor() as cur:
                tx = Tx(cur)
                rows = share_lock_sessions(tx, [w.session_id])
                assert rows[w.session_id].session_id == w.session_id
                counter = "SHOW SESSION STATUS LIKE 'Com_select'"
                cur.execute(counter)
                before = int(cur.fetchone()[1])
                result = assign(tx, session_id=w.session_id, credentials=new_credentials(1), now=world.now,
                                start_timeout_ms=30_000, default_lease_ttl_ms=30_000, held=0, shared_lock=True,
                                paused=(), session=rows[w.session_id] if handed else None)
                cur.execute(counter)
                after = int(cur.fetchone()[1])
                assert len(result.offers) == 1
            conn.rollback()
        finally:
            conn.close()
        return after - before - 1  # the first SHOW counts as a select

    assert selects(handed=True) == selects(handed=False) - 1


def test_a_call_the_database_refuses_in_a_batch_costs_its_neighbours_nothing(world, store):
    """A value too long for its column (DataError, not a duplicate) fails its own call only: the batch
    falls back to one transaction per call, and the other registrations commit with their answers."""
    subs = (SubscribedQueue("q", None),)
    calls = [(register, {"instance": NewInstance(name, subs), "now": world.now})
             for name in ("before", "x" * 200, "after")]  # worker_name is VARCHAR(128)
    before, refused, after = store.run_batch_sync(calls)
    assert isinstance(refused, pymysql.err.DataError), refused
    assert type(before).__name__ == type(after).__name__ == "Registered", (before, after)
    assert world.sql("SELECT worker_name FROM worker_instances ORDER BY worker_name") == [("after",), ("before",)]


def _three_finishes_one_the_database_refuses(world):
    """Three running leases' finishes; the middle lease's revision is at the counter's limit, so its finish's
    ``revision = revision + 1`` is out of range for the column (1690) while the others' are fine."""
    w = world.worker("q")
    offers = [world.running(w) for _ in range(3)]
    bad = offers[1].lease.lease_id
    world.sql("UPDATE leases SET revision = %s WHERE lease_id = %s", (MAX_COUNTER, bad))
    report = FinishReport("SUCCEEDED", '{"ok":1}', None, None, False)
    commands = [world.command(w, o, MAX_COUNTER if o.lease.lease_id == bad else 2, report=report) for o in offers]
    return w, offers, commands


@pytest.mark.parametrize("beside", [False, True], ids=["finishes-alone", "beside-a-start"])
def test_a_finish_the_database_refuses_in_a_batch_costs_the_other_finishes_nothing(world, store, beside):
    """The fallback is per command, not per call: a batch's finishes are one ``finish(commands=[...])`` call,
    and one finish the database refuses must not answer ``internal`` to every other finish of the batch."""
    w, offers, commands = _three_finishes_one_the_database_refuses(world)
    calls = [(finish, {"commands": commands, "now": world.now})]
    if beside:
        calls.insert(0, (start, {"commands": [world.command(w, world.offer(w), 1)], "now": world.now}))
    results = store.run_batch_sync(calls)
    assert len(results) == len(calls)
    if beside:
        assert [type(r).__name__ for r in results[0]] == ["CommandAck"], results[0]
    first, refused, last = results[-1]
    assert isinstance(refused, pymysql.err.MySQLError) and refused.args[0] == 1690, refused
    assert type(first).__name__ == type(last).__name__ == "CommandAck", (first, last)
    assert not first.receipt.duplicate and not last.receipt.duplicate
    assert world.sql("SELECT lease_id, state FROM leases WHERE lease_id IN (%s, %s, %s) ORDER BY lease_id",
                     tuple(o.lease.lease_id for o in offers)) == sorted(
        (o.lease.lease_id, "RUNNING" if i == 1 else "FINISHED") for i, o in enumerate(offers))


def test_a_batch_whose_commit_was_lost_re_reads_each_finish_of_its_fallback(world, db):
    """The batch's COMMIT landed, its answer was lost, and its re-run failed: each finish, run alone in the
    fallback, re-reads and finds its own receipt, an ack that is not the caller's duplicate."""
    w = world.worker("q")
    offers = [world.running(w) for _ in range(3)]
    report = FinishReport("SUCCEEDED", '{"ok":1}', None, None, False)
    commands = [world.command(w, o, 2, report=report) for o in offers]

    def then(tx, results):
        if tx.recovering:
            raise pymysql.err.OperationalError(1290, "The MariaDB server is running with the --read-only option")

    _CommitThenDrop.armed = False
    s = Store(db, pool_size=2, max_attempts=3, connector=lambda config: _CommitThenDrop(connect(config)))
    try:
        s.run_sync(_ping, value=0)
        _CommitThenDrop.armed = True
        (results,) = s.run_batch_sync([(finish, {"commands": commands, "now": world.now})], then=then)
    finally:
        s.close()
    assert [type(r).__name__ for r in results] == ["CommandAck"] * 3, results
    assert not any(r.receipt.duplicate for r in results), "our own finishes, re-read"
    assert world.sql("SELECT state, revision FROM leases") == [("FINISHED", 3)] * 3


@pytest.mark.live  # a port nobody listens on
@pytest.mark.parametrize("shape", ["commands", "calls"])
def test_a_batch_on_a_database_that_is_away_is_given_up_once_not_once_per_command(shape):
    """The per-command fallback of a batch the store gave up on: once a command alone runs out of attempts
    too, the rest get that answer at once. Each waiting its own attempts would hold the lane for the
    batch's size times the retries (and as many connect timeouts), with no worker answered meanwhile;
    a batch of calls (the hellos that arrive together) likewise."""
    import datetime as dt
    import socket

    from pulse_trio.dburl import parse_database_url
    from pulse_trio.store.engine.inputs import FinishCommand

    with socket.socket() as closed:  # a port just freed: connecting is refused at once
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    store = Store(parse_database_url(f"mysql://u:p@127.0.0.1:{port}/pulse?connect_timeout=1"), pool_size=1,
                  max_attempts=2)
    now = dt.datetime.now(dt.UTC)
    report = FinishReport("SUCCEEDED", "{}")
    commands = [FinishCommand("ses_x", f"tsk_{n}", f"lse_{n}", "secret", 2, report) for n in range(50)]
    calls = ([(finish, {"commands": commands, "now": now})] if shape == "commands" else
             [(register, {"instance": NewInstance(f"w{n}", (SubscribedQueue("q"),)), "now": now}) for n in range(50)])
    try:
        results = store.run_batch_sync(calls)
    finally:
        store.close()
    outcomes = results[0] if shape == "commands" else results
    assert len(outcomes) == 50 and all(isinstance(o, StoreUnavailable) for o in outcomes), outcomes
    assert store.statistics().retries == 4, "the batch's two attempts and one command's, not every command's"


def test_a_finish_that_waits_out_its_attempts_on_a_locked_row_costs_the_other_finishes_nothing(world, db, monkeypatch):
    """A command alone that runs out of attempts on a conflict (a row another transaction holds past the lock
    wait, or deadlocks, or a cluster's certification failures) found the database up: the fallback's other
    commands still run, each on its own. Only a give-up on a database that is away answers the rest at once;
    taken for one, a single busy lease answered ``internal`` to every finish queued behind it."""
    from pulse_trio.store.engine import pool

    monkeypatch.setattr(pool, "LOCK_WAIT_TIMEOUT_S", 1)  # the lock wait each attempt spends on the held row
    w = world.worker("q")
    busy, free = world.running(w), world.running(w)
    report = FinishReport("SUCCEEDED", '{"ok":1}', None, None, False)
    commands = [world.command(w, o, 2, report=report) for o in (busy, free)]
    holder = connect(db)
    s = Store(db, pool_size=2, max_attempts=1)
    try:
        with holder.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SELECT revision FROM leases WHERE lease_id = %s FOR UPDATE", (busy.lease.lease_id,))
        (results,) = s.run_batch_sync([(finish, {"commands": commands, "now": world.now})])
    finally:
        holder.rollback()
        holder.close()
        s.close()
    held, other = results
    assert isinstance(held, StoreUnavailable), held
    assert type(other).__name__ == "CommandAck", other
    assert world.sql("SELECT state FROM leases WHERE lease_id = %s", (free.lease.lease_id,)) == [("FINISHED",)]


@pytest.fixture(params=["", "NO_ENGINE_SUBSTITUTION"], ids=["empty", "no-engine-substitution"])
def lenient_sql_mode(request, database_server):
    """The server's global sql_mode made lenient (an older my.cnf's), for sessions opened in the test; restored.

    Only this run's sessions start in it, and the store's pin strict mode themselves.
    """
    with contextlib.closing(connect_node(database_server, database=False)) as admin, admin.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.sql_mode")
        (previous,) = cur.fetchone()
    try:
        with contextlib.closing(connect_node(database_server, database=False)) as admin, admin.cursor() as cur:
            cur.execute("SET GLOBAL sql_mode = %s", (request.param,))
        yield
    finally:
        with contextlib.closing(connect_node(database_server, database=False)) as admin, admin.cursor() as cur:
            cur.execute("SET GLOBAL sql_mode = %s", (previous,))


def test_a_value_too_long_for_its_column_is_refused_whatever_the_servers_sql_mode(lenient_sql_mode, world, db):
    """Without strict mode the server cuts the value short and stores it: the batch fallback and the HTTP 400
    above never see a refusal."""
    store = Store(db, pool_size=1)
    try:
        with pytest.raises(pymysql.err.DataError):  # worker_name is VARCHAR(128)
            store.run_sync(register, instance=NewInstance("x" * 200, (SubscribedQueue("q", None),)), now=world.now)
    finally:
        store.close()
    assert world.sql("SELECT CHAR_LENGTH(worker_name) FROM worker_instances") == [], "a cut worker name was stored"


def test_lost_commit_is_re_read_for_a_cancel(world, lossy):
    """The re-run of a cancel whose COMMIT landed finds the intent it saved itself: changed, not "cancelled before"
    (docs/cancellation.md §3), so the HTTP API still wakes the dispatcher for the freed slot and permit."""
    source = world.submit()
    _CommitThenDrop.armed = True
    text, changed = Client(lossy.config, store=lossy).cancel_json_text(source, reason="stop", requested_by="alice",
                                                                       now=world.now)
    assert lossy.statistics().recoveries == 1
    assert changed, "this call saved the intent: nobody cancelled the task before"
    assert json.loads(text)["state"] == "CANCELLED"
    assert world.sql("SELECT COUNT(*) FROM cancel_intents") == [(1,)]
