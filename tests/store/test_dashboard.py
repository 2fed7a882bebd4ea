"""The overview's queries: capped counts, the oldest READY task, finishes by minute."""

from __future__ import annotations

import datetime as dt
import random

import trio

from pulse_trio.http.throughput import FinishesPerMinute
from pulse_trio.store import NewTask, submit
from pulse_trio.store.views.dashboard import finishes_by_minute, finishes_since, queue_states, state_pairs
from pulse_trio.store.engine.tx import py_time
from sql_support import index_reads

MINUTE = dt.timedelta(minutes=1)


def finish_at(world, w, moment: dt.datetime, status: str = "SUCCEEDED", queue: str = "q") -> str:
    world.now = moment
    offer = world.running(w, queue=queue)
    world.finish(w, offer, 2, status=status)
    return offer.task.task_id


def test_counts_stop_at_the_cap_and_say_so(world):
    for _ in range(5):
        world.submit("q")
    world.submit("r")
    assert sorted(world.store.run_sync(state_pairs)) == [("q", "READY"), ("r", "READY")]
    states = world.run(queue_states, cap=3)
    assert states["q"]["states"] == {"READY": 3} and states["q"]["capped"] == ["READY"]
    assert states["r"]["states"] == {"READY": 1} and states["r"]["capped"] == []
    assert world.run(queue_states, cap=5)["q"]["capped"] == []  # exactly the cap is exact
    assert set(world.run(queue_states, queues=["r"])) == {"r"}


def test_the_oldest_ready_task_is_found_exactly_whatever_the_priorities(world):
    rng = random.Random(17)
    base = world.now
    for _ in range(40):
        due = base - dt.timedelta(seconds=rng.randint(0, 600))
        world.run(submit, tasks=[NewTask("q", "k", priority=rng.randint(0, 9), due_at=due)])  # step: the default 30 s
    oldest = min(py_time(d) for (d,) in world.sql("SELECT due_at FROM tasks WHERE state = 'READY'"))
    age = world.run(queue_states)["q"]["oldest_ready_age_s"]
    assert age == (world.now - oldest).total_seconds()


def test_a_high_priority_head_does_not_hide_an_older_low_priority_task(world):
    # Pick-up order puts the priority-9 task first (its effective_at is 270 s earlier), yet the
    # priority-0 task has been due longer.
    old = world.now - dt.timedelta(seconds=100)
    world.run(submit, tasks=[NewTask("q", "k", priority=0, due_at=old)])
    world.run(submit, tasks=[NewTask("q", "k", priority=9, due_at=world.now - dt.timedelta(seconds=10))])
    assert world.run(queue_states)["q"]["oldest_ready_age_s"] == 100.0
    assert world.run(queue_states)["q"]["states"] == {"READY": 2}


def test_finishes_are_counted_per_minute_and_since(world):
    w = world.worker("q", "r")
    start = world.now.replace(second=0, microsecond=0)
    finish_at(world, w, start + dt.timedelta(seconds=5))
    finish_at(world, w, start + dt.timedelta(seconds=59))
    finish_at(world, w, start + dt.timedelta(minutes=2, seconds=1), "FAILED")
    finish_at(world, w, start + dt.timedelta(minutes=2, seconds=2), queue="r")
    assert world.store.run_sync(finishes_by_minute, since=start, until=start + 3 * MINUTE) == {
        ("q", "SUCCEEDED", 0): 2, ("q", "FAILED", 2): 1, ("r", "SUCCEEDED", 2): 1}
    assert world.store.run_sync(finishes_by_minute, since=start + MINUTE, until=start + 2 * MINUTE) == {}
    assert world.store.run_sync(finishes_since, since=start + dt.timedelta(seconds=30)) == {
        ("q", "SUCCEEDED"): 1, ("q", "FAILED"): 1, ("r", "SUCCEEDED"): 1}


async def test_settled_minutes_are_read_once_and_the_rest_every_time(world):
    w = world.worker("q")
    start = world.now.replace(second=0, microsecond=0)
    for minute in (0, 1, 5):
        finish_at(world, w, start + minute * MINUTE + dt.timedelta(seconds=1))
    per_minute = FinishesPerMinute(world.store, minutes=10, settle=2 * MINUTE)
    now = start + 6 * MINUTE + dt.timedelta(seconds=30)
    first, series = await per_minute.read(now)
    assert first == start - 3 * MINUTE and len(series[("q", "SUCCEEDED")]) == 10
    assert series[("q", "SUCCEEDED")] == [0, 0, 0, 1, 1, 0, 0, 0, 1, 0]
    settled = dict(per_minute._settled)
    assert max(settled) == start + 3 * MINUTE  # minutes up to now - settle

    # A finish in the current minute shows at once; a settled minute is not read again: moving
    # the first two finishes into minute 2 behind the reader's back changes nothing it kept.
    finish_at(world, w, start + 6 * MINUTE + dt.timedelta(seconds=40))
    world.sql("UPDATE tasks SET finished_at = %s WHERE finished_at < %s",
              ((start + 2 * MINUTE).replace(tzinfo=None), (start + 2 * MINUTE).replace(tzinfo=None)))
    _, series = await per_minute.read(now + dt.timedelta(seconds=20))
    assert series[("q", "SUCCEEDED")] == [0, 0, 0, 1, 1, 0, 0, 0, 1, 1]

    # The window moves on: old minutes are dropped, new settled ones read.
    later = now + 20 * MINUTE
    first, series = await per_minute.read(later)
    assert first == start + 17 * MINUTE and series == {}
    assert min(per_minute._settled) == first


async def test_concurrent_readers_share_one_fill(world):
    w = world.worker("q")
    finish_at(world, w, world.now - 30 * MINUTE)
    per_minute = FinishesPerMinute(world.store)
    answers = []

    async def read() -> None:
        answers.append(await per_minute.read(world.now))

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(read)
    assert len(answers) == 3 and all(a == answers[0] for a in answers)
    assert sum(answers[0][1][("q", "SUCCEEDED")]) == 1


def test_the_pairs_are_found_without_walking_the_tasks(world):
    """state_pairs reads about one index entry per queue and state, however many tasks wait or ended."""
    def pairs_and_reads():
        return index_reads(world.db, lambda tx: sorted(state_pairs(tx)))

    world.run(submit, tasks=[NewTask(q, "k") for q in ("q", "r") for _ in range(3)])
    few, reads_few = pairs_and_reads()
    many = world.run(submit, tasks=[NewTask(q, "k") for q in ("q", "r") for _ in range(1500)])
    world.sql("UPDATE tasks SET state = 'SUCCEEDED', outcome_status = 'SUCCEEDED', finished_at = created_at"
              " WHERE task_id IN %s", (tuple(t.task_id for t in many[::2]),))
    world.sql("ANALYZE TABLE tasks")  # the statistics of a table that grew 500-fold, as InnoDB keeps them
    pairs, reads_many = pairs_and_reads()
    assert few == [("q", "READY"), ("r", "READY")]
    assert pairs == [("q", "READY"), ("q", "SUCCEEDED"), ("r", "READY"), ("r", "SUCCEEDED")]
    assert reads_many <= reads_few + 20, (reads_few, reads_many)
