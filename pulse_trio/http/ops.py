"""Operational endpoints: ``/healthz``, ``/readyz``, ``/metrics``, ``/openapi.json``.

None of them takes a token: probes and scrapers run without one, and what
they show (counts, versions) is no secret. Bind ``--http-listen`` to an
address only your network reaches.
"""

from __future__ import annotations

import contextlib

import outcome
import pymysql
import trio
from starlette.requests import Request
from starlette.responses import Response

from pulse_trio.http.api import json_value
from pulse_trio.http.errors import JSON, RETRY_AFTER_S, error_response
from pulse_trio.http import openapi
from pulse_trio.http.outcomes import OutcomeWatch
from pulse_trio.http.scrape_figures import DatabaseFigures
from pulse_trio.group.metrics_files import SharedMetrics
from pulse_trio.live_instance import LiveInstance
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.schema.migrate import code_version, current_version

#: How long a readiness probe or a scrape waits for the database before it answers without it.
READY_TIMEOUT_S = 5.0


class _Check:
    """One readiness check: the probes waiting for it, and what it found."""

    __slots__ = ("done", "version", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.version: int | None = None
        self.error: Exception | None = None


class OpsApi:
    def __init__(self, instance: LiveInstance, store: Store, outcomes: OutcomeWatch, limiter: trio.CapacityLimiter,
                 shared_metrics: SharedMetrics | None = None) -> None:
        """``limiter``: the HTTP API's share of the store's threads (``TaskApi.limiter``)."""
        self.instance = instance
        self.store = store
        self.outcomes = outcomes
        #: A scrape takes no token, so a flood of them must not take the threads the workers need either:
        #: its database reads run under ``limiter``, one at a time (:meth:`DatabaseFigures.run` runs them).
        self.figures = DatabaseFigures(instance, store, limiter)
        #: In a serve group: every member's series, summed (``pulse_trio.group.metrics_files``).
        self.shared_metrics = shared_metrics
        self._openapi = openapi.text()
        #: The readiness check running now, if any (:meth:`_schema_version`).
        self._check: _Check | None = None

    async def healthz(self, request: Request) -> Response:
        """The process is alive and its event loop answers; nothing else is checked."""
        return json_value({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        """Ready when the database answers and its schema is the one this code expects, or a newer release's.

        A deploy migrates before it starts the new release's instances, and the
        old ones go on serving meanwhile (docs/operations.md §1.3): they stay in
        their load balancer's pool, or none would answer until the new ones start.

        ``settings_conflicts`` (only when there are any) lists this instance's
        cluster-setting flags that replaced a different stored value at start
        or that the cluster has moved away from since (``settings_sync.py``).
        """
        want = code_version()
        have: int | None = None
        with trio.move_on_after(READY_TIMEOUT_S):
            have = await self._schema_version()
        retry = {"Retry-After": str(RETRY_AFTER_S)}
        if have is None:
            return error_response(503, "database_unavailable", "the database is not reachable", retry)
        if have < want:
            return error_response(503, "migrations_pending",
                                  f"the database schema is version {have}; this code needs {want}", retry)
        ready: dict[str, object] = {"status": "ready", "schema_version": have, "code_version": want}
        conflicts = self.instance.settings_conflicts()
        if conflicts:  # still ready: the instance runs on the cluster's values, but operators should know
            ready["settings_conflicts"] = conflicts
        return json_value(ready)

    async def _schema_version(self) -> int | None:
        """The schema version a fresh connection reads (None: the database does not answer).

        A fresh connection on purpose: "can a new connection be made" is the question. A probe takes
        no token, so at most one check runs per process, on a thread no probe's timeout abandons, and
        every probe that comes while it runs waits for its answer: a flood of probes holds one
        connection and one thread, not one of each per probe.
        """
        check = self._check
        if check is None:
            check = self._check = _Check()
            config, token = self.store.config, trio.lowlevel.current_trio_token()

            def read() -> int | None:
                try:
                    return current_version(config, io_timeout=READY_TIMEOUT_S)
                except pymysql.err.MySQLError:
                    return None

            def deliver(result: outcome.Outcome[int | None]) -> None:  # on the check's thread
                with contextlib.suppress(trio.RunFinishedError):
                    token.run_sync_soon(self._checked, check, result)

            trio.lowlevel.start_thread_soon(read, deliver)
        await check.done.wait()
        if check.error is not None:
            raise check.error
        return check.version

    def _checked(self, check: _Check, result: outcome.Outcome[int | None]) -> None:
        """A check ended: its waiters answer, and the next probe starts a new one."""
        self._check = None
        try:
            check.version = result.unwrap()
        except Exception as exc:  # not the database's answer: each waiter's request fails as any other would
            check.error = exc
        check.done.set()

    async def metrics(self, request: Request) -> Response:
        """This process's series (its group's), and the database's if it answers within the bound."""
        depths = await self.figures.figures(READY_TIMEOUT_S)
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
            "(the periodic one for every waiter at once, a hinted one for the tasks ended here).\n"
            "# TYPE pulse_http_outcome_probes_total counter\n"
            f"pulse_http_outcome_probes_total {watch.probes}\n"
        ).encode()

    async def openapi(self, request: Request) -> Response:
        return Response(self._openapi, media_type=JSON)
