"""The SDK against the real service: a task runs, fails, retries, runs in a thread.

These run on every worker backend and on asyncio with uvloop's loop too.
"""

from __future__ import annotations

import threading

import anyio
import anyio.from_thread

import pytest

from sdk_support import WORKER_BACKENDS, in_thread, url_of, wait_for, wait_state

from pulse_trio.sdk import PermanentError, Registry, RetryableError, TaskContext, UnknownOutcome


@pytest.fixture(params=(*WORKER_BACKENDS, "uvloop"))
def worker_backend(request) -> str:
    return request.param


async def test_task_runs_end_to_end(start_service, run_worker, client):
    service = await start_service()
    seen: list[TaskContext] = []
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext) -> dict:
        seen.append(task)
        return {"sent": task.payload["invoice"], "attempt": task.attempt}

    worker = await run_worker(url_of(service), registry, capacity=2)
    task = await in_thread(client.submit, "billing", "invoice.send", {"invoice": 991}, idempotency_key="inv-991")
    view = await wait_state(client, task["task_id"], "SUCCEEDED")
    assert view["outcome"]["result"] == {"sent": 991, "attempt": 1}
    [ctx] = seen
    assert (ctx.task_id, ctx.queue, ctx.kind, ctx.attempt) == (task["task_id"], "billing", "invoice.send", 1)
    assert ctx.idempotency_key == "inv-991" and ctx.effect_uncertain is False and ctx.retry_of is None
    assert ctx.concurrency_key is None and ctx.concurrency_token is None
    await wait_for(lambda: worker.stats.succeeded == 1, what="the finish ack")
    assert worker.stats.started == 1 and worker.stats.running == 0


async def test_retryable_failure_runs_the_next_attempt(start_service, run_worker, client):
    service = await start_service()
    attempts: list[int] = []
    registry = Registry()

    @registry.handler("billing", "charge")
    async def charge(task: TaskContext) -> dict:
        attempts.append(task.attempt)
        if task.attempt == 1:
            raise RetryableError("gateway busy", code="gateway.busy")
        return {"charged": True}

    worker = await run_worker(url_of(service), registry)
    task = await in_thread(client.submit, "billing", "charge", {}, max_attempts=3)
    view = await wait_state(client, task["task_id"], "SUCCEEDED")
    assert attempts == [1, 2]
    first = view["attempts"][0]
    assert (first["status"], first["error_code"], first["retryable"]) == ("FAILED", "gateway.busy", True)
    assert view["attempt"] == 2
    assert worker.stats.failed == 1


async def test_outcomes_map_to_finish_statuses(start_service, run_worker, client):
    service = await start_service()
    registry = Registry()

    @registry.handler("billing", "permanent")
    async def permanent(task: TaskContext) -> None:
        raise PermanentError("card declined", code="card.declined", details={"decline": "insufficient_funds"})

    @registry.handler("billing", "unknown")
    async def unknown(task: TaskContext) -> None:
        raise UnknownOutcome("timed out after sending")

    @registry.handler("billing", "crash")
    async def crash(task: TaskContext) -> None:
        raise KeyError("missing")

    @registry.handler("billing", "nothing")
    async def nothing(task: TaskContext) -> None:
        return None

    await run_worker(url_of(service), registry, capacity=4)
    ids = {kind: (await in_thread(client.submit, "billing", kind, {}, max_attempts=1))["task_id"]
           for kind in ("permanent", "unknown", "crash", "nothing")}
    view = await wait_state(client, ids["permanent"], "FAILED")
    assert view["outcome"]["error_code"] == "card.declined"
    assert view["outcome"]["result"] == {"decline": "insufficient_funds"}
    assert view["attempts"][0]["retryable"] is False
    view = await wait_state(client, ids["unknown"], "UNKNOWN")
    assert view["outcome"]["error_code"] == "unknown_outcome"
    view = await wait_state(client, ids["crash"], "FAILED")
    assert view["outcome"]["error_code"] == "unhandled_exception"
    assert "KeyError" in view["outcome"]["error_message"]
    view = await wait_state(client, ids["nothing"], "SUCCEEDED")
    assert view["outcome"]["result"] == {}


async def test_sync_handler_runs_in_a_thread(start_service, run_worker, client):
    service = await start_service()
    threads: list[bool] = []
    registry = Registry()

    @registry.handler("reports", "render")
    def render(task: TaskContext) -> dict:
        try:
            anyio.from_thread.check_cancelled()  # only a worker thread of the loop has a host task to ask
            threads.append(threading.current_thread() is not threading.main_thread())
        except RuntimeError:  # on the event loop's own thread
            threads.append(False)
        task.check_cancelled()
        return {"pages": task.payload["pages"]}

    await run_worker(url_of(service), registry)
    task = await in_thread(client.submit, "reports", "render", {"pages": 3})
    view = await wait_state(client, task["task_id"], "SUCCEEDED")
    assert view["outcome"]["result"] == {"pages": 3}
    assert threads == [True]
