"""Fixtures for the HTTP API tests: a running service, tokens, a real client, a worker."""

from __future__ import annotations


import pytest
import trio_websocket


from http_support import Http, RawWorker


@pytest.fixture
async def service(start_service):
    return await start_service()


@pytest.fixture
def http(service) -> Http:
    return Http(service.http_port)


@pytest.fixture
def tokens(token_factory) -> dict[str, str]:
    """One token per role of the auth matrix."""
    return {
        "producer": token_factory("producer", ("billing",)),
        "producer_any": token_factory("producer"),
        "operator": token_factory("operator"),
        "worker": token_factory("worker"),
    }


@pytest.fixture
def open_worker(service, nursery):
    """``worker = await open_worker(token, queue)``: registered, capacity 1, on the service."""

    async def open_(token: str, queue: str, capacity: int = 1, also: tuple[str, ...] = ()) -> RawWorker:
        ws = await trio_websocket.connect_websocket_url(
            nursery, f"ws://127.0.0.1:{service.worker_port}/v1/worker", subprotocols=["pulse.worker.v1"],
            extra_headers=[(b"authorization", f"Bearer {token}".encode())])
        worker = RawWorker(ws)
        await worker.register(queue, capacity, also=also)
        return worker

    return open_
