"""A worker given several instances' URLs moves to the next one when its instance goes, and resumes there."""

from __future__ import annotations

import trio

from sdk_support import in_thread, url_of, wait_for, wait_state

from pulse_trio.sdk import Registry, TaskContext


async def test_the_worker_fails_over_to_the_next_url_and_resumes_its_lease(start_service, run_worker, client):
    first, second = await start_service(), await start_service()
    started, release, calls = trio.Event(), trio.Event(), []
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext) -> dict:
        calls.append(task.task_id)
        started.set()
        await release.wait()
        return {"sent": True}

    worker = await run_worker([url_of(first), url_of(second)], registry)
    assert worker.url == url_of(first)
    task = await in_thread(client.submit, "billing", "invoice.send", {})
    with trio.fail_after(10):
        await started.wait()

    first.stop()
    await wait_for(lambda: worker.stats.resumed == 1, what="the lease to be resumed on the second instance")
    assert worker.url == url_of(second)
    release.set()
    view = await wait_state(client, task["task_id"], "SUCCEEDED")
    assert calls == [task["task_id"]] and view["attempt"] == 1
