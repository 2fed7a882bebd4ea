"""A worker given several instances' URLs moves to the next one when its instance goes, and resumes there."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
import trio

from sdk_support import Gate, gated_registry, in_thread, url_of, wait_for, wait_state

from test_background_worker import closed_port_url

from pulse_trio.sdk import Registry


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


async def test_a_url_listed_twice_does_not_hide_the_ones_after_it():
    """[A, A, B] with A down: the worker moves by position, so it reaches B after two failures on A."""
    from raw_server import RawServer
    from sdk_support import FAST_BACKOFF

    from pulse_trio.sdk import Worker

    dead = closed_port_url()
    async with trio.open_nursery() as nursery:
        raw = await nursery.start(RawServer().serve)
        registry = Registry()
        registry.add("billing", "invoice.send", lambda task: {})
        worker = Worker([dead, dead, raw.url()], "t", registry, backoff=FAST_BACKOFF)
        nursery.start_soon(worker.run)
        with trio.move_on_after(5):
            while worker.url != raw.url():
                await trio.sleep(0.01)
        tried, failed = worker.url, worker.stats.failed_connects
        worker.stop()
        nursery.cancel_scope.cancel()
    assert tried == raw.url(), f"{failed} failed connects, never reached the third URL"


@pytest.mark.parametrize("refusing", ["raw", "raw_tls"], ids=["redirect", "certificate"])
async def test_a_url_that_refuses_is_passed_over_while_another_serves(start_service, run_worker, client, raw, raw_tls,
                                                                      refusing):
    """[A, X, B] with X refusing (a redirect, an unverifiable certificate): when A goes, the lease moves to B.

    X's refusal is X's own: the next URL may well serve, so it must not end run() and its running task.
    """
    bad = raw if refusing == "raw" else raw_tls
    if refusing == "raw":
        bad.reject = (302, "maintenance\n")
        bad.reject_headers = [("Location", "https://status.example.com/")]
    first, second = await start_service(), await start_service()
    started, release, calls = Gate(), Gate(), []
    worker = await run_worker([url_of(first), bad.url(), url_of(second)], gated_registry(started, release, calls))
    task = await in_thread(client.submit, "billing", "invoice.send", {})
    with trio.fail_after(10):
        await started.wait()

    first.stop()
    await wait_for(lambda: worker.stats.resumed == 1 or worker.returned.is_set(),
                   what="the lease to be resumed on the third URL")
    assert worker.error is None, repr(worker.error)
    assert worker.url == url_of(second) and worker.stats.failed_connects >= 1, "the refusing URL was not tried"
    release.set()
    view = await wait_state(client, task["task_id"], "SUCCEEDED")
    assert calls == [task["task_id"]] and view["attempt"] == 1


async def test_a_url_refused_before_a_session_opened_is_tried_again_after_it(start_service, run_worker, proxy_for):
    """[X, Y]: X refuses and Y serves; later Y refuses while X is back: X is tried again and serves.

    Refusals count toward ending run() only since a session last opened: every URL has to refuse
    after the last session opened, not each at some time in the worker's life. Each URL is a proxy
    to a real instance, turned to its HTTP port (which refuses the WebSocket handshake) or to a
    port nothing listens on (a failed connect, which refuses nothing).
    """
    service = await start_service()
    x, y = await proxy_for(service), await proxy_for(service)
    x.retarget(service.http_port)
    registry = Registry()
    registry.add("billing", "invoice.send", lambda task: {})
    worker = await run_worker([x.url, y.url], registry)
    assert worker.url == y.url and worker.stats.failed_connects == 1, "X did not refuse before Y served"

    x.retarget(urlsplit(closed_port_url()).port)
    y.retarget(service.http_port)
    y.sever()
    await wait_for(lambda: worker.stats.failed_connects >= 3 or worker.returned.is_set(),
                   what="X to fail and Y to refuse")
    x.retarget(service.worker_port)
    await wait_for(lambda: worker.connected or worker.returned.is_set(), what="a session on X")
    assert worker.error is None, repr(worker.error)
    assert worker.url == x.url and worker.stats.connects == 2


async def test_an_instance_that_never_answers_the_upgrade_is_left_after_connect_timeout(start_service, proxy_for,
                                                                                        run_worker):
    """worker.md §5: ``connect_timeout`` bounds the connection and the upgrade. The first URL is a real
    instance behind a frozen proxy (TCP accepts, no byte comes back: a frozen or partitioned instance);
    the worker gives it up after its connect_timeout and opens its session on the next URL."""
    frozen_one, second = await start_service(), await start_service()
    frozen = await proxy_for(frozen_one)
    frozen.freeze()
    registry = Registry()
    registry.add("billing", "invoice.send", lambda task: {})
    started = trio.current_time()
    worker = await run_worker([frozen.url, url_of(second)], registry, wait=False, connect_timeout=0.5)
    await wait_for(lambda: worker.connected or worker.returned.is_set(), timeout=5, what="a session on the second URL")
    took = trio.current_time() - started
    assert worker.error is None and worker.url == url_of(second), repr(worker.error)
    assert frozen.links == 1 and worker.stats.failed_connects == 1
    assert 0.5 <= took < 2.0, took
