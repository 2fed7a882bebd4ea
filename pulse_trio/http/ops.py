"""Operational endpoints: ``/healthz``, ``/readyz``, ``/metrics``, ``/openapi.json``.

None of them takes a token: probes and scrapers run without one, and what
they show (counts, versions) is no secret. Bind ``--http-listen`` to an
address only your network reaches.
"""

from __future__ import annotations

import datetime as dt

import pymysql
import trio
from starlette.requests import Request
from starlette.responses import Response

from pulse_trio.http.api import json_value
from pulse_trio.http.errors import JSON, RETRY_AFTER_S, error_response
from pulse_trio.http import openapi
from pulse_trio.http.outcomes import OutcomeWatch
from pulse_trio.group.metrics_files import SharedMetrics
from pulse_trio.live_instance import LiveInstance
from pulse_trio.store.schema.migrate import code_version, current_version
from pulse_trio.store.queue.fairness import key_figures
from pulse_trio.store.views.queries import queue_depths

#: The recent finishes per fairness key that /metrics reports.
FAIRNESS_RECENT = dt.timedelta(minutes=5)
from pulse_trio.store.engine.trio_bridge import Store

READY_TIMEOUT_S = 5.0


class OpsApi:
    def __init__(self, instance: LiveInstance, store: Store, outcomes: OutcomeWatch, limiter: trio.CapacityLimiter,
                 shared_metrics: SharedMetrics | None = None) -> None:
        """``limiter``: the HTTP API's share of the store's threads (``TaskApi.limiter``)."""
        self.instance = instance
        self.store = store
        self.outcomes = outcomes
        #: A scrape takes no token, so a flood of them must not take the threads the workers need either.
        self.limiter = limiter
        #: In a serve group: every member's series, summed (``pulse_trio.group.metrics_files``).
        self.shared_metrics = shared_metrics
        self._openapi = openapi.text()

    async def healthz(self, request: Request) -> Response:
        """The process is alive and its event loop answers; nothing else is checked."""
        return json_value({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        """Ready when the database answers and its schema is the one this code expects.

        ``settings_conflicts`` (only when there are any) lists this instance's
        cluster-setting flags that replaced a different stored value at start
        or that the cluster has moved away from since (``settings_sync.py``).
        """
        want = code_version()
        have: int | None = None
        with trio.move_on_after(READY_TIMEOUT_S):
            try:
                # A fresh connection on purpose: "can a new connection be made" is the question.
                # Only a read, so a probe that times out may leave its thread behind.
                have = await trio.to_thread.run_sync(current_version, self.store.config,
                                                     abandon_on_cancel=True)
            except pymysql.err.MySQLError:
                have = None
        retry = {"Retry-After": str(RETRY_AFTER_S)}
        if have is None:
            return error_response(503, "database_unavailable", "the database is not reachable", retry)
        if have != want:
            return error_response(503, "migrations_pending",
                                  f"the database schema is version {have}; this code needs {want}", retry)
        ready: dict[str, object] = {"status": "ready", "schema_version": have, "code_version": want}
        conflicts = self.instance.settings_conflicts()
        if conflicts:  # still ready: the instance runs on the cluster's values, but operators should know
            ready["settings_conflicts"] = conflicts
        return json_value(ready)

    async def metrics(self, request: Request) -> Response:
        depths = None
        with trio.move_on_after(READY_TIMEOUT_S):
            try:
                async with self.limiter:
                    now = self.instance.now()
                    depths = await self.store.run(queue_depths, now=now, ended=False)  # not the whole history
                    figures = await self.store.run(key_figures, since=now - FAIRNESS_RECENT)
                for queue, keys in figures.items():  # the fairness keys with the most ready work, then "other"
                    depths.setdefault(queue, {"states": {}, "oldest_ready_age_s": None})["fairness"] = keys
            except Exception:  # the scrape still reports the process; pulse_database_up says 0
                depths = None
        own = self.shared_metrics.merged() if self.shared_metrics is not None else self.process_metrics()
        database, media_type = self.instance.database_metrics(depths)
        return Response(own + database, media_type=media_type)

    def process_metrics(self) -> bytes:
        """This process's own series: the instance's, and its HTTP long-polls'."""
        return self.instance.process_metrics() + self._outcome_metrics()

    def _outcome_metrics(self) -> bytes:
        """The long-polls of this process: what they hold, and the probes that serve them all."""
        watch = self.outcomes
        return (
            "# HELP pulse_http_outcome_waiters Requests of this process waiting for a task's outcome.\n"
            "# TYPE pulse_http_outcome_waiters gauge\n"
            f"pulse_http_outcome_waiters {watch.waiting}\n"
            "# HELP pulse_http_outcome_probes_total Statements that asked which awaited tasks ended "
            "(one for every waiter at once).\n"
            "# TYPE pulse_http_outcome_probes_total counter\n"
            f"pulse_http_outcome_probes_total {watch.probes}\n"
        ).encode()

    async def openapi(self, request: Request) -> Response:
        return Response(self._openapi, media_type=JSON)
