"""What a handler does on its way out when the worker stops it for good: a hard stop, a lost lease.

Neither finishes anything (docs/worker.md §5 and §9.1), whatever the
handler lets out as it ends: a task group's group (a child whose clean-up
fails), a failure of its own clean-up, or a value after swallowing the
cancellation. The service decides then, at the lease's expiry.
"""

from __future__ import annotations

import logging

import anyio

from sdk_support import in_thread, url_of, wait_for, wait_state

from pulse_trio.sdk import Registry, TaskContext

ENDED = {"SUCCEEDED", "FAILED", "UNKNOWN", "CANCELLED"}


async def _rollback_on_cancel() -> None:
    """A child whose clean-up fails: a rollback in a ``finally`` that raises."""
    try:
        await anyio.sleep_forever()
    finally:
        raise ConnectionError("rollback failed: connection reset")


def _stopping_registry(started: list[str]) -> Registry:
    """billing handlers that each end their own way once cancelled; each records its kind as it starts."""
    registry = Registry()

    @registry.handler("billing", "group")
    async def group(task: TaskContext) -> dict:
        async with anyio.create_task_group() as children:
            children.start_soon(_rollback_on_cancel)
            started.append(task.kind)
            await anyio.sleep_forever()
        return {"sent": True}

    @registry.handler("billing", "own")
    async def own(task: TaskContext) -> dict:
        started.append(task.kind)
        await _rollback_on_cancel()
        return {"sent": True}

    @registry.handler("billing", "swallows")
    async def swallows(task: TaskContext) -> dict:
        started.append(task.kind)
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            return {"sent": "maybe"}  # the cancellation swallowed: not what a handler should do
        return {"sent": True}

    return registry


async def test_a_hard_stop_finishes_nothing_whatever_a_handler_does_on_its_way_out(start_service, run_worker,
                                                                                   client, caplog):
    """stop() cancels three handlers: a task group's child fails in its clean-up, the handler's own clean-up
    fails, the handler swallows the cancellation and returns.

    On asyncio the task group lets out a plain ExceptionGroup, without the cancellation in it; on both
    loops the other two leave nothing of the stop in what they raise or return. None of it is an outcome:
    each runner is retired as stopped, no finish is sent, and each lease expires on the service.
    """
    caplog.set_level(logging.WARNING, logger="pulse_trio.sdk")
    service = await start_service(lease_ttl=1.0)
    started: list[str] = []
    kinds = ("group", "own", "swallows")
    worker = await run_worker(url_of(service), _stopping_registry(started), capacity=len(kinds))
    tasks = [await in_thread(client.submit, "billing", kind, {}, max_attempts=1) for kind in kinds]
    await wait_for(lambda: len(started) == len(kinds), what="the handlers to start")
    worker.stop()
    await wait_for(worker.returned.is_set, timeout=5, what="run() to return after stop()")
    assert worker.stopped and worker.error is None, worker.error
    assert not worker.runners and worker.stats.running == 0, {lease: r.phase for lease, r in worker.runners.items()}
    assert not [r.getMessage() for r in caplog.records if "raised for task" in r.getMessage()]
    for task in tasks:
        view = await wait_state(client, task["task_id"], ENDED)
        assert view["state"] == "UNKNOWN" and view["outcome"]["error_code"] == "lease_expired", (view["kind"], view)


async def test_a_lost_lease_finishes_nothing_when_a_handlers_task_group_fails_on_its_way_out(
        start_service, proxy_for, run_worker, client, caplog):
    """The lease is lost (the worker cut off from the service past its ttl) while the handler's task group
    runs; stopped, the group's child fails in its clean-up and the group comes out of the handler's scope.

    That group is no outcome: the service expired the lease and may run the task elsewhere already
    (docs/worker.md §5). No finish is sent, the lease counts as lost, and the worker goes on.
    """
    caplog.set_level(logging.WARNING, logger="pulse_trio.sdk")
    service = await start_service(lease_ttl=1.0)
    proxy = await proxy_for(service)
    started: list[str] = []
    registry = _stopping_registry(started)

    @registry.handler("billing", "quick")
    async def quick(task: TaskContext) -> dict:
        return {"quick": True}

    worker = await run_worker(proxy.url, registry)
    task = await in_thread(client.submit, "billing", "group", {}, max_attempts=1)
    await wait_for(lambda: started == ["group"], what="the handler to start")
    proxy.freeze()
    await wait_for(lambda: worker.stats.lost == 1 and not worker.runners, what="the lease to be lost")
    proxy.thaw()
    view = await wait_state(client, task["task_id"], ENDED)
    assert view["state"] == "UNKNOWN" and view["outcome"]["error_code"] == "lease_expired", view
    after = await in_thread(client.submit, "billing", "quick", {})
    assert (await wait_state(client, after["task_id"], ENDED))["state"] == "SUCCEEDED"
    assert not worker.returned.is_set() and worker.stats.finished == 1, worker.error
    # Nor is the group reported as the handler's failure: the lost lease, not the handler, ended it.
    assert not [r.getMessage() for r in caplog.records if "raised for task" in r.getMessage()]
