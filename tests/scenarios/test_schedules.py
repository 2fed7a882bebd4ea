"""Schedules fired by real services on Trio's virtual clock: two instances share the ticks, downtime follows the policy."""

from __future__ import annotations

import datetime as dt

import trio

from pulse_trio.client import Client
from pulse_trio.client.schedules import Schedules, build_schedule

from sql_support import rows

SECOND = dt.timedelta(seconds=1)


async def _create(db, service, **fields):
    spec = build_schedule(queue="cron", kind="tick", **fields)
    now = service.clock.now()
    with Client(db, pool_size=1) as client:
        return await trio.to_thread.run_sync(
            lambda: Schedules(client.store).create(spec, created_by="scenario", now=now))


def _ticks(db, schedule_id: str) -> list[dt.datetime]:
    return [r[0] for r in rows(db, "SELECT due_at FROM tasks WHERE idempotency_key LIKE %s ORDER BY due_at",
                               (f"schedule:{schedule_id}:%",))]


def _fired(db, schedule_id: str) -> int:
    return rows(db, "SELECT fired_ticks FROM schedules WHERE schedule_id = %s", (schedule_id,))[0][0]


async def test_two_instances_fire_each_second_of_a_minute_once(scenario_service, virtual_clock, db):
    first, second = await scenario_service(), await scenario_service()
    made = [await _create(db, first, name=f"s{i}", interval=1) for i in range(3)]
    await trio.sleep(60.5)
    for schedule in made:
        ticks = _ticks(db, schedule.schedule_id)
        assert ticks == [schedule.next_fire_at.replace(tzinfo=None) + SECOND * k for k in range(len(ticks))]
        assert len(ticks) >= 59
        assert _fired(db, schedule.schedule_id) == len(ticks)
    assert first.schedules.created + second.schedules.created == sum(len(_ticks(db, s.schedule_id)) for s in made)


async def test_after_downtime_skip_fires_one_tick_and_catch_up_its_limit(scenario_service, virtual_clock, db):
    """The schedules exist while no instance runs for ten minutes; then one starts."""
    starter = await scenario_service()
    skip = await _create(db, starter, name="skip", interval=60)
    catch_up = await _create(db, starter, name="catch-up", interval=60, missed="catch_up", catch_up_limit=4)
    starter.stop()
    await trio.sleep(600)  # nobody fires: every tick of these ten minutes is missed
    await scenario_service()
    await trio.sleep(1)
    assert len(_ticks(db, skip.schedule_id)) == 1
    ticks = _ticks(db, catch_up.schedule_id)
    assert len(ticks) == 4 and ticks == [ticks[0] + 60 * SECOND * k for k in range(4)]
    assert (_fired(db, skip.schedule_id), _fired(db, catch_up.schedule_id)) == (1, 4)


async def test_a_stopping_instance_fires_no_more_ticks(scenario_service, virtual_clock, db):
    """Its stop first waits for sessions and requests to end; no tick is fired by a process going away."""
    service = await scenario_service()
    made = await _create(db, service, name="every-second", interval=1)
    await trio.sleep(2.5)
    assert _ticks(db, made.schedule_id) and not service.schedules.stopped
    service.stop()
    await trio.sleep(0.01)
    assert service.schedules.stopped
