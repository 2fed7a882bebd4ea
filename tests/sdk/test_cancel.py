"""Client.cancel reaches a running handler: by push, by renewal, and in a thread; one that ignores it is cut off.

A cancel the worker learns before it calls the handler finishes the task without calling it.
"""

from __future__ import annotations

import threading
import time

import anyio
import pytest
import trio

from sdk_support import Gate, ack_of, in_thread, url_of, wait_for, wait_state

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


async def test_a_cancel_known_before_the_call_finishes_the_task_without_calling_the_handler(start_service, proxy_for,
                                                                                          run_worker, client):
    # The start commits, its ack is lost with the connection, and the cancel is saved while the worker is away.
    # On its return the replayed start is answered from its receipt and the resume shows the cancel: the
    # handler was not called yet, so it is not called at all (docs/worker.md §5.2).
    service = await start_service()
    proxy = await proxy_for(service)
    calls: list[str] = []
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext) -> dict:
        calls.append(task.task_id)  # an effect before its first await: a cancelled scope would not stop it
        return {"sent": True}

    worker = await run_worker(proxy.url, registry)
    proxy.drop_when(ack_of("task.start"), then_freeze=True)
    task = await in_thread(client.submit, "billing", "invoice.send", {})
    await wait_for(lambda: proxy.dropped_chunks, what="the start's ack to be dropped")
    await in_thread(client.cancel, task["task_id"], reason="stop it")
    proxy.thaw()
    view = await wait_state(client, task["task_id"], {"SUCCEEDED", "CANCELLED"})
    assert view["state"] == "CANCELLED" and calls == []
    assert view["outcome"]["error_code"] == "cancelled"
    await wait_for(lambda: worker.stats.cancelled == 1, what="the finish ack")
    assert worker.stats.duplicates == 1 and worker.stats.resumed == 1


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


async def test_a_task_taken_after_a_stuck_def_handler_is_run_not_held(start_service, run_worker, client):
    """A def handler that ignores its cancel is cut off at the grace (docs/worker.md §8) but keeps its thread.

    The worker declares that slot away while it does (docs/worker.md §3.1): the next task is not offered to it,
    rather than started, then renewed for ever while its handler waits for a thread that is not coming back.
    """
    service = await start_service(lease_ttl=1, cancel_grace=1)
    registry = Registry()
    stuck, release = threading.Event(), threading.Event()
    calls: list[str] = []

    @registry.handler("reports", "render")
    def render(task: TaskContext, payload: dict) -> dict:
        calls.append(payload["name"])
        if payload["name"] == "stuck":
            stuck.set()
            release.wait(60)  # ignores its cancel (a C call, a socket read without a timeout)
        return {"rendered": payload["name"]}

    worker = await run_worker(url_of(service), registry, capacity=1)
    try:
        first = await in_thread(client.submit, "reports", "render", {"name": "stuck"})
        await wait_for(stuck.is_set, what="the stuck handler to start")
        await in_thread(client.cancel, first["task_id"], reason="taking too long")
        view = await wait_state(client, first["task_id"], {"CANCELLED", "UNKNOWN", "FAILED"})
        assert view["state"] == "CANCELLED", view  # cut off at the grace: the lease is gone
        await wait_for(lambda: worker.stats.stuck_threads == 1, what="the stuck thread counted")
        with trio.fail_after(10):
            while [r["capacity"] for r in await in_thread(client.workers)] != [0]:
                await trio.sleep(0.02)
        second = await in_thread(client.submit, "reports", "render", {"name": "next"})
        await trio.sleep(1)
        view = await in_thread(client.get, second["task_id"])
        assert view["state"] == "READY" and calls == ["stuck"], view  # not offered: no thread would run it
    finally:
        release.set()
    view = await wait_state(client, second["task_id"], "SUCCEEDED")
    assert view["attempt"] == 1 and calls == ["stuck", "next"]
    assert worker.stats.stuck_threads == 0 and worker.stats.lost == 1


async def test_a_cancel_read_with_the_starts_ack_finishes_the_task_without_calling_the_handler(start_service,
                                                                                             proxy_for, run_worker,
                                                                                             client):
    """The start's ack and the cancel push come in one read: the cancel is known before the handler is called.

    The worker hands the call to a task of its pool at the ack and reads the push before that task runs; a
    handler called then would act up to its first await (docs/worker.md §8): it is not called at all.
    """
    service = await start_service()
    proxy = await proxy_for(service)
    calls: list[str] = []
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext) -> dict:
        calls.append(task.task_id)  # the charge, before its first await
        await anyio.sleep(0)
        return {"sent": True}

    worker = await run_worker(proxy.url, registry)
    proxy.hold_when(ack_of("task.start"))
    task = await in_thread(client.submit, "billing", "invoice.send", {})
    await wait_for(lambda: proxy.held_chunks, what="the start's ack to be held")
    await in_thread(client.cancel, task["task_id"], reason="stop it")
    await wait_for(lambda: any(b'"type":"task.cancel"' in chunk for chunk in proxy.held_chunks),
                   what="the cancel push to be held after the ack")
    proxy.release()
    view = await wait_state(client, task["task_id"], {"SUCCEEDED", "CANCELLED"})
    assert view["state"] == "CANCELLED" and calls == [], (view["state"], calls)
    await wait_for(lambda: worker.stats.cancelled == 1, what="the finish ack")
