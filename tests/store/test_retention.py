"""Retention (task.purge): exactly the tasks that ended before their cutoff go, with all that is theirs.

Times are the world's own (``world.now``), so "older than the retention"
is exact to the microsecond; the rows are inspected straight in the tables.
"""

from __future__ import annotations

import datetime as dt
import threading
import time

from pulse_trio.client import Client
from pulse_trio.dburl import connect
from pulse_trio.store.engine.ids import new_id
from pulse_trio.store import expire, release_after_quarantine, request_cancel, retry, submit
from pulse_trio.store.queue.queues import set_retention
from pulse_trio.store.task.retention import PURGEABLE, DueCount, count_due, purge, retention_plan
from pulse_trio.store.task.tasks import NewTask
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.engine.tx import Tx, db_time
from pulse_trio.store.task import sql as task_sql
from sql_support import index_reads, plan

DAY_MS = 86_400_000


def _finished(world, w, queue: str = "q", status: str = "SUCCEEDED", renewals: int = 1, **fields) -> str:
    """A task that ran to ``status`` at world.now, with a renew receipt of its lease."""
    offer = world.running(w, queue=queue, **fields)
    revision = 2
    for _ in range(renewals):
        world.renew(w, offer, revision)
        revision += 1
    world.finish(w, offer, revision, status=status)
    return offer.task.task_id


def _count(world, table: str, column: str, ids) -> int:
    ids = tuple(ids)
    return world.sql(f"SELECT COUNT(*) FROM {table} WHERE {column} IN %s", (ids,))[0][0] if ids else 0


def _exists(world, task_id: str) -> bool:
    return bool(world.sql("SELECT 1 FROM tasks WHERE task_id = %s", (task_id,)))


def _purge_all(world, *, limit: int = 100, older_than_ms: int | None = None) -> list:
    batches = []
    for cut in world.store.run_sync(retention_plan, now=world.now, older_than_ms=older_than_ms):
        after = None  # as serve's pass does: each batch starts where the previous one stopped
        while True:
            batch = world.store.run_sync(purge, queue=cut.queue, before=cut.before, limit=limit, after=after)
            batches.append(batch)
            if batch.selected < limit:
                break
            after = batch.last
    return batches


def test_exactly_the_tasks_past_their_retention_go_with_their_leases_receipts_and_intents(world):
    world.setting("task_retention", DAY_MS)
    w = world.worker("q", "own", capacity=50, keys=True)
    old = [_finished(world, w, status=s) for s in ("SUCCEEDED", "FAILED", "UNKNOWN")]
    cancelled = world.submit("q")
    world.run(request_cancel, task_id=cancelled)  # CANCELLED at once, with a RESOLVED intent
    old.append(cancelled)
    old.append(_finished(world, w, concurrency_key="acct"))  # a RELEASED key permit
    own_old = _finished(world, w, queue="own")
    world.advance(DAY_MS // 2)
    world.run(set_retention, queue="own", retention_ms=3 * DAY_MS // 4, updated_by="test")
    own_young = _finished(world, w, queue="own")
    young = _finished(world, w)
    running = world.running(w, queue="q")
    waiting = world.submit("q")
    world.advance(DAY_MS // 2 + 1)
    leases = [r[0] for r in world.sql("SELECT lease_id FROM leases WHERE task_id IN %s", (tuple(old),))]
    assert leases and _count(world, "renew_receipts", "lease_id", leases) == 4
    assert _count(world, "cancel_intents", "task_id", old) == 1
    assert _count(world, "key_permits", "lease_id", leases) == 1

    plan = {c.queue: c for c in world.store.run_sync(retention_plan, now=world.now)}
    assert (plan["q"].retention_ms, plan["q"].own, plan["own"].retention_ms, plan["own"].own) == (
        DAY_MS, False, 3 * DAY_MS // 4, True)
    assert world.store.run_sync(count_due, queue="q", before=plan["q"].before) == DueCount(len(old), 0)
    _purge_all(world)

    assert not any(_exists(world, t) for t in [*old, own_old])
    assert all(_exists(world, t) for t in [young, own_young, waiting, running.task.task_id])
    for table, column, ids in (("leases", "lease_id", leases), ("renew_receipts", "lease_id", leases),
                               ("key_permits", "lease_id", leases), ("cancel_intents", "task_id", old)):
        assert _count(world, table, column, ids) == 0, table
    assert world.sql("SELECT last_token FROM key_counters WHERE concurrency_key = 'acct'") == [(1,)]
    # The running task and its lease are untouched.
    assert world.sql("SELECT state FROM leases WHERE lease_id = %s", (running.lease.lease_id,)) == [("RUNNING",)]


def test_it_goes_in_batches_of_the_limit(world):
    w = world.worker("q", capacity=20)
    done = [_finished(world, w, renewals=0) for _ in range(7)]
    world.advance(1_000)
    batches = _purge_all(world, limit=3, older_than_ms=500)
    assert [b.tasks for b in batches] == [3, 3, 1]
    assert [b.deleted["leases"] for b in batches] == [3, 3, 1]
    assert not any(_exists(world, t) for t in done)


def test_two_purges_at_once_take_disjoint_batches_and_never_wait(world, db):
    w = world.worker("q", capacity=20)
    done = [_finished(world, w, renewals=0) for _ in range(6)]
    world.advance(1_000)
    before = world.now - dt.timedelta(milliseconds=500)
    other = connect(db)
    try:
        with other.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            cur.execute("SET SESSION innodb_lock_wait_timeout = 2")
            other.begin()
            first = purge(Tx(cur), queue="q", before=before, limit=4)  # holds its 4 rows, uncommitted
            assert first.tasks == 4
            second = world.store.run_sync(purge, queue="q", before=before, limit=4)
            assert (second.selected, second.tasks) == (2, 2)  # the other two, without waiting
            # A claim does not wait on the purge either: it never reads a terminal task.
            world.submit("q")
            assert len(world.assign(w)) == 1
        other.commit()
    finally:
        other.close()
    assert not any(_exists(world, t) for t in done)


def test_between_is_called_before_each_delete_and_the_commit_and_a_whole_task_runs_meanwhile(world):
    w = world.worker("q", capacity=20)
    done = [_finished(world, w) for _ in range(3)]  # each with a lease and a renew receipt
    world.advance(1_000)
    before = world.now - dt.timedelta(milliseconds=500)
    still_there: list[int] = []
    fresh: list[str] = []

    def between() -> None:
        # The batch's rows are locked and not yet deleted for everyone else (READ COMMITTED)...
        still_there.append(_count(world, "tasks", "task_id", done))
        if not fresh:
            # ... and a task's whole life (submit, claim, start, renew, finish) goes meanwhile, on other
            # connections, without waiting for the purge's locks (a wait would stop this test for 50 s).
            started = time.monotonic()
            fresh.append(_finished(world, w))
            assert time.monotonic() - started < 5

    batch = world.store.run_sync(purge, queue="q", before=before, limit=10, between=between)
    assert batch.deleted == {"renew_receipts": 3, "key_permits": 0, "leases": 3, "cancel_intents": 0, "tasks": 3}
    assert still_there == [3, 3, 3, 3]  # before the receipts, the leases, the tasks, and the commit
    assert not any(_exists(world, t) for t in done)
    assert _exists(world, fresh[0]) and world.task(fresh[0]).task.state == "SUCCEEDED"


def test_a_chunked_batch_deletes_chunk_by_chunk_in_one_transaction(world):
    w = world.worker("q", capacity=20)
    done = [_finished(world, w, renewals=0) for _ in range(7)]
    world.advance(1_000)
    before = world.now - dt.timedelta(milliseconds=500)
    still_there: list[int] = []
    batch = world.store.run_sync(purge, queue="q", before=before, limit=10, chunk=3,
                                 between=lambda: still_there.append(_count(world, "tasks", "task_id", done)))
    assert (batch.selected, batch.tasks, batch.deleted["leases"], batch.held) == (7, 7, 7, 0)
    # Chunks of 3, 3 and 1, each: before the receipts, the leases and the tasks; between the chunks; before the
    # one COMMIT. Nothing is gone for anyone else until then.
    assert still_there == [7] * (3 * 3 + 2 + 1)
    assert not any(_exists(world, t) for t in done)
    # A chunked batch that fills its limit stops where its last chunk stopped, as an unchunked one does.
    more = [_finished(world, w, renewals=0) for _ in range(5)]
    world.advance(1_000)
    before = world.now - dt.timedelta(milliseconds=500)
    first = world.store.run_sync(purge, queue="q", before=before, limit=4, chunk=3)
    assert (first.selected, first.tasks) == (4, 4) and first.last is not None and first.last.task_id in more
    rest = world.store.run_sync(purge, queue="q", before=before, limit=4, chunk=3, after=first.last)
    assert (rest.selected, rest.tasks) == (1, 1)
    assert not any(_exists(world, t) for t in more)


def test_a_pass_goes_on_from_where_its_last_batch_stopped_across_states_and_past_locked_rows(world, db):
    w = world.worker("q", capacity=20)
    done = []
    for status in ("SUCCEEDED", "SUCCEEDED", "SUCCEEDED", "FAILED", "FAILED"):
        done.append(_finished(world, w, status=status, renewals=0))
        world.advance(10)
    world.advance(1_000)
    before = world.now - dt.timedelta(milliseconds=500)
    other = connect(db)
    try:
        with other.cursor() as cur:
            other.begin()
            cur.execute("SELECT task_id FROM tasks WHERE task_id = %s FOR UPDATE", (done[0],))  # another purge's row
            first = world.store.run_sync(purge, queue="q", before=before, limit=2)
            assert (first.selected, first.tasks, first.last.status, first.last.task_id) == (
                2, 2, "SUCCEEDED", done[2])  # the locked one skipped, the next two in finished_at order
            second = world.store.run_sync(purge, queue="q", before=before, limit=2, after=first.last)
            assert (second.selected, second.last.status, second.last.task_id) == (2, "FAILED", done[4])
            third = world.store.run_sync(purge, queue="q", before=before, limit=2, after=second.last)
            assert (third.selected, third.tasks, third.last) == (0, 0, None)  # nothing after it: the pass ends
        other.commit()
    finally:
        other.close()
    assert [_exists(world, t) for t in done] == [True, False, False, False, False]
    assert [b.tasks for b in _purge_all(world, limit=2, older_than_ms=500)] == [1]  # the next pass takes it


def test_a_task_whose_permit_is_still_quarantined_waits_for_a_later_pass(world):
    w = world.worker("q", keys=True)
    world.running(w, concurrency_key="acct", lease_ttl_ms=10_000)
    world.advance(10_000)
    world.run(expire)  # UNKNOWN, its permit QUARANTINED for the lease ttl
    (lost,) = [r[0] for r in world.sql("SELECT task_id FROM tasks WHERE state = 'UNKNOWN'")]
    world.advance(5_000)
    (batch,) = _purge_all(world, older_than_ms=1_000)
    assert (batch.selected, batch.held, batch.tasks) == (1, 1, 0) and _exists(world, lost)
    world.advance(5_000)
    world.run(release_after_quarantine)
    _purge_all(world, older_than_ms=1_000)
    assert not _exists(world, lost)
    assert world.sql("SELECT outstanding FROM key_counters WHERE concurrency_key = 'acct'") == [(0,)]


def test_a_dry_run_counts_what_the_purge_would_delete_and_holds_apart_what_it_would_leave(world, db):
    """docs/operations.md §10: ``task purge --dry-run`` counts what a purge would delete now; a task whose
    key permit is still quarantined is past its retention but stays, so it is counted as held, not due."""
    w = world.worker("q", capacity=10, keys=True)
    world.running(w, concurrency_key="acct", lease_ttl_ms=10_000)
    world.advance(10_000)
    world.run(expire)  # UNKNOWN, its permit QUARANTINED for the lease ttl
    gone = [_finished(world, w, renewals=0) for _ in range(2)]
    world.advance(2_000)
    with Client(db) as client:
        dry = client.purge(older_than=1, dry_run=True, now=world.now)
        real = client.purge(older_than=1, now=world.now)
    assert (real["purged"]["tasks"], real["queues"]["q"]["held"]) == (2, 1)
    assert (dry["due"], dry["queues"]["q"]["due"]) == ({"tasks": 2}, 2)  # the two the purge deleted
    assert dry["queues"]["q"]["held"] == 1
    assert not any(_exists(world, t) for t in gone)


def test_a_reader_racing_the_purge_sees_the_whole_ended_task_or_none_never_one_without_its_result(world, db):
    """docs/tasks.md §8: a task the purge takes while it is read (a waiter's GET, task show) answers with its
    attempts and result, or not found; never SUCCEEDED with no attempt and a null result."""
    w = world.worker("q", capacity=100)
    done = []
    for _ in range(60):
        offer = world.running(w)
        world.finish(w, offer, 2, result='{"paid":42}')
        done.append(offer.task.task_id)
        world.advance(1)
    world.advance(1_000)
    before = world.now - dt.timedelta(milliseconds=500)
    purger = Store(db, pool_size=1)
    stop = threading.Event()
    read_once = threading.Semaphore(0)  # released by each task's first read: its purge then races the next reads

    def one_task_per_commit() -> None:  # in finished_at order: the order the reader reads them in
        try:
            while (not stop.is_set() and read_once.acquire(timeout=10)
                   and purger.run_sync(purge, queue="q", before=before, limit=1).selected):
                pass
        finally:
            stop.set()

    thread = threading.Thread(target=one_task_per_commit)
    thread.start()
    torn, whole = [], 0
    try:
        for task_id in done:  # each read again and again until the purge has taken it
            first = True
            while (view := world.task(task_id)) is not None:
                if view.outcome is None or view.outcome.result_json != '{"paid":42}' or len(view.attempts) != 1:
                    torn.append((task_id, view.outcome, len(view.attempts)))
                else:
                    whole += 1
                if first:
                    read_once.release()
                    first = False
    finally:
        stop.set()
        read_once.release()  # a purger waiting for a next task has none
        thread.join()
        purger.close()
    assert not torn, (len(torn), torn[:2])
    assert whole and not any(_exists(world, t) for t in done)  # it did read them whole, and they are gone


def test_lineage_and_idempotency_keys_once_their_source_is_gone(world):
    w = world.worker("q", capacity=5)
    source = _finished(world, w, status="FAILED", renewals=0, idempotency_key="order-1")
    copy = world.run(retry, source_task_id=source)
    world.advance(1_000)
    _purge_all(world, older_than_ms=500)  # the source ended; its retry is READY
    assert not _exists(world, source)
    view = world.task(copy.task_id)
    assert view.task.retry_of == source  # the lineage names a task that no longer exists
    assert world.task(source) is None
    # The key is free again: a submit with it makes a new task (the idempotency window is the retention).
    (again,) = world.run(submit, tasks=[NewTask("q", "k", idempotency_key="order-1")])
    assert again.created and again.task_id not in (source, copy.task_id)


def _re_run_retry(world, db, source: str, new_task_id: str):
    """``retry`` run again as the store re-runs it after a COMMIT whose answer was lost (tx.recovering)."""
    again = connect(db)
    try:
        with again.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            again.begin()
            return retry(Tx(cur, recovering=True), source_task_id=source, now=world.now, new_task_id=new_task_id)
    finally:
        again.rollback()
        again.close()


def test_a_retry_whose_commit_answer_was_lost_finds_itself_once_the_purge_took_its_source(world, db):
    """docs/tasks.md §8: a manual retry answers the retry it made. Its COMMIT landed, the answer was lost, and
    the purge took the (long ended) source before the store ran the retry again (tx.recovering): the re-run
    must answer the retry it made, not task_not_found for a retry that exists and will run."""
    w = world.worker("q", capacity=5)
    source = _finished(world, w, status="FAILED", renewals=0)
    world.advance(1_000)
    made = world.run(retry, source_task_id=source, new_task_id=new_id("tsk"))
    _purge_all(world, older_than_ms=500)  # the source ended; its retry is READY
    assert not _exists(world, source) and _exists(world, made.task_id)
    rerun = _re_run_retry(world, db, source, made.task_id)
    assert (rerun.task_id, rerun.created) == (made.task_id, True), rerun
    # Without a lost COMMIT, retrying a purged source is refused as before (the id it would make is new).
    refused = world.run(retry, source_task_id=source)
    assert getattr(refused, "code", None) == "task_not_found", refused


def test_a_retry_re_run_takes_as_its_own_only_the_retry_with_its_pre_made_id(world, db):
    """A re-run's first run may not have committed: a retry another call made is not its own, whether its
    source is there (retried before) or purged since (task_not_found); and a call that is not a re-run
    makes nothing its own, whatever id it brings."""
    w = world.worker("q", capacity=5)
    source = _finished(world, w, status="FAILED", renewals=0)
    world.advance(1_000)
    made = world.run(retry, source_task_id=source, new_task_id=new_id("tsk"))
    other = _re_run_retry(world, db, source, new_id("tsk"))
    assert (other.task_id, other.created) == (made.task_id, False), other
    same_id = world.run(retry, source_task_id=source, new_task_id=made.task_id)
    assert (same_id.task_id, same_id.created) == (made.task_id, False), same_id
    _purge_all(world, older_than_ms=500)
    assert not _exists(world, source) and _exists(world, made.task_id)
    for refused in (_re_run_retry(world, db, source, new_id("tsk")),
                    world.run(retry, source_task_id=source, new_task_id=made.task_id)):
        assert getattr(refused, "code", None) == "task_not_found", refused


def test_a_source_whose_retry_was_purged_can_be_retried_again(world):
    w = world.worker("q", capacity=5)
    source = _finished(world, w, status="FAILED", renewals=0)
    world.advance(10_000)
    first = world.run(retry, source_task_id=source)
    (offer,) = world.assign(w)
    world.start(w, offer)
    world.finish(w, offer, 2)
    world.sql("UPDATE tasks SET finished_at = %s WHERE task_id = %s",  # the retry ended long before the source
              (world.now.replace(tzinfo=None) - dt.timedelta(days=30), first.task_id))
    _purge_all(world, older_than_ms=DAY_MS)
    assert _exists(world, source) and not _exists(world, first.task_id)
    assert world.task(source).retried_by is None
    again = world.run(retry, source_task_id=source)
    assert again.created and again.task_id != first.task_id


def test_the_chart_names_what_a_purge_takes(world):
    assert PURGEABLE == ("SUCCEEDED", "FAILED", "UNKNOWN", "CANCELLED")
    w = world.worker("q")
    offer = world.running(w)
    world.advance(1_000)
    assert _purge_all(world, older_than_ms=1) == []  # nothing ended: no queue to plan for
    assert _exists(world, offer.task.task_id)


def test_the_plan_finds_the_queues_with_ended_tasks_without_reading_each_ended_task(world):
    """Every pass asks which queues have ended tasks; with a week of history that is millions of
    rows, so the question reads an index entry or two per queue, not one per ended task."""
    w = world.worker("q", "other", capacity=60)
    for queue in ("q", "other"):
        _finished(world, w, queue=queue, renewals=0)
    few_plan, few = index_reads(world.db, lambda tx: retention_plan(tx, now=world.now))
    for i in range(40):
        _finished(world, w, queue=("q", "other")[i % 2], renewals=0)
    many_plan, many = index_reads(world.db, lambda tx: retention_plan(tx, now=world.now))
    assert [c.queue for c in many_plan] == [c.queue for c in few_plan] == ["other", "q"]
    assert many < few + 5, (few, many)


def test_the_dry_run_reads_held_rows_through_their_state_and_a_batch_through_its_task_ids(world):
    """The dry run counts every held task of the range: left to itself, MariaDB scans the whole leases table
    for the live ones, so the rule forces each reason's state index (``leases_due``, ``key_permits_due``). A
    purge's batch asks about its own tasks only, through their ids, and no state index."""
    w = world.worker("q", capacity=4, keys=True)
    for i in range(4):
        world.running(w, concurrency_key=f"key-{i}")
    counted = plan(world.db, task_sql.COUNT_DUE, ("q", db_time(world.now)))
    keys = {(r["table"], r["key"]) for r in counted if r["table"] in ("l", "p")}
    assert {("l", "leases_due"), ("p", "key_permits_due")} <= keys, counted
    batch = plan(world.db, task_sql.INTENTS_AND_HELD_OF_TASKS, {"batch": ("tsk_a", "tsk_b")})
    held = {r["table"]: r["key"] for r in batch if r["table"] in ("l", "p", "c")}
    assert held == {"l": "leases_task", "p": "PRIMARY", "c": "PRIMARY"}, batch
