"""``/v1/settings``: the cluster settings, read by any API token, changed by an unscoped operator.

A thin face over :meth:`Client.settings` / :meth:`Client.set_settings`, as
the task handlers are over the rest of the client. A change is one
transaction; this instance applies it at once, every other instance within
its refresh interval (``pulse_trio.server.settings_sync``). The settings
span every queue, so a token held to some queues may read them but not
change them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from pulse_trio import cluster_settings as cs
from pulse_trio.http import bodies
from pulse_trio.http.api import json_value
from pulse_trio.client.producer import check_weight
from pulse_trio.http.errors import not_found

if TYPE_CHECKING:
    from pulse_trio.http.api import TaskApi

log = logging.getLogger("pulse_trio.http")


class SettingsApi:
    """Handlers for ``/v1/settings``; they share the task handlers' authentication, client and limiters."""

    def __init__(self, tasks: TaskApi) -> None:
        self.tasks = tasks
        self.instance = tasks.instance

    async def list(self, request: Request) -> Response:
        await self.tasks.authenticate(request, "settings")
        return json_value({"settings": await self.tasks.blocking(self.tasks.client.settings)})

    async def get(self, request: Request) -> Response:
        await self.tasks.authenticate(request, "settings")
        name = _known(request.path_params["name"])
        return json_value((await self.tasks.blocking(self.tasks.client.settings))[name])

    async def put(self, request: Request) -> Response:
        info = await self.tasks.authenticate(request, "configure")  # not a token with --queue (auth.may)
        name = _known(request.path_params["name"])
        value = bodies.setting_value(await bodies.read_json(request))
        changed = await self._set(info.token_id, {name: value})
        return json_value(changed[name])

    async def patch(self, request: Request) -> Response:
        info = await self.tasks.authenticate(request, "configure")
        values = bodies.setting_values(await bodies.read_json(request), cs.NAMES)
        return json_value({"settings": await self._set(info.token_id, values)})

    async def weights(self, request: Request) -> Response:
        await self.tasks.authenticate(request, "settings")
        return json_value({"fairness_weights": await self.tasks.blocking(self.tasks.client.fairness_weights)})

    async def get_weight(self, request: Request) -> Response:
        await self.tasks.authenticate(request, "settings")
        key, _ = check_weight(request.path_params["key"], 1)  # a malformed key: 400 invalid_request
        found = (await self.tasks.blocking(self.tasks.client.fairness_weights)).get(key)
        if found is None:  # never given one: the default
            found = {"fairness_key": key, "weight": 1, "updated_by": None, "updated_at": None}
        return json_value(found)

    async def put_weight(self, request: Request) -> Response:
        info = await self.tasks.authenticate(request, "configure")
        weight = bodies.weight_value(await bodies.read_json(request))
        changed = await self.tasks.blocking(self.tasks.client.set_fairness_weight, request.path_params["key"],
                                            weight, updated_by=f"http:{info.token_id}", now=self.instance.now())
        return json_value(changed)

    async def _set(self, token_id: str, values: dict) -> dict[str, dict[str, object]]:
        now = self.instance.now()
        changed = await self.tasks.blocking(self.tasks.client.set_settings, values,
                                            updated_by=f"http:{token_id}", now=now)
        try:  # this instance at once; the others within their interval
            await self.instance.refresh_settings()
        except Exception:
            log.warning("cluster settings changed but not re-read here yet", exc_info=True)
        return changed


def _known(name: str) -> str:
    try:
        return cs.lookup(name).name
    except cs.InvalidSetting as exc:
        raise not_found(exc.code, exc.message) from None
