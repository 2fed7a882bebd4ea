"""Generated columns that index a row by a set of its chart's states: each as the chart says.

``leases.hold`` is what ``leases_owner`` files a lease under (LIVE for the
states that hold a task, REVOKED for a revoked offer until its holder is told, NULL after any other
end; ``charts.states.LEASE_HOLDS`` derives them from the chart): a start
keeps its lease LIVE, so it never moves the lease's entry. ``tasks.due_state``
is what ``tasks_due`` files a task under: its state while it is one the
promotion timer moves (SCHEDULED), else NULL, so an offer never moves it.
Each column's SQL is evaluated for every state of its chart.
"""

from __future__ import annotations

import datetime as dt

from pulse_trio.charts import CHARTS
from pulse_trio.charts.states import LEASE_HOLDS, LIVE_LEASE_STATES
from pulse_trio.store import NewTask, notify_cancellations, request_cancel, submit
from pulse_trio.store.engine.timer_scan import sources, statement
from pulse_trio.store.engine.tx import db_time
from pulse_trio.store.task import sql as task_sql
from pulse_trio.store.views import sql as views_sql
from pulse_trio.store.views.queries import queue_depths
from sql_support import plan as query_plan


def _filed(world, table: str, column: str, chart: str, **row) -> dict[str, str | None]:
    """Each state of ``chart`` (its rows' states) and what ``table.column``'s SQL makes of it (``row``: other columns)."""
    ((expression,),) = world.sql(
        "SELECT GENERATION_EXPRESSION FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s AND COLUMN_NAME = %s", (table, column))
    states = [s for s in CHARTS[chart].spec.states if s != CHARTS[chart].spec.initial]
    others = "".join(f", %s AS `{name}`" for name in row)
    return {state: world.sql(f"SELECT {expression} FROM (SELECT %s AS `state`{others}) AS r",
                             (state, *row.values()))[0][0]
            for state in states}


def test_every_lease_state_is_filed_as_the_chart_says(world):
    filed = _filed(world, "leases", "hold", "lease", cancel_requested_at=db_time(world.now))
    assert set(LEASE_HOLDS) < set(filed)
    assert filed == {state: LEASE_HOLDS.get(state) for state in filed}
    assert {LEASE_HOLDS[s] for s in LIVE_LEASE_STATES} == {"LIVE"}, "a start keeps the entry where the offer put it"
    told = _filed(world, "leases", "hold", "lease", cancel_requested_at=None)
    assert told == {state: LEASE_HOLDS.get(state) if state in LIVE_LEASE_STATES else None for state in told}, (
        "a revoked offer whose holder was told is filed under nothing")


def test_every_task_state_is_due_only_where_the_promotion_timer_looks(world):
    filed = _filed(world, "tasks", "due_state", "task")
    promoted = sources("task", "promote")
    assert promoted and set(promoted) < set(filed) and "READY" in filed
    assert filed == {state: state if state in promoted else None for state in filed}


def test_the_rows_follow_their_lease_through_start_finish_and_revoke(world):
    w = world.worker("q", capacity=3)
    running, finished = world.running(w), world.running(w)
    world.finish(w, finished, 2)
    world.submit()
    (offered,) = world.assign(w)
    revoked = world.offer(w)
    world.run(request_cancel, task_id=revoked.task.task_id, reason="test")
    rows = dict(world.sql("SELECT lease_id, hold FROM leases"))
    assert rows == {running.lease.lease_id: "LIVE", finished.lease.lease_id: None, offered.lease.lease_id: "LIVE",
                    revoked.lease.lease_id: "REVOKED"}


def test_a_revoked_offer_leaves_its_filing_once_its_holder_is_told(world):
    w = world.worker("q", capacity=2, notify=True)
    told, untold = world.offer(w), world.offer(w)
    world.run(request_cancel, task_id=told.task.task_id, reason="test")
    assert [n.lease_id for n in world.run(notify_cancellations, session_ids=[w.session_id])] == [told.lease.lease_id]
    world.run(request_cancel, task_id=untold.task.task_id, reason="test")
    rows = dict(world.sql("SELECT lease_id, hold FROM leases"))
    assert rows == {told.lease.lease_id: None, untold.lease.lease_id: "REVOKED"}


def _analyze(world, sql: str, args) -> list[dict]:
    return query_plan(world.db, sql, args, "ANALYZE")


def test_promotion_reads_the_due_scheduled_tasks_alone(world):
    """READY tasks have no entry where the promotion timer looks, however many."""
    world.run(submit, tasks=[NewTask("q", "k") for _ in range(300)])
    world.run(submit, tasks=[NewTask("q", "k", due_at=world.now + dt.timedelta(seconds=s)) for s in (1, 2, 60)])
    (plan,) = _analyze(world, statement(task_sql.PROMOTE_SCAN), (db_time(world.now + dt.timedelta(seconds=5)), 10))
    assert plan["key"] == "tasks_due" and float(plan["r_rows"]) == 2, plan


def test_queue_depths_read_the_waiting_tasks_index_only(world):
    """The waiting tasks are counted in tasks_pickup, queue by queue: ended and running ones are not read there."""
    w = world.worker("q", capacity=40)
    world.run(submit, tasks=[NewTask("q", "k") for _ in range(40)])
    for offer in world.assign(w, 40)[:30]:
        world.start(w, offer)
        world.finish(w, offer, 2)
    world.run(submit, tasks=[NewTask(queue, "k") for queue in ("q", "r") for _ in range(5)])
    world.run(submit, tasks=[NewTask("r", "k", due_at=world.now + dt.timedelta(minutes=1))])
    # A long history: tasks ended long ago (written as the finish writes them; no lease needed here).
    history = world.run(submit, tasks=[NewTask("r", "old") for _ in range(3000)])
    world.sql("UPDATE tasks SET state = 'SUCCEEDED', outcome_status = 'SUCCEEDED', finished_at = created_at"
              " WHERE task_id IN %s", (tuple(t.task_id for t in history),))
    world.sql("ANALYZE TABLE tasks")
    rows = _analyze(world, views_sql.QUEUE_DEPTHS, ())
    waiting = [r for r in rows if r["id"] in (1, 2)]
    by_table = {r["table"]: r for r in waiting}
    queues, picks, counted = by_table["<derived2>"], by_table["<derived3>"], by_table["t"]
    assert counted["key"] == "tasks_pickup" and "Using index" in counted["Extra"], rows
    lookups = float(queues["r_rows"]) * float(picks["r_rows"])  # each (queue, pick state): one index range
    assert lookups == 2 * 4 and round(lookups * float(counted["r_rows"])) == 11, rows  # 10 READY, 1 SCHEDULED
    assert float(by_table["tasks"]["r_rows"]) < 100, rows  # finding the queues does not walk the history
    depths = world.store.run_sync(queue_depths, now=world.now)
    assert depths["q"]["states"] == {"READY": 5, "OFFERED": 10, "SUCCEEDED": 30}
    assert depths["r"]["states"] == {"READY": 5, "SCHEDULED": 1, "SUCCEEDED": 3000}
    # What a metrics scrape asks: the waiting and held tasks only, and not one entry of the history read.
    open_rows = _analyze(world, views_sql.QUEUE_DEPTHS_OPEN, ())
    assert all(r["key"] != "tasks_finished" for r in open_rows), open_rows
    assert sum(float(r["r_rows"] or 0) for r in open_rows if r["table"] == "tasks") < 100, open_rows
    open_depths = world.store.run_sync(queue_depths, now=world.now, ended=False)
    assert open_depths["q"]["states"] == {"READY": 5, "OFFERED": 10}
    assert open_depths["r"]["states"] == {"READY": 5, "SCHEDULED": 1}
