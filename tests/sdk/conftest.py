"""Fixtures for the SDK tests: the real service, a proxy in front of it, workers, a client.

Workers and proxies live in this folder's own fixture nurseries, which end
before the test's ``nursery`` (the services): the workers are stopped
while the service is still there, so no test leaves sockets behind.
"""

from __future__ import annotations

import ssl

import pytest
import trio
import trustme

from raw_server import RawServer
from sdk_support import FAST_BACKOFF, WORKER_BACKENDS, Proxy, start_worker, stop_workers

from pulse_trio.client import Client
from pulse_trio.sdk import Worker


@pytest.fixture
def client(db):
    with Client(db) as c:
        yield c


@pytest.fixture
async def proxy_for(start_service):
    """``proxy = await proxy_for(service)``: a TCP proxy to the service's worker port."""
    async with trio.open_nursery() as own:

        async def start(service) -> Proxy:
            return await own.start(Proxy(service.worker_port).serve)

        yield start
        own.cancel_scope.cancel()


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


@pytest.fixture
async def raw():
    """A :class:`~raw_server.RawServer` on ws://."""
    async with trio.open_nursery() as own:
        yield await own.start(RawServer().serve)
        own.cancel_scope.cancel()


@pytest.fixture
async def raw_tls(ca):
    """A :class:`~raw_server.RawServer` on wss:// with a certificate for localhost from ``ca``."""
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_context)
    async with trio.open_nursery() as own:
        yield await own.start(RawServer(server_context).serve)
        own.cancel_scope.cancel()


@pytest.fixture(params=WORKER_BACKENDS)
def worker_backend(request) -> str:
    """The event loop the test's SDK workers run on (the service always runs on the test's Trio loop)."""
    return request.param


@pytest.fixture
async def run_worker(start_service, token_factory, worker_backend):
    """``worker = await run_worker(url, registry, capacity=2, ...)``: started once connected (``wait``).

    The worker runs on ``worker_backend``: in the test's own Trio loop, or on
    an asyncio loop in a thread of its own; either way the test gets a
    :class:`~sdk_support.RunningWorker`.
    """
    workers: list = []
    portals: list = []
    async with trio.open_nursery() as own:

        async def start(url, registry, *, token: str | None = None, wait: bool = True, **options):
            options.setdefault("backoff", FAST_BACKOFF)
            options.setdefault("strict", True)
            worker = Worker(url, token or token_factory("worker", registry.queues()), registry, **options)
            handle = await start_worker(own, worker, worker_backend, wait=wait, portals=portals)
            workers.append(handle)
            return handle

        yield start
        for handle in workers:
            handle.stop()
        await stop_workers(portals)
        own.cancel_scope.cancel()
