"""The ``/v1`` resources: a thin face over the producer client.

Every rule (what a valid task is, who may be retried, what a cancel does)
lives in :class:`~pulse_trio.client.DatabaseClient` and the store; a handler only
authenticates, parses, calls the client and shapes the answer. The client
is blocking, so it runs in a worker thread on the service's own store: the
store's CapacityLimiter bounds database concurrency as for every other
transaction, and a second, smaller limiter keeps HTTP from taking every
thread away from the dispatcher and the sessions. Cancellation waits for
the thread (a COMMIT is never abandoned).

Task views are answered as the exact JSON text the store builds, so a
payload's or result's numbers reach the caller digit for digit.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar

import trio
from starlette.requests import Request
from starlette.responses import Response

from pulse_trio import tokens
from pulse_trio.client import DatabaseClient
from pulse_trio.client import ranges
from pulse_trio.client.producer import ClientError, build_task, check_list_filters
from pulse_trio.contract.grammar import INSTANCE_PREFIX, TASK_PREFIX
from pulse_trio.charts.states import TERMINAL_TASK_STATES
from pulse_trio.http import auth, bodies
from pulse_trio.http.errors import JSON, ApiError, BatchRefused, not_found, unauthenticated
from pulse_trio.http.outcomes import OutcomeWatch
from pulse_trio.live_instance import LiveInstance
from pulse_trio.store.token.tokens import live_token
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.views.queries import get_worker
from pulse_trio.store.views.task import TaskView, get_task

T = TypeVar("T")

LIST_PARAMS = frozenset({"queue", "state", "kind", "idempotency_key", "order", "cursor", "limit"})


def json_text(text: str, status: int = 200, **extra: bool) -> Response:
    """A JSON object's text, with boolean members appended (``created``, ``cancel_changed``)."""
    if extra:
        text = text[:-1] + "".join(f',"{k}":{"true" if v else "false"}' for k, v in extra.items()) + "}"
    return Response(text, status_code=status, media_type=JSON)


def json_value(value: Any, status: int = 200) -> Response:
    return Response(json.dumps(value, ensure_ascii=False, separators=(",", ":")), status_code=status,
                    media_type=JSON)


async def _cancel_on_hang_up(request: Request, scope: trio.CancelScope) -> None:
    """Cancel ``scope`` once the client has gone: a long-poll nobody waits for holds nothing."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def worker_in_scope(info: tokens.TokenInfo, worker: dict[str, Any]) -> bool:
    """Whether the token sees the worker: every queue it subscribes to is one of the token's.

    A worker that also serves a queue outside the token's would show that
    queue's name, and a drain would stop its work there too.
    """
    return all(info.allows_queue(sub["queue"]) for sub in worker["subscriptions"])


class TaskApi:
    """Handlers for tasks, workers and queues; one per service instance."""

    def __init__(self, instance: LiveInstance, store: Store) -> None:
        self.instance = instance
        self.store = store
        self.client = DatabaseClient(store.config, store=store)
        # At most half the store's threads serve HTTP; the rest stay free for workers.
        self.limiter = trio.CapacityLimiter(max(1, store.limiter.total_tokens // 2))
        #: Long-polls for outcomes; its probe loop runs beside the server (``HttpApi.serve``).
        self.outcomes = OutcomeWatch(store)
        instance.on_task_ended(self.outcomes.hint)

    async def blocking(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run a client call in a worker thread under both limiters."""
        async with self.limiter:
            return await self.store.in_thread(functools.partial(fn, *args, **kwargs))

    async def read(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        """A store view under the HTTP limiter: a burst of requests, even with made-up tokens, leaves the
        workers their threads."""
        async with self.limiter:
            return await self.store.run(fn, **kwargs)

    async def authenticate(self, request: Request, action: str | None) -> tokens.TokenInfo:
        """The live token behind the request, allowed ``action`` (None: any role; the caller decides)."""
        token = auth.bearer(request)
        if token is None:
            raise unauthenticated()
        info = await self.read(live_token, token=token)
        if info is None:
            raise unauthenticated("the bearer token is unknown or revoked")
        request.scope.setdefault("pulse", {})["token_id"] = info.token_id
        if action is not None:
            auth.require(info, action)
        return info

    async def visible_task(self, info: tokens.TokenInfo, task_id: str) -> TaskView:
        """The task, if it exists in a queue the token may see (else 404 either way)."""
        bodies.resource_id(task_id, TASK_PREFIX, "task", "task_not_found")
        view = await self.read(get_task, task_id=task_id)
        if view is None or not info.allows_queue(view.task.queue):
            raise not_found("task_not_found", f"no task {task_id}")
        return view

    async def visible_worker(self, info: tokens.TokenInfo, instance_id: str) -> None:
        """404 unless the worker instance exists and the token sees it (:func:`worker_in_scope`)."""
        if info.queues:  # a token of every queue sees every worker: no read
            worker = await self.read(get_worker, instance_id=instance_id)
            if worker is None or not worker_in_scope(info, worker):
                raise not_found("instance_not_found", f"no worker instance {instance_id}")

    # -- tasks -----------------------------------------------------------------------------
    @bodies.takes_idempotency_header
    async def submit(self, request: Request) -> Response:
        info = await self.authenticate(request, "submit")
        body = await bodies.read_json(request)
        sub = bodies.submission(body, bodies.idempotency_header(request))
        auth.require_queue(info, sub.queue)
        now = self.instance.now()
        task = build_task(sub.queue, sub.kind, now=now, **sub.options)  # InvalidRequest -> 400

        def submit_and_read() -> tuple[str, str, bool]:
            task_id, text, created = self.client.submit_json_text(task, now=now)
            if created:  # committed: dispatch it while the answer is sent
                trio.from_thread.run_sync(self.instance.wake_dispatcher)
            return task_id, text, created

        task_id, text, created = await self.blocking(submit_and_read)
        request.scope.setdefault("pulse", {})["task_id"] = task_id
        return json_text(text, 201 if created else 200, created=created)

    async def submit_many(self, request: Request) -> Response:
        """Every task valid and allowed, then one transaction: all are submitted or none (per-task errors named)."""
        info = await self.authenticate(request, "submit")
        items = bodies.batch(await bodies.read_json(request))
        now = self.instance.now()
        tasks, refused = [], []
        for index, item in enumerate(items):
            try:
                if not isinstance(item, dict):
                    raise bodies.bad_request("a task must be a JSON object")
                sub = bodies.submission(item, None)
                auth.require_queue(info, sub.queue)
                tasks.append(build_task(sub.queue, sub.kind, now=now, **sub.options))
            except (ApiError, ClientError) as exc:
                field = exc.field or ("queue" if exc.code == "forbidden" else None)
                refused.append({"index": index, "code": exc.code, "field": field, "message": exc.message})
        if refused:
            forbidden = any(item["code"] == "forbidden" for item in refused)
            raise BatchRefused(403 if forbidden else 400, "forbidden" if forbidden else "invalid_request",
                               f"{len(refused)} of {len(items)} task(s) refused, nothing was submitted; "
                               f"task {refused[0]['index']}: {refused[0]['message']}", refused)

        def submit_all() -> list[dict[str, Any]]:
            done = self.client.submit_many(tasks, now=now)
            if any(d["created"] for d in done):
                trio.from_thread.run_sync(self.instance.wake_dispatcher)
            return done

        done = await self.blocking(submit_all)
        return json_value({"tasks": done}, 201 if any(d["created"] for d in done) else 200)

    async def get(self, request: Request) -> Response:
        info = await self.authenticate(request, "read")
        view = await self.visible_task(info, request.path_params["task_id"])
        return json_text(view.as_json_text())

    @bodies.judges_query
    async def outcome(self, request: Request) -> Response:
        """The task once it is terminal, waiting up to ``wait`` seconds for that; ``done`` says which it is.

        The waiter registers before it reads the task, so an end committed
        between that read and the wait is still seen (docs/http-api.md, Waiting for an outcome).
        The token is checked again when the wait ends, before the task is read.
        """
        info = await self.authenticate(request, "read")
        params = bodies.query(request, frozenset({"wait"}))
        wait = bodies.query_number(params, ranges.WAIT)
        task_id = bodies.resource_id(request.path_params["task_id"], TASK_PREFIX, "task", "task_not_found")
        with self.outcomes.watching(task_id) as ended:
            view = await self.visible_task(info, task_id)
            if view.task.state not in TERMINAL_TASK_STATES and wait > 0:
                with self.outcomes.holding():  # 503 beyond the process's bound: a connection each
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(_cancel_on_hang_up, request, nursery.cancel_scope)
                        with trio.move_on_after(wait):
                            await ended.wait()
                        nursery.cancel_scope.cancel()
                info = await self.authenticate(request, "read")  # a token revoked while it waited reads nothing
                view = await self.visible_task(info, task_id)  # ended or not: the task as it is now
        return json_text(view.as_json_text(), done=view.task.state in TERMINAL_TASK_STATES)

    @bodies.judges_query
    async def list(self, request: Request) -> Response:
        info = await self.authenticate(request, "list")
        params = bodies.query(request, LIST_PARAMS)
        queue, cursor, order = params.get("queue"), params.get("cursor"), params.get("order", "oldest")
        limit = bodies.query_number(params, ranges.LIST_LIMIT)
        filters = dict(queue=queue, state=params.get("state"), kind=params.get("kind"),
                       idempotency_key=params.get("idempotency_key"))
        # Every filter by its rule before the token's queues are judged, and before any SQL.
        check_list_filters(**filters, cursor=cursor, limit=limit, order=order)
        if queue is not None:
            auth.require_queue(info, queue)
        page = await self.blocking(self.client.list, **filters, cursor=cursor, limit=limit, order=order,
                                   queues=auth.visible_queues(info) if queue is None else None)
        return json_value(page)

    async def cancel(self, request: Request) -> Response:
        info = await self.authenticate(request, "cancel")
        reason = bodies.cancel_reason(await bodies.read_json(request, optional=True))
        task_id = (await self.visible_task(info, request.path_params["task_id"])).task.task_id
        now = self.instance.now()

        result, text = await self.blocking(self.client.cancel_result_text, task_id, reason=reason,
                                           requested_by=f"http:{info.token_id}", now=now)
        changed = result.changed
        if changed:
            self.outcomes.hint(task_id)  # a task not yet started is CANCELLED at once
            revoked = result.revoked_lease
            if revoked is not None:  # its session's count here would hold the slot until reconciled
                self.instance.offer_revoked(revoked.session_id, revoked.lease_id)
            # A revoked offer freed its session's slot, and a keyed task its key's permit for the next task
            # of the key: a pass now (and in a serve group's other members), not at the poll.
            self.instance.wake_dispatcher()
        return json_text(text, cancel_changed=changed)

    async def retry(self, request: Request) -> Response:
        info = await self.authenticate(request, "retry")
        bodies.no_fields(await bodies.read_json(request, optional=True))
        source = (await self.visible_task(info, request.path_params["task_id"])).task.task_id
        now = self.instance.now()

        text, created = await self.blocking(self.client.retry_json_text, source, now=now)
        if created:
            self.instance.wake_dispatcher()
        return json_text(text, 201 if created else 200, created=created)

    # -- workers and queues ------------------------------------------------------------------
    @bodies.judges_query
    async def workers(self, request: Request) -> Response:
        info = await self.authenticate(request, "workers")
        params = bodies.query(request, frozenset({"all"}))
        workers = await self.blocking(self.client.workers, include_disconnected=bodies.query_bool(params, "all"))
        return json_value({"workers": [worker for worker in workers if worker_in_scope(info, worker)]})

    @bodies.judges_query
    async def nodes(self, request: Request) -> Response:
        await self.authenticate(request, "nodes")
        params = bodies.query(request, frozenset({"all"}))
        nodes = await self.blocking(self.client.nodes, include_stopped=bodies.query_bool(params, "all"))
        return json_value({"nodes": nodes})

    async def drain(self, request: Request) -> Response:
        info = await self.authenticate(request, "drain")
        instance_id = bodies.resource_id(request.path_params["instance_id"], INSTANCE_PREFIX, "worker instance",
                                         "instance_not_found")
        # An instance's subscriptions never change after its hello, so the check cannot go stale.
        await self.visible_worker(info, instance_id)
        try:
            drained = await self.blocking(self.client.drain, instance_id, now=self.instance.now())
        except ClientError as exc:
            if exc.code == "instance_not_found":
                raise not_found("instance_not_found", exc.message) from None
            raise ApiError(409, exc.code, exc.message) from None
        self.instance.drain_hint(drained["session_id"])  # the session may live here
        return json_value(drained)

    async def queues(self, request: Request) -> Response:
        info = await self.authenticate(request, "queues")
        depths = await self.blocking(self.client.queues, now=self.instance.now())
        visible = auth.visible_queues(info)
        if visible is not None:
            depths = {q: d for q, d in depths.items() if q in visible}
        return json_value({"queues": depths})

