"""Keeping and losing leases: renewals carry a long handler, a partition stops it, drain finishes work."""

from __future__ import annotations

import anyio
import trio

from sdk_support import Gate, in_thread, url_of, wait_for, wait_state

from pulse_trio.sdk import LEASE_LOST, Registry, TaskContext


async def test_handler_longer_than_the_lease_is_kept_alive_by_renewals(start_service, run_worker, client):
    # A ttl of a second leaves each renewal (sent a third of the way) two thirds of a second to be
    # answered, a margin that holds on a loaded host; the handler still outlives three ttls.
    service = await start_service(lease_ttl=1.0)
    registry = Registry()

    @registry.handler("billing", "long")
    async def long(task: TaskContext) -> dict:
        await anyio.sleep(3.0)  # three ttls
        return {"done": True}

    worker = await run_worker(url_of(service), registry)
    task = await in_thread(client.submit, "billing", "long", {})
    view = await wait_state(client, task["task_id"], {"SUCCEEDED", "UNKNOWN", "FAILED"})
    assert view["state"] == "SUCCEEDED" and len(view["attempts"]) == 1
    assert worker.stats.renewals > 0 and worker.stats.lost == 0


async def test_partition_past_the_lease_stops_the_handler(start_service, proxy_for, run_worker, client):
    service = await start_service(lease_ttl=0.5)
    proxy = await proxy_for(service)
    started, stopped = Gate(), Gate()
    reasons: list[str | None] = []
    registry = Registry()

    @registry.handler("billing", "stuck")
    async def stuck(task: TaskContext) -> dict:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            reasons.append(task.stop_reason)
            stopped.set()
        return {}

    worker = await run_worker(proxy.url, registry)
    task = await in_thread(client.submit, "billing", "stuck", {})
    with trio.fail_after(10):
        await started.wait()
    proxy.freeze()  # sockets stay open, nothing gets through: renewals cannot be answered
    with trio.fail_after(10):
        await stopped.wait()
    assert reasons == [LEASE_LOST]
    proxy.thaw()
    view = await wait_state(client, task["task_id"], "UNKNOWN")  # expired after start, no retry_uncertain
    assert view["outcome"]["error_code"] == "lease_expired"
    await wait_for(lambda: worker.stats.lost == 1, what="the runner to give the lease up")
    assert worker.stats.finished == 0


async def test_drain_under_load_finishes_running_tasks_and_takes_no_more(start_service, run_worker,
                                                                          token_factory, client):
    service = await start_service(start_timeout=1.0)
    running, done = [], []
    registry = Registry()

    @registry.handler("billing", "work")
    async def work(task: TaskContext) -> dict:
        running.append(task.task_id)
        await anyio.sleep(0.3)
        done.append(task.task_id)
        return {"n": task.payload["n"]}

    ids = [(await in_thread(client.submit, "billing", "work", {"n": n}))["task_id"] for n in range(12)]
    worker = await run_worker(url_of(service), registry, capacity=3)
    await wait_for(lambda: len(running) >= 3, what="the first tasks to start")
    worker.drain()
    with trio.fail_after(10):  # run() returns by itself once the running tasks are finished.
        await worker.returned.wait()
    assert worker.error is None
    assert sorted(done) == sorted(running) and len(done) < len(ids)
    assert worker.stats.succeeded == len(done) and worker.stats.cancelled == worker.stats.lost == 0
    states = {tid: (await in_thread(client.get, tid))["state"] for tid in ids}
    assert all(states[tid] == "SUCCEEDED" for tid in done)
    # An offer that raced the drain lapses (no attempt used); the rest never left the queue.
    assert all(states[tid] in ("READY", "OFFERED") for tid in ids if tid not in done)

    # A fresh worker (the next deploy) picks up what the drained one left.
    await run_worker(url_of(service), registry, capacity=6)
    for tid in ids:
        await wait_state(client, tid, "SUCCEEDED")
    assert sorted(done) == sorted(ids)
