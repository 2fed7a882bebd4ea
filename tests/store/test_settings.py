"""Chart ``cluster_setting``: reading, changing, and the writers that read the value in their own transaction."""

from __future__ import annotations

import datetime as dt

import pytest

from pulse_trio import cluster_settings as cs
from pulse_trio.dburl import connect
from pulse_trio.store import NewTask, request_cancel, retry, submit
from pulse_trio.store.engine.results import Refusal
from pulse_trio.store.cluster_setting.settings import read_all, refusal, set_values
from pulse_trio.store.engine.tx import Tx, db_time


def test_the_seeded_settings_read_as_defaults(world):
    settings = world.store.run_sync(read_all)
    assert list(settings) == list(cs.NAMES)
    assert {n: (s.value_ms, s.state, s.updated_by) for n, s in settings.items()} == {
        n: (ms, "DEFAULT", None) for n, ms in cs.DEFAULTS_MS.items()}
    assert settings["permit_quarantine"].as_json()["meaning"] == "the task's own lease ttl"


def test_set_changes_several_in_one_transaction_and_says_what_it_replaced(world):
    change = world.run(set_values, values={"cancel_grace": 2_000, "permit_quarantine": 4_500}, updated_by="cli@h")
    assert change.before["cancel_grace"].value_ms == 30_000 and change.before["cancel_grace"].state == "DEFAULT"
    assert change.after["cancel_grace"].value_ms == 2_000 and change.after["lease_ttl"].value_ms == 30_000
    settings = world.store.run_sync(read_all)
    assert (settings["cancel_grace"].state, settings["cancel_grace"].updated_by) == ("SET", "cli@h")
    assert settings["cancel_grace"].updated_at == world.now
    assert settings["permit_quarantine"].as_json()["value"] == 4.5
    world.advance(1_000)
    again = world.run(set_values, values={"permit_quarantine": None}, updated_by="http:tok_1")
    assert again.before["permit_quarantine"].state == "SET" and again.after["permit_quarantine"].value_ms is None
    assert world.sql("SELECT state, updated_by FROM cluster_settings WHERE name = 'permit_quarantine'") == [
        ("SET", "http:tok_1")]


def test_a_lapse_under_twice_the_heartbeat_is_refused_on_the_values_that_result(world):
    refused = world.run(set_values, values={"node_heartbeat": 10_000}, updated_by="x")  # lapse stays 15 s
    assert isinstance(refused, Refusal) and refused.code == cs.SETTING_CONFLICT
    assert "node_lapse (15 s) must be at least twice node_heartbeat (10 s)" in refused.message
    assert world.sql("SELECT value_ms, state FROM cluster_settings WHERE name = 'node_heartbeat'") == [
        (5_000, "DEFAULT")]  # nothing written
    both = world.run(set_values, values={"node_heartbeat": 10_000, "node_lapse": 20_000}, updated_by="x")
    assert not isinstance(both, Refusal)
    assert isinstance(world.run(set_values, values={"node_lapse": 19_999}, updated_by="x"), Refusal)


def test_a_refusal_can_be_known_without_writing(world):
    """What a serve group's first process asks before it starts its members: set_values's answer, nothing written."""
    assert world.store.run_sync(refusal, values={"node_heartbeat": 10_000}) == world.run(
        set_values, values={"node_heartbeat": 10_000}, updated_by="x")
    assert world.store.run_sync(refusal, values={"node_heartbeat": 10_000, "node_lapse": 20_000}) is None
    assert world.sql("SELECT COUNT(*) FROM cluster_settings WHERE state = 'SET'") == [(0,)]


@pytest.mark.parametrize("values", [{"cancel_grace": 0}, {"lease_ttl": None}, {"poll_interval": 50},
                                    {"priority_step": cs.MAX_MS + 1}])
def test_a_value_the_definitions_refuse_never_reaches_the_table(world, values):
    with pytest.raises(cs.InvalidSetting):
        world.run(set_values, values=values, updated_by="x")
    assert world.sql("SELECT COUNT(*) FROM cluster_settings WHERE state = 'SET'") == [(0,)]


def test_submit_orders_by_the_clusters_priority_step(world):
    world.setting("priority_step", 2_000)
    (r,) = world.run(submit, tasks=[NewTask("q", "k", priority=7)])
    ((due, eff),) = world.sql("SELECT due_at, effective_at FROM tasks WHERE task_id = %s", (r.task_id,))
    assert due - eff == dt.timedelta(seconds=14)


def test_a_manual_retry_is_placed_by_the_step_in_force_then_like_a_fresh_submit(world):
    """The source was weighed by the step of its own submit; its retry is a new task, weighed by today's."""
    (source,) = world.run(submit, tasks=[NewTask("q", "k", priority=9)])  # the default step: 270 s ahead
    world.run(request_cancel, task_id=source.task_id)
    world.setting("priority_step", 1_000)
    created = world.run(retry, source_task_id=source.task_id)
    ((due, eff, offset),) = world.sql("SELECT due_at, effective_at, priority_offset_ms FROM tasks WHERE task_id = %s",
                                      (created.task_id,))
    assert (due - eff, offset) == (dt.timedelta(seconds=9), 9_000)


def test_a_transactional_enqueue_reads_the_step_on_the_callers_own_connection(world):
    world.setting("priority_step", 5_000)
    conn = connect(world.db)
    try:
        with conn.cursor() as cursor:
            (r,) = submit(Tx(cursor), tasks=[NewTask("q", "k", priority=2)], now=world.now)
        conn.commit()
    finally:
        conn.close()
    ((due, eff),) = world.sql("SELECT due_at, effective_at FROM tasks WHERE task_id = %s", (r.task_id,))
    assert due - eff == dt.timedelta(seconds=10)


def test_a_cancel_fixes_the_clusters_grace_and_a_later_change_does_not_move_it(world):
    w = world.worker("q")
    offer = world.running(w)
    world.setting("cancel_grace", 2_000)
    result = world.run(request_cancel, task_id=offer.task.task_id)
    assert result.grace_expires_at == world.now + dt.timedelta(seconds=2)
    world.setting("cancel_grace", 60_000)
    assert world.sql("SELECT grace_expires_at FROM cancel_intents") == [
        (db_time(world.now) + dt.timedelta(seconds=2),)]


def test_a_row_deleted_by_hand_reads_as_the_default_and_set_makes_it_again(world):
    world.setting("priority_step", 2_000)
    world.sql("DELETE FROM cluster_settings WHERE name = 'priority_step'")
    assert world.store.run_sync(read_all)["priority_step"].value_ms == 30_000
    (r,) = world.run(submit, tasks=[NewTask("q", "k", priority=1)])  # the writers fall back the same way
    assert world.sql("SELECT TIMESTAMPDIFF(SECOND, effective_at, due_at) FROM tasks WHERE task_id = %s",
                     (r.task_id,)) == [(30,)]
    world.setting("priority_step", 3_000)
    assert world.sql("SELECT value_ms, state FROM cluster_settings WHERE name = 'priority_step'") == [(3_000, "SET")]
