"""The two read-only resources the dashboard needs beyond the task API: ``/v1/whoami`` and ``/v1/overview``.

``whoami`` says what the presented token may do, from the same table the
handlers enforce (:data:`pulse_trio.http.auth.PERMISSIONS`), so the
dashboard hides exactly the actions the API would refuse. ``overview`` is
one queue row per queue: ACTIVE or PAUSED, capped counts by state, the oldest READY task's
age, finishes in the last minutes and per minute over the last hour, all
read from the database with bounded queries (:mod:`pulse_trio.store.views.dashboard`).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from pulse_trio.http import auth
from pulse_trio.http.api import json_value
from pulse_trio.http.throughput import MINUTE, FinishesPerMinute
from pulse_trio.store.views.dashboard import COUNT_CAP, FINISHED_STATUSES, finishes_since, queue_states
from pulse_trio.store.queue.queues import QueueControl, queue_controls
from pulse_trio.store.queue.fairness import key_figures
from pulse_trio.store.engine.tx import rfc3339

if TYPE_CHECKING:
    from pulse_trio.http.api import TaskApi

#: "Finished in the last minutes" on the overview.
RECENT = dt.timedelta(minutes=5)


class DashboardApi:
    def __init__(self, tasks: TaskApi) -> None:
        self.tasks = tasks
        self.store = tasks.store
        self.instance = tasks.instance
        self.per_minute = FinishesPerMinute(self.store)

    async def whoami(self, request: Request) -> Response:
        info = await self.tasks.authenticate(request, None)
        auth.require_role(info, auth.READERS, "use the HTTP API")
        return json_value({**info.as_json(), "may": auth.allowed_actions(info)})

    async def overview(self, request: Request) -> Response:
        info = await self.tasks.authenticate(request, "overview")
        now = self.instance.now()
        visible = auth.visible_queues(info)
        queues = await self.tasks.read(queue_states, now=now, queues=visible)
        controls = await self.tasks.read(queue_controls, queues=visible)
        for name in controls:  # a paused queue shows even while it holds no task
            queues.setdefault(name, {"states": {}, "capped": [], "oldest_ready_age_s": None})
        fairness = await self.tasks.read(key_figures, since=now - RECENT, queues=visible)
        recent = await self.tasks.read(finishes_since, since=now - RECENT)
        first, series = await self.per_minute.read(now)
        zeros = [0] * self.per_minute.minutes
        for name, entry in queues.items():
            entry["state"] = (controls.get(name) or QueueControl.absent(name)).state
            entry["recent"] = {status: recent.get((name, status), 0) for status in FINISHED_STATUSES}
            entry["per_minute"] = {status: series.get((name, status), zeros) for status in FINISHED_STATUSES}
            entry["fairness"] = fairness.get(name, [])
        return json_value({
            "at": rfc3339(now), "count_cap": COUNT_CAP, "recent_s": RECENT.total_seconds(),
            "first_minute": rfc3339(first), "minute_s": MINUTE.total_seconds(),
            "queues": dict(sorted(queues.items())),
        })
