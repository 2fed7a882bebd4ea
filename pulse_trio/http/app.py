"""The Starlette application: routes, the error guard, and the access log.

Every handler runs inside :func:`_guarded`, the one place where failures
become answers: an :class:`ApiError` or a client refusal is its own
status, a lost database connection is 503 (nothing else is), a value the
database refuses is 400, anything else is logged with its traceback and
answered 500 without details. Unknown paths and methods get
the same JSON error shape through Starlette's HTTPException handler.
"""

from __future__ import annotations

import functools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pulse_trio.client import ClientError
from pulse_trio.config import Settings
from pulse_trio.http import bodies
from pulse_trio.http.api import TaskApi
from pulse_trio.http.connections import EndRefusedConnections
from pulse_trio.http.dashboard import DashboardApi
from pulse_trio.http.errors import ApiError, database_error, error_response, from_client_error
from pulse_trio.group.metrics_files import SharedMetrics
from pulse_trio.http.ops import OpsApi
from pulse_trio.http.queues_api import QueuesApi
from pulse_trio.http.schedules_api import SchedulesApi
from pulse_trio.http.settings_api import SettingsApi
from pulse_trio.http.security import SecurityHeaders
from pulse_trio.http.ui import Dashboard
from pulse_trio.live_instance import LiveInstance
from pulse_trio.logs import bind
from pulse_trio.store.engine.trio_bridge import Store

log = logging.getLogger("pulse_trio.http")
access_log = logging.getLogger("pulse_trio.http.access")

Handler = Callable[[Request], Awaitable[Response]]


def _takes_no_query(handler: Handler) -> Handler:
    @functools.wraps(handler)
    async def endpoint(request: Request) -> Response:
        bodies.query(request, frozenset())  # 400 for any parameter: none is silently ignored
        return await handler(request)

    return endpoint


def _takes_no_idempotency_key(handler: Handler) -> Handler:
    @functools.wraps(handler)
    async def endpoint(request: Request) -> Response:
        bodies.no_idempotency_header(request)
        return await handler(request)

    return endpoint


def _v1_inputs(handler: Handler) -> Handler:
    """``handler`` refusing the query parameters and the ``Idempotency-Key`` header it is not marked to read."""
    checked = handler
    if not getattr(handler, "judges_query", False):
        checked = _takes_no_query(checked)
    if not getattr(handler, "takes_idempotency_header", False):
        checked = _takes_no_idempotency_key(checked)
    return checked


def _guarded(handler: Handler, instance: LiveInstance) -> Handler:
    @functools.wraps(handler)
    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiError as exc:
            failure = exc
        except ClientError as exc:
            failure = from_client_error(exc)
        except Exception as exc:
            failure = database_error(exc) or ApiError(500, "internal", "internal error; it has been logged")
            if failure.status == 503:
                log.warning("database unavailable: %s", exc)
            else:
                log.error("request failed (%s)", failure.code, exc_info=exc)
        instance.count_http_error(failure.code)
        return failure.response()

    return endpoint


def build_app(instance: LiveInstance, store: Store, settings: Settings,
              shared_metrics: SharedMetrics | None = None) -> Starlette:
    """The API over ``store`` (through the producer client) and the few things only ``instance`` can do.

    ``shared_metrics``: this process is a member of a serve group, whose ``/metrics`` sums every member's.
    """
    tasks, ui = TaskApi(instance, store), Dashboard()
    ops = OpsApi(instance, store, tasks.outcomes, tasks.limiter, shared_metrics)
    cluster_settings = SettingsApi(tasks)
    dashboard = DashboardApi(tasks)
    queues = QueuesApi(tasks)
    schedules = SchedulesApi(tasks)

    def route(path: str, **handlers: Handler) -> Route:
        """One route per path, so a wrong method gets 405 with the full ``Allow`` list.

        A ``/v1`` handler not marked :func:`~pulse_trio.http.bodies.judges_query` takes no query parameter,
        one not marked :func:`~pulse_trio.http.bodies.takes_idempotency_header` no ``Idempotency-Key``.
        """
        if path.startswith("/v1/"):
            handlers = {method: _v1_inputs(handler) for method, handler in handlers.items()}
        by_method = {method.upper(): _guarded(handler, instance) for method, handler in handlers.items()}
        if "GET" in by_method:
            by_method["HEAD"] = by_method["GET"]

        async def endpoint(request: Request) -> Response:
            return await by_method[request.method](request)

        return Route(path, endpoint, methods=list(by_method), name=path)

    routes = [
        route("/v1/tasks", post=tasks.submit, get=tasks.list),
        route("/v1/tasks/batch", post=tasks.submit_many),
        route("/v1/tasks/{task_id}", get=tasks.get),
        route("/v1/tasks/{task_id}/outcome", get=tasks.outcome),
        route("/v1/tasks/{task_id}/cancel", post=tasks.cancel),
        route("/v1/tasks/{task_id}/retry", post=tasks.retry),
        route("/v1/workers", get=tasks.workers),
        route("/v1/workers/{instance_id}/drain", post=tasks.drain),
        route("/v1/nodes", get=tasks.nodes),
        route("/v1/queues", get=tasks.queues),
        route("/v1/queues/{queue}/pause", post=queues.pause),
        route("/v1/queues/{queue}/resume", post=queues.resume),
        route("/v1/queues/{queue}/retention", put=queues.retention),
        route("/v1/settings", get=cluster_settings.list, patch=cluster_settings.patch),
        route("/v1/settings/{name}", get=cluster_settings.get, put=cluster_settings.put),
        route("/v1/schedules", get=schedules.list, post=schedules.create),
        route("/v1/schedules/{schedule}", get=schedules.get, delete=schedules.delete),
        route("/v1/schedules/{schedule}/pause", post=schedules.pause),
        route("/v1/schedules/{schedule}/resume", post=schedules.resume),
        route("/v1/fairness-weights", get=cluster_settings.weights),
        route("/v1/fairness-weights/{key:path}", get=cluster_settings.get_weight, put=cluster_settings.put_weight),
        route("/v1/whoami", get=dashboard.whoami),
        route("/v1/overview", get=dashboard.overview),
        route("/", get=ui.root),
        route("/ui/", get=ui.index),
        route("/ui/{asset}", get=ui.asset),
        route("/healthz", get=ops.healthz),
        route("/readyz", get=ops.readyz),
        route("/metrics", get=ops.metrics),
        route("/openapi.json", get=ops.openapi),
    ]

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        instance.count_http_error(code)
        message = {404: f"no such resource: {request.url.path[:200]}",
                   405: f"{request.method} is not allowed here"}.get(exc.status_code, str(exc.detail))
        return error_response(exc.status_code, code, message, dict(exc.headers or {}))

    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error},
                    middleware=[Middleware(EndRefusedConnections, drain_timeout=settings.http_body_timeout),
                                Middleware(_AccessLog, instance=instance), Middleware(SecurityHeaders)])
    # A trailing slash is an unknown path (404 in the API's shape), not a redirect built from the Host header.
    app.router.redirect_slashes = False
    app.state.body_timeout = settings.http_body_timeout
    app.state.outcomes = tasks.outcomes  # its probe loop runs beside the server (pulse_trio.http.server)
    app.state.process_metrics = ops.process_metrics  # what a serve group's member publishes (same)
    app.state.database_figures = ops.figures  # its reads run beside the server (same)
    return app


class _AccessLog:
    """One log line and one counter per request; binds a request id for the lines in between."""

    def __init__(self, app: ASGIApp, instance: LiveInstance) -> None:
        self.app = app
        self.instance = instance

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = "req_" + secrets.token_hex(8)
        info = scope.setdefault("pulse", {})
        status = 500
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            await send(message)

        with bind(request_id=request_id):
            try:
                await self.app(scope, receive, send_with_id)
            finally:
                route = scope.get("route")
                # The template as the OpenAPI document names it: without a converter (``{key:path}``).
                template = getattr(route, "path_format", None) or "unmatched"
                self.instance.count_http(scope["method"], template, status)
                access_log.info("%s %s %s", scope["method"], scope["path"][:200], status, extra={
                    "method": scope["method"], "route": template, "status": status,
                    "duration_ms": round((time.perf_counter() - started) * 1000, 2), **info})
