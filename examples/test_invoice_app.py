"""Integration tests of the example app with the pulse-trio pytest fixtures (docs/worker.md §17).

The fixtures come with the package: a real ``serve`` for the session, a
fresh queue per test, producer clients, and ``pulse_worker`` to run SDK
handlers. The same fixtures serve AnyIO's plugin (asyncio here),
pytest-trio, pytest-asyncio (``@pytest.mark.asyncio``) and plain tests
alike. Run: ``pytest examples/test_invoice_app.py``.
"""

from __future__ import annotations

import httpx
import pytest

from invoice_app import create_app
from pulse_trio.producer import TaskFailed
from pulse_trio.sdk import PermanentError, TaskContext


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the AnyIO-marked test runs on asyncio (the pytest-trio one below on Trio)


async def send_invoice(task: TaskContext) -> dict:
    if task.payload["invoice"] == 0:
        raise PermanentError("no such invoice", code="invoice.unknown")
    return {"invoice": task.payload["invoice"], "sent": True}


@pytest.mark.anyio
async def test_the_app_answers_the_workers_receipt(pulse_server, pulse_queue, pulse_worker):
    pulse_worker({"invoice.send": send_invoice})
    app = create_app(pulse_server.http_url, pulse_server.producer_token, queue=pulse_queue)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as http:
            sent = await http.post("/invoices/991")
            refused = await http.post("/invoices/0")
    assert sent.status_code == 200 and sent.json()["receipt"] == {"invoice": 991, "sent": True}
    assert refused.status_code == 502 and refused.json()["error"] == "invoice.unknown"


@pytest.mark.anyio
async def test_an_outcome_not_there_in_time_answers_202_with_the_task_s_state(pulse_server, pulse_queue):
    app = create_app(pulse_server.http_url, pulse_server.producer_token, queue=pulse_queue, wait_s=0.2)
    async with app.router.lifespan_context(app):  # no worker: the task waits READY
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as http:
            waiting = await http.post("/invoices/992")
    assert waiting.status_code == 202 and waiting.json()["state"] == "READY"


@pytest.mark.trio
async def test_a_failed_task_raises_on_trio(pulse_client, pulse_queue, pulse_worker):
    pulse_worker({"invoice.send": send_invoice})
    async with pulse_client:
        handle = await pulse_client.submit(pulse_queue, "invoice.send", {"invoice": 0})
        with pytest.raises(TaskFailed) as failed:
            await handle.result(timeout=10)
    assert failed.value.error_code == "invoice.unknown"


def test_the_blocking_client_with_a_sync_handler(pulse_sync_client, pulse_queue, pulse_worker):
    def render(task: TaskContext) -> dict:  # a `def` handler runs in a thread
        return {"pages": task.payload["pages"]}

    pulse_worker({"invoice.render": render})
    handles = pulse_sync_client.submit_many([{"queue": pulse_queue, "kind": "invoice.render", "payload": {"pages": n}}
                                             for n in (1, 2, 3)])
    assert [h.result(timeout=10) for h in handles] == [{"pages": 1}, {"pages": 2}, {"pages": 3}]


@pytest.mark.asyncio
async def test_wait_with_pytest_asyncio(pulse_client, pulse_queue, pulse_worker):
    """The same fixtures under pytest-asyncio: the client binds to that test's loop."""
    pulse_worker({"invoice.send": send_invoice})
    async with pulse_client:
        task = await pulse_client.submit(pulse_queue, "invoice.send", {"invoice": 7})
        result = await pulse_client.wait(task.task_id, timeout=10)
    assert result == {"invoice": 7, "sent": True}
