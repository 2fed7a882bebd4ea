"""A worker given several instances' URLs moves to the next one when its instance goes, and resumes there."""

from __future__ import annotations

import trio

from sdk_support import Gate, gated_registry, in_thread, url_of, wait_for, wait_state



async def test_the_worker_fails_over_to_the_next_url_and_resumes_its_lease(start_service, run_worker, client):
    first, second = await start_service(), await start_service()
    started, release, calls = Gate(), Gate(), []
    worker = await run_worker([url_of(first), url_of(second)], gated_registry(started, release, calls))
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
