"""Chart `task`: submit, deduplication, scheduling, promote, the pick-up index."""

from __future__ import annotations

import datetime as dt

import pytest

from pulse_trio.dburl import connect
from pulse_trio.store import NewTask, pickup_sql, promote, submit
from pulse_trio.store.engine.tx import Tx
from sql_support import index_reads, purge_held_back
from sql_support import plan as query_plan


def test_submit_due_is_ready_future_is_scheduled(world):
    ready = world.submit()
    later = world.submit(due_at=world.now + dt.timedelta(seconds=5))
    assert world.task(ready).task.state == "READY"
    assert world.task(later).task.state == "SCHEDULED"


def test_payload_is_stored_as_exact_text(world):
    text = '{"n": 1.000000000000000000001, "big": 123456789012345678901234567890, "s": "\\u00e9"}'
    task_id = world.submit(payload_json=text)
    assert world.task(task_id).task.payload == text
    assert f'"payload":{text}' in world.task(task_id).as_json_text()


def test_same_idempotency_key_in_the_same_queue_returns_the_existing_task(world):
    first = world.run(submit, tasks=[NewTask("q", "k", idempotency_key="invoice-1")])[0]
    second = world.run(submit, tasks=[NewTask("q", "k", idempotency_key="invoice-1", payload_json='{"x":2}')])[0]
    other_queue = world.run(submit, tasks=[NewTask("r", "k", idempotency_key="invoice-1")])[0]
    assert first.created and not second.created and second.task_id == first.task_id
    assert other_queue.created and other_queue.task_id != first.task_id
    assert world.sql("SELECT COUNT(*) FROM tasks") == [(2,)]


def test_batch_submit_with_a_duplicate_inside(world):
    world.run(submit, tasks=[NewTask("q", "k", idempotency_key="dup")])
    results = world.run(submit, tasks=[NewTask("q", "k"), NewTask("q", "k", idempotency_key="dup"), NewTask("q", "k")])
    assert [r.created for r in results] == [True, False, True]


def test_a_batch_submit_is_one_insert_statement(world):
    """PyMySQL folds executemany into one multi-row INSERT only when every value is a placeholder.

    A literal among the VALUES (there was an ``attempt`` of 0) made it send
    one INSERT per task: submits of 500 cost 500 statements.
    """
    conn = connect(world.db)
    try:
        with conn.cursor() as cur:
            before = _com_insert(cur)
            submitted = submit(Tx(cur), tasks=[NewTask("q", "k") for _ in range(50)], now=world.now)
            after = _com_insert(cur)
        conn.commit()
    finally:
        conn.close()
    assert after - before == 1
    assert len(submitted) == 50 and all(s.created for s in submitted)
    assert world.sql("SELECT COUNT(*), MIN(attempt), MAX(attempt) FROM tasks") == [(50, 0, 0)]


def _com_insert(cur) -> int:
    cur.execute("SHOW SESSION STATUS LIKE 'Com_insert'")
    return int(cur.fetchone()[1])


def test_default_idempotency_key_is_the_task_id(world):
    task_id = world.submit()
    assert world.task(task_id).task.idempotency_key == task_id


def test_effective_at_is_due_minus_priority_times_step(world):
    (r,) = world.run(submit, tasks=[NewTask("q", "k", priority=7)])  # the cluster's default step, 30 s
    ((due, eff),) = world.sql("SELECT due_at, effective_at FROM tasks WHERE task_id = %s", (r.task_id,))
    assert due - eff == dt.timedelta(seconds=210)


@pytest.mark.parametrize("bad", [
    dict(queue="Bad"), dict(kind=""), dict(priority=10), dict(priority=True), dict(payload_json="x" * (256 * 1024 + 1)),
    dict(concurrency_key=""), dict(concurrency_key="a b"), dict(max_attempts=0), dict(concurrency_limit=0),
])
def test_new_task_validation(bad):
    fields = dict(queue="q", kind="k")
    fields.update(bad)
    with pytest.raises(ValueError):
        NewTask(**fields)


def test_promote_moves_due_scheduled_tasks_only(world):
    soon = world.submit(due_at=world.now + dt.timedelta(seconds=1))
    later = world.submit(due_at=world.now + dt.timedelta(seconds=10))
    assert world.run(promote).count == 0
    world.advance(1000)
    result = world.run(promote)
    assert result.count == 1 and result.task_ids == (soon,)
    assert world.task(soon).task.state == "READY" and world.task(later).task.state == "SCHEDULED"


def test_promote_batches(world):
    for _ in range(5):
        world.submit(due_at=world.now + dt.timedelta(seconds=1))
    world.advance(1000)
    first = world.run(promote, limit=3)
    assert first.count == 3 and first.more
    assert world.run(promote, limit=3).count == 2


def test_promote_reads_the_due_entries_only_while_purge_lags(world):
    """The promotion reads ``tasks_due`` from its first entry up to ``now``, never the tasks due later.

    The tasks it promoted leave their entries behind as delete marks until InnoDB purges them, which
    a long transaction (a backup's snapshot) holds back. (Counted in the range's estimate while the
    statistics still counted them SCHEDULED, they once made MariaDB read every SCHEDULED task's entry,
    those due tomorrow too, through a ref on the state: the range looked dearer than a table scan.)"""
    day = dt.timedelta(days=1)
    world.run(submit, tasks=[NewTask("q", "k", due_at=world.now + dt.timedelta(seconds=1)) for _ in range(1000)])
    world.run(submit, tasks=[NewTask("q", "k", due_at=world.now + day) for _ in range(1000)])
    world.sql("ANALYZE TABLE tasks")  # the statistics as the server's own recount takes them, at some point
    with purge_held_back(world.db):  # what a snapshot may still see, purge keeps
        world.advance(1000)
        while world.run(promote, limit=500).more:
            pass
        due = world.submit(due_at=world.now + dt.timedelta(seconds=1))
        world.advance(1000)
        done, read = index_reads(world.db, lambda tx: promote(tx, now=world.now))
        assert done.task_ids == (due,)
        assert read < 20, read  # not the thousand entries of tomorrow's tasks


def _analyze(world, sql, args):
    """MariaDB's ANALYZE: the plan plus what running it really read (r_rows)."""
    (plan,) = _explain(world, sql, args, verb="ANALYZE")
    return plan


def _explain(world, sql, args, verb="EXPLAIN"):
    return query_plan(world.db, sql, args, verb)


@pytest.mark.parametrize("variant", [
    dict(pick="READY"), dict(pick="KEYED"), dict(paged=True, pick="READY"), dict(paged=True, pick="KEYED"),
    dict(by_kind=True, pick="READY"), dict(by_kind=True, paged=True, pick="KEYED"),
])
def test_pickup_uses_the_index_in_order_by_direction(world, variant):
    """The claim query reads its pick-up index in ORDER BY order: no filesort (docs/storage.md §6)."""
    world.run(submit, tasks=[NewTask("q", "k", priority=i % 10) for i in range(200)])
    world.run(submit, tasks=[NewTask("q", "k", concurrency_key=f"c{i}") for i in range(50)])
    world.run(submit, tasks=[NewTask("q", "other-kind") for _ in range(200)])
    world.run(submit, tasks=[NewTask("other", "k") for _ in range(50)])
    variant = dict(variant)
    args: list = ["q", variant.pop("pick")]
    if variant.get("by_kind"):
        args.append("k")
    if variant.get("paged"):
        args += [world.now, world.now, "tsk_0"]
    args.append(10)
    (plan,) = _explain(world, pickup_sql(**variant), args)
    assert plan["key"] == ("tasks_pickup_kind" if variant.get("by_kind") else "tasks_pickup"), plan
    assert "filesort" not in (plan["Extra"] or "").lower(), plan


def test_a_backlog_of_another_kind_is_not_scanned_by_a_kind_subscription(world):
    """Pick-up by kind reads only that kind's index range: rows examined stay at the page size."""
    world.run(submit, tasks=[NewTask("q", "backlog") for _ in range(2000)])
    world.run(submit, tasks=[NewTask("q", "k") for _ in range(20)])
    plan = _analyze(world, pickup_sql(by_kind=True), ["q", "READY", "k", 10])
    assert plan["key"] == "tasks_pickup_kind", plan
    assert float(plan["r_rows"]) <= 10, plan


def test_a_subscription_naming_many_kinds_reads_no_other_kind_and_about_a_page_of_rows(world):
    """Every named kind is its own ordered range (one statement): a backlog of others is never walked."""
    from pulse_trio.store.lease.assign import SHARED_PAGES_FROM, Read, pickup_statement

    kinds = [f"k{i}" for i in range(3 * SHARED_PAGES_FROM)]
    world.run(submit, tasks=[NewTask("q", "backlog") for _ in range(3000)])
    wanted = world.run(submit, tasks=[NewTask("q", kind) for kind in kinds for _ in range(3)])
    reads: list[Read] = [(("q", kind, "READY"), None) for kind in kinds]
    sql, args = pickup_statement(reads, 1)
    rows = _explain(world, sql, args, verb="ANALYZE")
    assert {r["key"] for r in rows if r["table"] == "t"} == {"tasks_pickup_kind"}, rows
    assert sum(float(r["r_rows"]) for r in rows if r["table"] == "t") <= len(kinds), rows
    # and the claim itself: a session naming them all gets them in pick-up order, past the backlog
    w = world.worker("q", kinds={"q": kinds})
    offers = world.assign(w, 10)
    # one submit, one effective_at: pick-up order is task_id order
    assert [o.task.task_id for o in offers] == sorted(r.task_id for r in wanted)[:10]


def test_a_session_without_keys_never_reads_a_backlog_of_keyed_tasks(world):
    """READY keyed tasks have their own pick_state range (KEYED): a claim for unkeyed work reads past none."""
    world.run(submit, tasks=[NewTask("q", "k", concurrency_key=f"c{i % 50}") for i in range(3000)])
    world.advance(1)
    plain = world.run(submit, tasks=[NewTask("q", "k") for _ in range(3)])
    plan = _analyze(world, pickup_sql(), ["q", "READY", 10])
    assert plan["key"] == "tasks_pickup" and float(plan["r_rows"]) <= 3, plan
    w = world.worker("q")
    assert [o.task.task_id for o in world.assign(w, 5)] == sorted(r.task_id for r in plain)


def test_pickup_explain_in_docs_matches():
    """docs/statecharts/README.md shows the pick-up query; keep it the one that runs."""
    from pathlib import Path

    readme = Path(__file__).parents[2] / "docs" / "statecharts" / "README.md"
    assert "FORCE INDEX (tasks_pickup)" in readme.read_text()
