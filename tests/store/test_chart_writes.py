"""Every declared (trigger, source) of every persistent chart ends in the state the chart names.

A row of each chart is made the ordinary way, put into each source state,
and moved with the one writer (``chart_write.move``) inside its trigger's
transaction: the row must end in the chart's destination. Every pair the
chart does not declare is refused with ``UndeclaredTransition`` and the row
is left as it was. Transitions from ``NONE`` insert their row; the
functions that do so are checked against the chart at the end.
"""

from __future__ import annotations

import re
from pathlib import Path

import pymysql
import pytest
from pymysql.constants import CLIENT

from pulse_trio.charts import CHARTS, persistent_charts
from pulse_trio.dburl import connect
from pulse_trio.client.schedules import build_schedule
from pulse_trio.store import NewTask, request_cancel, retry, submit
from pulse_trio.store.schedule.schedules import create as create_schedule
from pulse_trio.store.engine.chart_write import TABLES, UndeclaredTransition, key_index, move
from pulse_trio.store.queue.queues import pause as pause_queue, set_retention
from pulse_trio.store.queue.fairness import set_weight, share_id
from pulse_trio.store.engine.tx import Tx, UnregisteredWrite

ROOT = Path(__file__).parents[2]
NODE_ID = "nod_" + "C" * 26


def _pairs() -> list[tuple[str, str]]:
    return [(c.name, trigger) for c in persistent_charts() if c.name in TABLES for trigger in c.spec.triggers]


def test_every_persistent_chart_has_a_table():
    assert sorted(c.name for c in persistent_charts()) == sorted(TABLES)


def test_every_key_a_move_names_its_index_by_is_that_indexs_first_column(world):
    """Moves say which index finds their rows (FORCE INDEX): each named index exists and starts with the key."""
    first_columns = {(table, index): column for table, index, column in world.sql(
        "SELECT table_name, index_name, column_name FROM information_schema.statistics"
        " WHERE table_schema = DATABASE() AND seq_in_index = 1")}
    # Each chart's key, and the other keys moves name: the lean lease key's first column, the instance id.
    keys = {*TABLES.values(), ("leases", "lease_id"), ("worker_instances", "instance_id")}
    for table, key in keys:
        assert first_columns.get((table, key_index(table, key))) == key, (table, key, key_index(table, key))


def _specimen(world, chart: str) -> str:
    """The key of one row of ``chart``, made through the store's own functions where it can be."""
    if chart == "node":
        world.sql("INSERT INTO server_nodes (node_id, state, host, pid, lapse_ms, started_at, heartbeat_at,"
                  " expires_at) VALUES (%s, 'ALIVE', 'h', 1, 1000, %s, %s, %s)", (NODE_ID, world.now, world.now,
                                                                                 world.now))
        return NODE_ID
    if chart == "queue":
        change = world.run(pause_queue, queue="q-chart", paused_by="test")
        return change.control.queue
    if chart == "schedule":
        return _schedule(world)
    if chart == "cluster_setting":  # migration 0009 made a row for each setting it knew
        ((name,),) = world.sql("SELECT name FROM cluster_settings ORDER BY name LIMIT 1")
        return name
    if chart == "fair_share":
        world.submit(fairness_key="tenant-1")
        return share_id("q", "tenant-1")
    if chart == "fairness_weight":
        world.run(set_weight, fairness_key="tenant-1", weight=3, updated_by="test")
        return "tenant-1"
    w = world.worker("q", keys=True)
    if chart == "instance":
        return w.session_id
    offer = world.offer(w, concurrency_key="key-1")
    if chart in ("task", "cancellation"):
        task_id = offer.task.task_id
        if chart == "cancellation":
            world.start(w, offer)
            world.run(request_cancel, task_id=task_id)
        return task_id
    return offer.lease.lease_id  # lease and key_permit share the key


def _schedule(world, name: str = "specimen") -> str:
    spec = build_schedule(name=name, queue="q", kind="k", interval=60)
    return world.run(create_schedule, schedule=spec, created_by="test").schedule_id


def _state(world, chart: str, key: str) -> str:
    table, column = TABLES[chart]
    ((state,),) = world.sql(f"SELECT state FROM {table} WHERE {column} = %s", (key,))
    return state


def _move(world, chart: str, trigger: str, key: str, source: str, dest: str | None) -> str:
    # FOUND_ROWS: a self-loop that changes no other column still counts its row as matched.
    conn = pymysql.connect(**world.db.connect_kwargs(), client_flag=CLIENT.FOUND_ROWS)
    try:
        with conn.cursor() as cur:
            tx = Tx(cur)
            tx.enter(f"{chart}.{trigger}")
            try:
                return move(tx, chart, trigger, [key], source=source, dest=dest)
            finally:
                tx.leave()
                conn.commit()
    finally:
        conn.close()


@pytest.mark.parametrize("chart,trigger", _pairs())
def test_declared_pairs_end_in_the_charts_destination_and_others_are_refused(world, chart, trigger):
    c = CHARTS[chart]
    table, column = TABLES[chart]
    key = _specimen(world, chart)
    for source in (s for s in c.spec.states if s != "NONE"):
        dests = sorted(c.dests(trigger, source))
        world.sql(f"UPDATE {table} SET state = %s WHERE {column} = %s", (source, key))
        if not dests:
            with pytest.raises(UndeclaredTransition):
                _move(world, chart, trigger, key, source, None)
            assert _state(world, chart, key) == source, (trigger, source)
            continue
        for dest in dests:
            world.sql(f"UPDATE {table} SET state = %s WHERE {column} = %s", (source, key))
            # With one destination the chart supplies it; with several the caller names decide's choice.
            assert _move(world, chart, trigger, key, source, None if len(dests) == 1 else dest) == dest
            assert _state(world, chart, key) == dest, (trigger, source)
        for other in (s for s in c.spec.states if s not in dests):
            world.sql(f"UPDATE {table} SET state = %s WHERE {column} = %s", (source, key))
            with pytest.raises(UndeclaredTransition):
                _move(world, chart, trigger, key, source, other)
            assert _state(world, chart, key) == source, (trigger, source, other)


def test_an_undeclared_trigger_is_refused(world):
    key = _specimen(world, "task")
    before = _state(world, "task", key)
    with pytest.raises(UndeclaredTransition):
        _move(world, "task", "no_such_trigger", key, before, None)
    assert _state(world, "task", key) == before


def test_move_runs_only_inside_its_own_transition(world):
    key = _specimen(world, "task")
    conn = connect(world.db)
    try:
        with conn.cursor() as cur:
            tx = Tx(cur)
            tx.enter("lease.start")
            with pytest.raises(UnregisteredWrite):
                move(tx, "task", "lapse", [key], source="OFFERED")
        conn.rollback()
    finally:
        conn.close()
    assert _state(world, "task", key) == "OFFERED"


def test_the_functions_that_insert_a_row_write_the_charts_destination(world):
    """Transitions from NONE insert; the state they insert is the chart's destination."""
    w = world.worker("q", keys=True)
    assert _state(world, "instance", w.session_id) in CHARTS["instance"].dests("register", "NONE")
    offer = world.offer(w, concurrency_key="key-2")
    assert _state(world, "lease", offer.lease.lease_id) in CHARTS["lease"].dests("assign", "NONE")
    assert _state(world, "key_permit", offer.lease.lease_id) in CHARTS["key_permit"].dests("acquire", "NONE")
    world.start(w, offer)
    world.run(request_cancel, task_id=offer.task.task_id)
    assert _state(world, "cancellation", offer.task.task_id) in CHARTS["cancellation"].dests("request", "NONE")
    due, later = (NewTask("q", "k"), NewTask("q", "k", due_at=world.now.replace(year=world.now.year + 1)))
    results = world.run(submit, tasks=[due, later])
    assert [r.state for r in results] == ["READY", "SCHEDULED"]
    assert {_state(world, "task", r.task_id) for r in results} == CHARTS["task"].dests("submit", "NONE")
    world.run(request_cancel, task_id=results[1].task_id)
    copy = world.run(retry, source_task_id=results[1].task_id)
    assert _state(world, "task", copy.task_id) in CHARTS["task"].dests("retry", "NONE")
    world.run(pause_queue, queue="q-paused", paused_by="test")
    assert _state(world, "queue", "q-paused") in CHARTS["queue"].dests("pause", "NONE")
    world.run(set_retention, queue="q-kept", retention_ms=60_000, updated_by="test")
    assert _state(world, "queue", "q-kept") in CHARTS["queue"].dests("retain", "NONE")
    assert _state(world, "schedule", _schedule(world, "inserted")) in CHARTS["schedule"].dests("create", "NONE")
    world.run(submit, tasks=[NewTask("q", "k", fairness_key="tenant-2")])
    assert _state(world, "fair_share", share_id("q", "tenant-2")) in CHARTS["fair_share"].dests("open", "NONE")
    world.run(set_weight, fairness_key="tenant-2", weight=2, updated_by="test")
    assert _state(world, "fairness_weight", "tenant-2") in CHARTS["fairness_weight"].dests("set", "NONE")


def test_no_store_module_but_the_writer_sets_a_state():
    """State changes are written by chart_write.move alone (new rows by chart_write.create)."""
    pattern = re.compile(r"UPDATE\s+\S+\s+SET[^\"']*\bstate\s*=", re.IGNORECASE)  # table names in f-strings too
    for path in sorted((ROOT / "pulse_trio" / "store").rglob("*.py")):
        if path.name == "chart_write.py":
            continue
        text = re.sub(r"\"\s*\n\s*f?\"", "", path.read_text())  # join implicitly concatenated strings
        assert not pattern.search(text), f"{path.name} writes a state outside chart_write.move"


def test_no_store_module_but_the_writer_inserts_a_charted_row():
    """New rows of a persistent chart's table are written by chart_write.create alone."""
    tables = "|".join(re.escape(table) for table, _ in TABLES.values())
    pattern = re.compile(rf"INSERT\s+(?:IGNORE\s+)?INTO\s+(?:{tables})\b", re.IGNORECASE)
    for path in sorted((ROOT / "pulse_trio" / "store").rglob("*.py")):
        if path.name == "chart_write.py":
            continue
        assert not pattern.search(path.read_text()), f"{path.name} inserts a charted row outside chart_write.create"


def test_create_runs_only_inside_its_own_transition_and_takes_the_charts_state(world):
    """chart_write.create: refused outside its trigger's function; a state the chart does not name is refused too."""
    from pulse_trio.store.engine.chart_write import create

    conn = connect(world.db)
    try:
        with conn.cursor() as cur:
            tx = Tx(cur)
            tx.enter("lease.start")
            with pytest.raises(UnregisteredWrite):
                create(tx, "node", "start", columns="node_id, state", row="(%s, {state})", rows=[(NODE_ID,)])
            tx.leave()
            tx.enter("node.start")
            with pytest.raises(UndeclaredTransition):
                create(tx, "node", "start", columns="node_id, state", row="(%s, {state})", rows=[(NODE_ID,)],
                       dest="STOPPED")
            tx.leave()
        conn.rollback()
    finally:
        conn.close()
    assert world.sql("SELECT COUNT(*) FROM server_nodes WHERE node_id = %s", (NODE_ID,)) == [(0,)]
