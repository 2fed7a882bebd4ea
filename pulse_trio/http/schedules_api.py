"""``/v1/schedules``: recurring schedules, read by any API token, created and changed by an operator.

A thin face over :mod:`pulse_trio.client.schedules`. A body that is not a
JSON object is 400 like everywhere else; a field out of its rule (unknown,
missing, a bad cron expression, an unknown time zone, an interval under one
second, ...) is **422** ``invalid_schedule`` with ``field`` naming it, and
nothing is written. A token held to some queues sees and changes only the
schedules of those queues; any other is not found to it. Its name is not
hidden: names are one namespace for the cluster, so a create that takes
one used in another queue is 409 ``schedule_exists`` like any taken name.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from pulse_trio.client import ClientError
from pulse_trio.client.schedules import FIELDS, InvalidField, ScheduleNotFound, Schedules, build_schedule
from pulse_trio.contract.jsontext import dumps
from pulse_trio.contract.scanner import JsonNumber
from pulse_trio.http import auth, bodies
from pulse_trio.http.api import TaskApi, json_text
from pulse_trio.http.errors import ApiError, not_found
from pulse_trio.store.engine.rows import ScheduleRow
from pulse_trio.store.schedule.schedules import SCHEDULE_NOT_FOUND

REQUIRED = ("name", "queue", "kind")


def invalid_field(exc: InvalidField) -> ApiError:
    return ApiError(422, exc.code, f"{exc.field}: {exc.message}", field=exc.field)


def _value(name: str, value: Any) -> Any:
    """A body value as the checks take it: numbers exact (Decimal), everything else as sent."""
    if isinstance(value, JsonNumber):
        number = value.exact()
        if number is None:
            raise InvalidField(name, "is not a number the schedule can hold")
        return number
    return value


def new_schedule(body: dict[str, Any]):
    """The create body, checked field by field (InvalidField names the first one out of its rule)."""
    for name in body:
        if name not in FIELDS:
            raise InvalidField(name, f"is not a field of a schedule; allowed: {', '.join(FIELDS)}")
    for name in REQUIRED:
        if body.get(name) is None:
            raise InvalidField(name, "is required")
    fields = {name: _value(name, body.get(name)) for name in FIELDS if name != "payload"}
    payload_json = None
    if "payload" in body:
        payload_json, problem = dumps(body["payload"], check_numbers=True)
        if problem:
            raise InvalidField("payload", problem)
    return build_schedule(payload_json=payload_json, **fields)


class SchedulesApi:
    """Handlers for ``/v1/schedules``; they share the task handlers' authentication and limiters."""

    def __init__(self, tasks: TaskApi) -> None:
        self.tasks = tasks
        self.schedules = Schedules(tasks.client.store)

    @bodies.judges_query
    async def list(self, request: Request) -> Response:
        info = await self.tasks.authenticate(request, "schedules")
        params = bodies.query(request, frozenset({"all"}))
        found = await self.tasks.blocking(self.schedules.list, include_deleted=bodies.query_bool(params, "all"),
                                          queues=auth.visible_queues(info))
        return json_text('{"schedules":[' + ",".join(s.as_json_text() for s in found) + "]}")

    async def create(self, request: Request) -> Response:
        info = await self.tasks.authenticate(request, "schedule")
        body = await bodies.read_json(request)
        try:
            spec = new_schedule(body)
        except InvalidField as exc:
            raise invalid_field(exc) from None
        auth.require_queue(info, spec.queue)
        now = self.tasks.instance.now()
        made = await self.tasks.blocking(self.schedules.create, spec, created_by=f"http:{info.token_id}", now=now)
        request.scope.setdefault("pulse", {})["schedule_id"] = made.schedule_id
        return json_text(made.as_json_text(), 201)

    async def get(self, request: Request) -> Response:
        info = await self.tasks.authenticate(request, "schedules")
        return json_text((await self._visible(info, request)).as_json_text())

    async def pause(self, request: Request) -> Response:
        return await self._change(request, "pause")

    async def resume(self, request: Request) -> Response:
        return await self._change(request, "resume")

    async def delete(self, request: Request) -> Response:
        return await self._change(request, "delete")

    async def _visible(self, info, request: Request) -> ScheduleRow:
        ref = request.path_params["schedule"]
        try:
            row = await self.tasks.blocking(self.schedules.get, ref)
        except ScheduleNotFound as exc:
            raise not_found(SCHEDULE_NOT_FOUND, exc.message) from None
        if not info.allows_queue(row.queue):
            raise not_found(SCHEDULE_NOT_FOUND, f"no schedule {ref[:80]}")
        return row

    async def _change(self, request: Request, action: str) -> Response:
        info = await self.tasks.authenticate(request, "schedule")
        if request.method == "POST":
            bodies.no_fields(await bodies.read_json(request, optional=True))
        row = await self._visible(info, request)
        try:
            after, changed = await self.tasks.blocking(self.schedules.change, action, row.schedule_id,
                                                       by=f"http:{info.token_id}", now=self.tasks.instance.now())
        except ClientError as exc:  # deleted meanwhile
            raise not_found(SCHEDULE_NOT_FOUND, exc.message) from None
        return json_text(after.as_json_text(), changed=changed)
