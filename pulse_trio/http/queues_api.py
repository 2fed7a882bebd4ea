"""``/v1/queues/{queue}/pause|resume|retention``: an operator stops or restarts a queue, or sets its retention.

A thin face over :meth:`Client.pause_queue` / :meth:`Client.resume_queue`,
like the settings handlers. The change is one transaction; this instance
applies it at once, every other instance within its paused-queue interval
(``pulse_trio.server.queue_sync``). A token held to some queues may pause
only those.

``PUT /v1/queues/{queue}/retention`` with ``{"value": seconds}`` gives the
queue its own ``task_retention`` (``null``: the cluster's applies again).

Bad input gets 422 naming the field: a path segment that is no queue name
(``queue``), a body member the action does not take, or a ``value`` outside
task_retention's bounds.
"""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from pulse_trio import cluster_settings as cs
from pulse_trio.client.producer import NAME_RULE
from pulse_trio.contract.scanner import JsonNumber
from pulse_trio.contract.grammar import is_queue
from pulse_trio.http import auth, bodies
from pulse_trio.http.api import json_value
from pulse_trio.http.errors import unprocessable

if TYPE_CHECKING:
    from pulse_trio.http.api import TaskApi

log = logging.getLogger("pulse_trio.http")


def queue_name(value: str) -> str:
    """The ``{queue}`` path segment, by the queue-name rule (422 naming ``queue`` otherwise)."""
    if not is_queue(value):
        raise unprocessable("queue", f"queue {value[:80]!r} is not a queue name ({NAME_RULE})")
    return value


def no_members(body: dict) -> None:
    """These actions take no fields: an empty body or ``{}`` (422 naming the first member otherwise)."""
    for name in sorted(body):
        raise unprocessable(name[:64], f"unknown field {name[:64]!r}: this action takes no fields")


def retention_value(body: dict) -> Decimal | int | None:
    """``{"value": seconds or null}``, the seconds within task_retention's bounds (422 naming the field)."""
    for name in sorted(body):
        if name != "value":
            raise unprocessable(name[:64], f"unknown field {name[:64]!r}: the body is {{\"value\": seconds or null}}")
    if "value" not in body:
        raise unprocessable("value", "value is required: seconds, or null for the cluster's task_retention")
    value = body["value"]
    if value is not None:
        if type(value) is int:
            number: Decimal | int = value
        elif isinstance(value, JsonNumber):
            exact = value.exact()
            if exact is None:
                raise unprocessable("value", "value is far outside task_retention's bounds")
            number = exact
        else:
            raise unprocessable("value", "value must be a number of seconds, or null for the cluster's task_retention")
        try:
            cs.BY_NAME["task_retention"].from_seconds(number)
        except cs.InvalidSetting as exc:
            raise unprocessable("value", exc.message.replace("task_retention", "value", 1)) from None
        return number
    return None


class QueuesApi:
    """Handlers for ``/v1/queues/{queue}/…``; they share the task handlers' authentication and client."""

    def __init__(self, tasks: TaskApi) -> None:
        self.tasks = tasks
        self.instance = tasks.instance

    async def pause(self, request: Request) -> Response:
        return await self._change(request, pause=True)

    async def resume(self, request: Request) -> Response:
        return await self._change(request, pause=False)

    async def retention(self, request: Request) -> Response:
        info = await self.tasks.authenticate(request, "pause")
        queue = queue_name(request.path_params["queue"])
        value = retention_value(await bodies.read_json(request))
        auth.require_queue(info, queue)
        done = await self.tasks.blocking(self.tasks.client.set_queue_retention, queue, value,
                                         updated_by=f"http:{info.token_id}", now=self.instance.now())
        return json_value(done)

    async def _change(self, request: Request, *, pause: bool) -> Response:
        info = await self.tasks.authenticate(request, "pause")
        queue = queue_name(request.path_params["queue"])
        no_members(await bodies.read_json(request, optional=True))
        auth.require_queue(info, queue)
        who, now, client = f"http:{info.token_id}", self.instance.now(), self.tasks.client
        if pause:
            done = await self.tasks.blocking(client.pause_queue, queue, paused_by=who, now=now)
        else:
            done = await self.tasks.blocking(client.resume_queue, queue, resumed_by=who, now=now)
        try:  # this instance at once (a resume wakes its dispatcher); the others within their interval
            await self.instance.refresh_paused_queues()
        except Exception:
            log.warning("queue %s changed but the paused set was not re-read here yet", queue, exc_info=True)
        return json_value(done)
