"""Client.cancel reaches a running handler: by push, by renewal, and in a thread."""

from __future__ import annotations

import time

import anyio
import pytest
import trio

from sdk_support import Gate, in_thread, url_of, wait_for, wait_state

from pulse_trio.sdk import CANCEL_REQUESTED, Registry, TaskContext


def _blocking_registry(started: Gate, contexts: list[TaskContext]) -> Registry:
    registry = Registry()

    @registry.handler("billing", "slow")
    async def slow(task: TaskContext) -> dict:
        contexts.append(task)
        started.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    return registry


@pytest.mark.parametrize("notifications", [True, False], ids=["push", "renewal"])
async def test_cancel_reaches_the_handler(start_service, run_worker, client, notifications):
    # Without the push, the next renewal (every ttl/3) shows cancel_requested_at.
    service = await start_service(lease_ttl=0.6)
    started, contexts = Gate(), []
    worker = await run_worker(url_of(service), _blocking_registry(started, contexts),
                              cancellation_notifications=notifications)
    task = await in_thread(client.submit, "billing", "slow", {})
    with trio.fail_after(10):
        await started.wait()
    await in_thread(client.cancel, task["task_id"], reason="customer asked")
    view = await wait_state(client, task["task_id"], "CANCELLED")
    assert view["outcome"]["error_code"] == "cancelled"
    [ctx] = contexts
    assert ctx.cancelled.is_set() and ctx.stop_reason == CANCEL_REQUESTED
    await wait_for(lambda: worker.stats.cancelled == 1, what="the finish ack")


async def test_cancel_reaches_a_sync_handler_that_polls(start_service, run_worker, client):
    service = await start_service()
    started = Gate()
    registry = Registry()

    @registry.handler("reports", "crunch")
    def crunch(task: TaskContext) -> dict:
        started.set()
        while True:
            task.check_cancelled()  # raises TaskCancelled once the cancel arrived
            time.sleep(0.01)

    await run_worker(url_of(service), registry)
    task = await in_thread(client.submit, "reports", "crunch", {})
    with trio.fail_after(10):
        await started.wait()
    await in_thread(client.cancel, task["task_id"])
    view = await wait_state(client, task["task_id"], "CANCELLED")
    assert view["outcome"]["error_code"] == "cancelled"
