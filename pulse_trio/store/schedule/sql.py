"""Chart ``schedule``: every statement its transaction functions send, named, in one place.

The functions beside this module (``schedules``) refer to these by name.
State lists come from the chart, built once at import. A move's own ``SET``
and ``WHERE`` additions stay at its ``chart_write.move`` call.
"""

from __future__ import annotations

from pulse_trio.charts import CHARTS
from pulse_trio.charts.states import terminal_states
from pulse_trio.store.engine.timer_scan import DueScan, due_states

#: DELETED: kept for its tasks, listed only when asked.
GONE = terminal_states(CHARTS["schedule"])[0]
SCHEDULE_COLUMNS = ("schedule_id, name, state, queue, kind, payload, priority, max_attempts, cron, interval_s, timezone,"
                    " missed, catch_up_limit, next_fire_at, last_tick_at, last_task_id, fired_ticks, created_at,"
                    " created_by, updated_at, updated_by")
_SCHEDULES = f"SELECT {SCHEDULE_COLUMNS} FROM schedules"
#: One schedule by ``{column}``: its id (a deleted one too) or ``live_name``, the name a live one holds;
#: ``{lock}``: empty or ``FOR_UPDATE``.
SCHEDULE_BY = f"{_SCHEDULES} WHERE {{column}} = %s{{lock}}"
FOR_UPDATE = " FOR UPDATE"
#: A schedule deleted by name at ``updated_at`` by ``updated_by`` (deleted, it holds no ``live_name``).
DELETED_BY_NAME = f"{_SCHEDULES} WHERE name = %s AND state = '{GONE}' AND updated_at = %s AND updated_by = %s"
#: A new schedule, as ``chart_write.create`` inserts it.
SCHEDULE_ROW = "(%s, %s, {state}, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, NULL, NULL, 0, %s, %s, %s, %s)"
#: Due ACTIVE schedules, ``FOR UPDATE SKIP LOCKED``, through ``schedules_due``.
DUE_SCAN = DueScan("schedule", "fire", _SCHEDULES, "schedules_due",
                   "state", "next_fire_at")
#: The listing: ``{where}`` is empty or `` WHERE`` and its conditions (``NOT_GONE``, ``IN_QUEUES``).
LIST = f"{_SCHEDULES}{{where}} ORDER BY state = '{GONE}', name, schedule_id"
NOT_GONE = f"state <> '{GONE}'"
IN_QUEUES = "queue IN %s"
NEXT_FIRE_AT = f"SELECT MIN(next_fire_at) FROM schedules WHERE {due_states('schedule', 'fire', 'state')}"
