"""Chart ``schedule`` on the real database: create, fire exactly once per tick, pause, resume, delete."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from pulse_trio.client.schedules import build_schedule
from pulse_trio.dburl import connect
from pulse_trio.store.engine.results import Refusal
from pulse_trio.store.engine.tx import Tx
from pulse_trio.store.schedule.schedules import (
    SCHEDULE_EXISTS, SCHEDULE_NOT_FOUND, create, delete, fire, get_schedule, list_schedules, pause, resume, tick_key,
)

from sql_support import index_reads, purge_held_back
from tests.store.conftest import T0

SECOND = dt.timedelta(seconds=1)
DAY = dt.timedelta(days=1)
UTC = dt.timezone.utc
ROOT = Path(__file__).parents[2]


def _create(world, name="every-second", **fields):
    if "cron" not in fields:
        fields.setdefault("interval", 1)
    spec = build_schedule(name=name, queue="q", kind="tick", payload={"n": 12345678901234567890}, **fields)
    row = world.run(create, schedule=spec, created_by="test")
    assert not isinstance(row, Refusal), row
    return row


def _tasks(world, schedule_id):
    return world.sql("SELECT idempotency_key, state, due_at, payload FROM tasks WHERE idempotency_key LIKE %s"
                     " ORDER BY due_at", (f"schedule:{schedule_id}:%",))


def test_each_tick_becomes_one_task_carrying_its_schedule_and_tick(world):
    row = _create(world)
    assert row.state == "ACTIVE" and row.next_fire_at == T0 + SECOND
    assert world.run(fire).schedules == 0  # not due yet
    for _ in range(3):
        world.advance(1000)
        result = world.run(fire)
        assert (result.schedules, result.created) == (1, 1)
        assert world.run(fire).schedules == 0  # the same moment again: nothing due
    tasks = _tasks(world, row.schedule_id)
    ticks = [T0 + SECOND * k for k in (1, 2, 3)]
    assert [t[0] for t in tasks] == [tick_key(row.schedule_id, tick) for tick in ticks]
    assert {t[1] for t in tasks} == {"READY"}
    assert [t[2] for t in tasks] == [tick.replace(tzinfo=None) for tick in ticks]  # due at its tick
    assert {t[3] for t in tasks} == {'{"n":12345678901234567890}'}  # the payload, digit for digit
    after = world.store.run_sync(get_schedule, ref=row.schedule_id)
    assert after.fired_ticks == 3 and after.last_tick_at == ticks[-1] and after.next_fire_at == T0 + SECOND * 4


def test_firing_reads_the_due_schedules_only_while_purge_lags(world):
    """The timer reads ``schedules_due`` from its first ACTIVE entry up to ``now``, never the schedules
    due later.

    Each schedule fired moves its entry, leaving the old one behind as a delete mark until InnoDB purges
    it, which a long transaction (a backup's snapshot) holds back. (Counted in the range's estimate while
    the statistics still counted them due, they once made MariaDB read every ACTIVE schedule, those due
    tomorrow too, through a ref on the state.)"""
    for i in range(200):
        _create(world, f"daily-{i}", interval=86_400)
    for i in range(200):
        _create(world, f"hourly-{i}", interval=3_600)
    world.sql("ANALYZE TABLE schedules")  # the statistics as the server's own recount takes them, at some point
    with purge_held_back(world.db):  # what a snapshot may still see, purge keeps
        world.advance(3_600_000)
        while world.run(fire).more:
            pass
        _create(world, "every-second")
        world.advance(1_000)
        done, read = index_reads(world.db, lambda tx: fire(tx, now=world.now))
        assert done.schedules == 1
        assert read < 20, read  # not the entries of the 400 schedules due later


def test_skip_fires_only_the_current_tick_after_downtime(world):
    row = _create(world, interval=60)
    world.advance(3_600_500)  # an hour later
    assert world.run(fire).created == 1
    assert [t[2] for t in _tasks(world, row.schedule_id)] == [(T0 + dt.timedelta(hours=1)).replace(tzinfo=None)]


def test_catch_up_fires_at_most_its_limit_of_the_latest_missed_ticks(world):
    row = _create(world, interval=60, missed="catch_up", catch_up_limit=5)
    world.advance(3_600_500)
    assert world.run(fire).created == 5
    assert [t[2] for t in _tasks(world, row.schedule_id)] == [
        (T0 + dt.timedelta(minutes=m)).replace(tzinfo=None) for m in range(56, 61)]


def test_a_second_fire_of_the_same_tick_finds_the_task_the_database_already_holds(world):
    """Even were next_fire_at moved back, the tick's idempotency key keeps it one task."""
    row = _create(world)
    world.advance(1000)
    world.run(fire)
    world.sql("UPDATE schedules SET next_fire_at = %s WHERE schedule_id = %s",
              ((T0 + SECOND).replace(tzinfo=None), row.schedule_id))
    result = world.run(fire)
    assert (result.schedules, result.created, len(result.task_ids)) == (1, 0, 1)
    assert len(_tasks(world, row.schedule_id)) == 1


def test_pause_resume_delete(world):
    row = _create(world, cron="*/5 * * * *", timezone="Europe/Berlin")
    paused = world.run(pause, ref="every-second", by="op")
    assert paused.changed and paused.schedule.state == "PAUSED"
    assert not world.run(pause, ref=row.schedule_id, by="op").changed  # already paused: nothing changes
    world.advance(3_600_000)
    assert world.run(fire).schedules == 0  # no tick fires while paused
    resumed = world.run(resume, ref=row.schedule_id, by="op")
    assert resumed.changed and resumed.schedule.state == "ACTIVE"
    assert resumed.schedule.next_fire_at == T0 + dt.timedelta(hours=1, minutes=5)  # the first tick after now
    assert resumed.schedule.updated_by == "op"
    assert not world.run(resume, ref=row.schedule_id, by="op").changed
    gone = world.run(delete, ref="every-second", by="op")
    assert gone.changed and gone.schedule.state == "DELETED"
    for fn in (pause, resume, delete):
        refused = world.run(fn, ref="every-second", by="op")
        assert isinstance(refused, Refusal) and refused.code == SCHEDULE_NOT_FOUND
    assert world.store.run_sync(get_schedule, ref=row.schedule_id).state == "DELETED"  # by id it is still shown
    assert world.store.run_sync(list_schedules) == []
    assert [s.schedule_id for s in world.store.run_sync(list_schedules, include_deleted=True)] == [row.schedule_id]
    world.advance(3_600_000)
    assert world.run(fire).schedules == 0


def _re_run(world, fn, by="op", **kwargs):
    """``fn`` run again as the facade re-runs it after a COMMIT whose answer was lost: same arguments, recovering."""
    conn = connect(world.db)
    try:
        with conn.cursor() as cur:
            result = fn(Tx(cur, recovering=True), now=world.now, by=by, **kwargs)
        conn.commit()
    finally:
        conn.close()
    return result


@pytest.mark.parametrize("how", ["name", "id"])
def test_a_change_whose_commit_was_lost_is_reported_as_made_by_its_re_run(world, how):
    """The re-run finds the schedule as its first run left it: changed, not "already so", and a delete by
    name is not "no schedule" (the CLI would exit 3, HTTP answer 404, for a delete that happened)."""
    row = _create(world, name="nightly")
    ref = "nightly" if how == "name" else row.schedule_id
    for fn, state in ((pause, "PAUSED"), (resume, "ACTIVE"), (delete, "DELETED")):
        world.advance(1000)
        assert world.run(fn, ref=ref, by="op").changed  # committed; its answer lost on the way
        again = _re_run(world, fn, ref=ref)
        assert not isinstance(again, Refusal), (fn.__name__, again)
        assert (again.schedule.schedule_id, again.schedule.state, again.changed) == (row.schedule_id, state, True)
    world.advance(1000)
    for twice in (world.run(delete, ref=ref, by="op"), _re_run(world, delete, ref=ref)):  # later calls: not theirs
        assert isinstance(twice, Refusal) and twice.code == SCHEDULE_NOT_FOUND


@pytest.mark.parametrize("how", ["name", "id"])
def test_a_re_run_takes_as_its_own_only_the_change_stamped_with_its_time_and_author(world, how):
    """A re-run's first run may not have committed: a change made by another call (an earlier one by the same
    author, or one by another author at the same instant) is not its own. The author is compared as stored,
    cut to its column (``cli@`` and a long host name)."""
    row = _create(world, name="nightly")
    ref = "nightly" if how == "name" else row.schedule_id
    author = "cli@" + "h" * 200
    world.run(pause, ref=ref, by=author)
    assert _re_run(world, pause, ref=ref, by=author).changed  # its own, its author cut as stored
    assert not _re_run(world, pause, ref=ref, by="other").changed  # the same instant, another author
    world.advance(1000)
    assert not _re_run(world, pause, ref=ref, by=author).changed  # the same author, an earlier call
    world.run(delete, ref=ref, by=author)
    assert _re_run(world, delete, ref=ref, by=author).changed
    refused = _re_run(world, delete, ref=ref, by="other")
    assert isinstance(refused, Refusal) and refused.code == SCHEDULE_NOT_FOUND


def test_a_delete_re_run_by_name_finds_its_own_among_the_schedules_deleted_under_that_name(world):
    """A deleted schedule holds no live name: the re-run of a delete by name reads the deleted ones by that
    name, and answers the one it deleted, not an earlier one the same author deleted under that name."""
    earlier = _create(world, name="nightly")
    world.run(delete, ref="nightly", by="op")
    world.advance(1000)
    later = _create(world, name="nightly")
    world.run(delete, ref="nightly", by="op")
    again = _re_run(world, delete, ref="nightly")
    assert not isinstance(again, Refusal), again
    assert (again.schedule.schedule_id, again.changed) == (later.schedule_id, True), earlier.schedule_id


def test_a_delete_re_run_by_name_leaves_a_new_schedule_that_took_the_name_since(world):
    """The delete's COMMIT landed, its answer was lost, and before the store ran it again the freed name was
    taken by a new schedule: the re-run answers the schedule it deleted and leaves the new one alone."""
    first = _create(world, name="nightly")
    world.run(delete, ref="nightly", by="op")
    second = _create(world, name="nightly")
    again = _re_run(world, delete, ref="nightly")
    assert not isinstance(again, Refusal), again
    assert (again.schedule.schedule_id, again.changed) == (first.schedule_id, True)
    assert world.store.run_sync(get_schedule, ref="nightly").schedule_id == second.schedule_id  # still live


def test_a_live_name_is_unique_and_freed_by_delete(world):
    first = _create(world, name="nightly")
    spec = build_schedule(name="nightly", queue="q", kind="k", interval=60)
    refused = world.run(create, schedule=spec, created_by="test")
    assert isinstance(refused, Refusal) and refused.code == SCHEDULE_EXISTS
    assert world.sql("SELECT COUNT(*) FROM schedules")[0][0] == 1  # nothing written
    world.run(delete, ref=first.schedule_id, by="op")
    again = world.run(create, schedule=build_schedule(name="nightly", queue="q", kind="k", interval=60),
                      created_by="test")
    assert again.state == "ACTIVE" and again.schedule_id != first.schedule_id


def test_listing_by_queue(world):
    _create(world, name="a")
    world.run(create, schedule=build_schedule(name="b", queue="other", kind="k", interval=60), created_by="t")
    assert [s.name for s in world.store.run_sync(list_schedules)] == ["a", "b"]
    assert [s.name for s in world.store.run_sync(list_schedules, queues=("other",))] == ["b"]
    assert world.store.run_sync(list_schedules, queues=()) == []


@pytest.mark.parametrize("limit", [1, 2])
def test_fire_batches_come_back_full_when_more_are_due(world, limit):
    for name in ("a", "b", "c"):
        _create(world, name=name)
    world.advance(1000)
    result = world.run(fire, limit=limit)
    assert result.schedules == limit and result.more


def test_a_schedule_whose_zone_is_gone_stops_without_holding_up_the_others(world):
    broken, fine = _create(world, name="broken", cron="* * * * *", timezone="Europe/Berlin"), _create(world)
    world.sql("UPDATE schedules SET timezone = 'Gone/Zone' WHERE schedule_id = %s", (broken.schedule_id,))
    world.advance(60_000)
    assert world.run(fire).created == 1  # the fine one
    assert world.store.run_sync(get_schedule, ref=broken.schedule_id).next_fire_at.year == 9999
    assert _tasks(world, broken.schedule_id) == [] and len(_tasks(world, fine.schedule_id)) == 1


def test_a_firing_pass_wakes_this_process_and_tells_a_groups_other_members_once(world):
    """Three due schedules fired: the local dispatcher is woken, a serve group's other members are told once."""
    import trio

    from pulse_trio.server.hub import SessionHub
    from pulse_trio.server.schedule_firing import ScheduleFiring

    class WorldClock:
        def now(self):
            return world.now

    for name in ("a", "b", "c"):
        _create(world, name=name)
    world.advance(1000)
    told = []
    hub = SessionHub(tell_others=lambda: told.append(1))
    firing = ScheduleFiring(store=world.store, clock=WorldClock(), hub=hub)
    assert trio.run(firing.fire_due) == 3
    assert hub.wake_pending() and len(told) == 1
    assert trio.run(firing.fire_due) == 0 and len(told) == 1  # nothing due: nobody told


def test_a_schedule_made_in_a_repeated_hour_waits_for_its_next_tick_and_stalls_no_other(world):
    """Created (or resumed) in the second pass of a fall-back hour, a nightly's first tick is after now;
    the other schedules fire on, and none fires a tick from before its creation or its resume."""
    utc = dt.timezone.utc
    world.now = dt.datetime(2026, 10, 25, 0, 0, tzinfo=utc)
    heartbeat = _create(world, name="heartbeat", interval=60)
    world.now = dt.datetime(2026, 10, 25, 1, 10, tzinfo=utc)  # 02:10 CET, the second 02:10 in Berlin
    assert world.run(fire).created == 1
    made_at = world.now
    nightly = _create(world, name="nightly", cron="30 2 * * *", timezone="Europe/Berlin")
    assert nightly.next_fire_at == dt.datetime(2026, 10, 26, 1, 30, tzinfo=utc)
    world.run(pause, ref="nightly", by="test")
    world.now = dt.datetime(2026, 10, 25, 1, 11, 0, 200_000, tzinfo=utc)
    assert world.run(fire).created == 1  # the heartbeat's 01:11 tick
    world.now = dt.datetime(2026, 10, 25, 1, 40, tzinfo=utc)
    assert world.run(resume, ref="nightly", by="test").schedule.next_fire_at > world.now
    world.now = dt.datetime(2026, 10, 25, 1, 41, 0, 1, tzinfo=utc)
    world.run(fire)
    assert [row for row in _tasks(world, nightly.schedule_id) if row[2].replace(tzinfo=utc) < made_at] == []
    assert dt.datetime(2026, 10, 25, 1, 41) in [row[2] for row in _tasks(world, heartbeat.schedule_id)]


_FIRE_ONCE = """
import datetime as dt, sys
from pulse_trio.dburl import parse_database_url
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.schedule.schedules import fire
store = Store(parse_database_url(sys.argv[1]), pool_size=1)
print(store.run_sync(fire, now=dt.datetime.fromisoformat(sys.argv[2])).created)
store.close()
"""


def _fire_in_a_process(world, now: dt.datetime) -> int:
    """One fire pass in a process of its own, so a pass that never ends fails the test instead of stalling the run."""
    try:
        done = subprocess.run([sys.executable, "-c", _FIRE_ONCE, world.db.url(redact=False), now.isoformat()],
                              cwd=ROOT, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the fire pass never ended: its batch stays locked and its process fires nothing more")
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout)


def test_a_schedule_ticking_across_a_change_off_the_hour_lets_the_fire_pass_end(world):
    """Pacific/Chatham falls back on 5 April 2026 from 03:45 to 02:45 (UTC+13:45 to +12:45).

    An every-two-hours catch-up fired on time at 04:00 fires its tick, and the pass ends: the heartbeat in the
    same batch fires too (operations.md §8.4: one schedule holds up no other).
    """
    world.now = dt.datetime(2026, 4, 4, 12, 16, tzinfo=UTC)
    chatham = _create(world, name="chatham", cron="0 */2 * * *", timezone="Pacific/Chatham", missed="catch_up")
    heartbeat = _create(world, name="heartbeat", interval=60)
    four = dt.datetime(2026, 4, 4, 15, 15, tzinfo=UTC)  # 04:00 +12:45, the first tick after the repeated stretch
    assert chatham.next_fire_at == four
    assert _fire_in_a_process(world, four + dt.timedelta(milliseconds=50)) == 2
    assert [t[2] for t in _tasks(world, chatham.schedule_id)] == [four.replace(tzinfo=None)]
    assert len(_tasks(world, heartbeat.schedule_id)) == 1
    assert world.store.run_sync(get_schedule, ref="chatham").next_fire_at == dt.datetime(2026, 4, 4, 17, 15, tzinfo=UTC)


def test_a_fall_back_day_off_the_hour_fires_every_tick_its_clocks_show(world):
    """``*/20 2 * * *`` in Australia/Lord_Howe, fired on time tick after tick: 02:00, 02:20 and 02:40 each day.

    On 5 April 2026 its clocks go back half an hour, from 02:00 to 01:30, so they show 02:00-02:59 once, and all
    three fire (operations.md §8.1: only a time the clocks skip does not).
    """
    zone = ZoneInfo("Australia/Lord_Howe")
    world.now = dt.datetime(2026, 4, 3, 12, 0, tzinfo=UTC)
    row, until = _create(world, name="lord-howe", cron="*/20 2 * * *", timezone=zone.key), world.now + 2 * DAY
    while (upcoming := world.store.run_sync(get_schedule, ref="lord-howe").next_fire_at) < until:
        world.now = upcoming + dt.timedelta(milliseconds=50)
        world.run(fire)
    fired = [due.replace(tzinfo=UTC).astimezone(zone) for _, _, due, _ in _tasks(world, row.schedule_id)]
    assert [t.strftime("%m-%d %H:%M") for t in fired] == [
        "04-04 02:00", "04-04 02:20", "04-04 02:40", "04-05 02:00", "04-05 02:20", "04-05 02:40"]
