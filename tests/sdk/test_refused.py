"""Refusals that reconnecting cannot fix end ``Worker.run`` instead of looping forever."""

from __future__ import annotations

import socket

import pytest
import trio

from sdk_support import FAST_BACKOFF, url_of, wait_for

from pulse_trio.sdk import Registry, TaskContext, Worker, WorkerRefused


def _registry() -> Registry:
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext) -> dict:
        return {}

    return registry


async def test_bad_token_is_refused(start_service):
    service = await start_service()
    worker = Worker(url_of(service), "not-a-token", _registry(), backoff=FAST_BACKOFF)
    with trio.fail_after(10), pytest.raises(WorkerRefused, match="401"):
        await worker.run()


async def test_queue_outside_the_token_is_refused(start_service, token_factory):
    service = await start_service()
    worker = Worker(url_of(service), token_factory("worker", ["other"]), _registry(), backoff=FAST_BACKOFF)
    with trio.fail_after(10), pytest.raises(WorkerRefused, match="permission_denied"):
        await worker.run()


async def test_unreachable_service_is_retried_until_it_comes_up(start_service, token_factory):
    with socket.socket() as probe:  # a port nothing listens on (yet)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    worker = Worker(f"ws://127.0.0.1:{port}/v1/worker", token_factory("worker", ["billing"]), _registry(),
                    backoff=FAST_BACKOFF)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker.run)
        await wait_for(lambda: worker.stats.failed_connects >= 3, what="a few refused connects")
        assert not worker.connected
        await start_service(worker_listen=("127.0.0.1", port))
        with trio.fail_after(10):
            await worker.wait_connected()
        worker.drain()
