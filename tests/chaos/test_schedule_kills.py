"""Schedules under process kills: two ``serve`` processes, every-second schedules, one server SIGKILLed.

Each tick must become exactly one task. The tasks table cannot hold two
for one tick (the idempotency key is unique per queue), so the checks are
the ones a double or a lost fire would break: every tick from the first to
the last has its task, and each schedule's ``fired_ticks`` (one per tick a
fire transaction committed) equals its number of tasks, so no tick was
fired twice even where the database threw the second task away.

The run lasts ``PULSE_SCHEDULE_RUN_S`` seconds (20 by default, to keep
the suite short; the release check runs it for 60: docs/operations.md §8).
"""

from __future__ import annotations

import datetime as dt
import os
import time

import pytest

from chaos_fleet import Fleet
from sql_support import rows
from pulse_trio.client import Client
from pulse_trio.client.schedules import Schedules, build_schedule

pytestmark = pytest.mark.chaos

RUN_S = float(os.environ.get("PULSE_SCHEDULE_RUN_S", "20"))
SCHEDULES = 4
SECOND = dt.timedelta(seconds=1)


def _ticks(db, schedule_id: str) -> list[dt.datetime]:
    found = rows(db, "SELECT due_at FROM tasks WHERE queue = 'cron' AND idempotency_key LIKE %s ORDER BY due_at",
                 (f"schedule:{schedule_id}:%",))
    return [r[0] for r in found]


def test_two_servers_and_a_sigkill_fire_each_tick_exactly_once(db, token_factory, tmp_path):
    fleet = Fleet(db, token_factory("worker", ["cron"]), tmp_path / "executions.jsonl")
    try:
        fleet.start_servers(0, 1)
        with Client(db, pool_size=1) as client:
            made = [Schedules(client.store).create(
                build_schedule(name=f"every-second-{i}", queue="cron", kind="tick", interval=1, missed="catch_up",
                               catch_up_limit=100, payload={"i": i}), created_by="chaos")
                for i in range(SCHEDULES)]
        started = time.monotonic()
        time.sleep(RUN_S * 0.4)
        fleet.kill(fleet.servers[0])  # mid-run, whatever it holds: its row locks go with its connections
        time.sleep(RUN_S * 0.2)
        fleet.start_server(0)  # a new process takes part again
        time.sleep(max(0.0, RUN_S - (time.monotonic() - started)))
    finally:
        fleet.stop_all()
    for schedule in made:
        ticks = _ticks(db, schedule.schedule_id)
        assert len(ticks) >= RUN_S - 3, (schedule.name, len(ticks))
        assert ticks == [ticks[0] + SECOND * k for k in range(len(ticks))], f"{schedule.name}: a tick is missing"
        assert ticks[0] == schedule.next_fire_at.replace(tzinfo=None)  # from its first tick on
        ((fired, last_tick),) = rows(db, "SELECT fired_ticks, last_tick_at FROM schedules WHERE schedule_id = %s",
                                     (schedule.schedule_id,))
        assert fired == len(ticks), f"{schedule.name}: {fired} fires for {len(ticks)} ticks"
        assert last_tick == ticks[-1]
