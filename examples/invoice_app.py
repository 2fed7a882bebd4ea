"""An example producer: a Starlette service that hands invoices to workers and tells its caller how they went.

Run it beside the service and the example worker (docs/worker.md §12)::

    PULSE_TOKEN=$(pulse-trio token create --role producer --queue billing) \\
        .venv/bin/hypercorn 'examples.invoice_app:create_app()' --bind 127.0.0.1:8000
    curl -s -X POST http://127.0.0.1:8000/invoices/991

The request submits one task and awaits its outcome, in a few lines: the
worker's receipt (200), how the task ended (502), or its id when it takes
longer than the request may (202). The application holds a producer
token, never database credentials, and one client (one connection pool)
for its whole life. FastAPI apps do the same in a lifespan and a route.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from pulse_trio.producer import AsyncClient, TaskOutcomeError, WaitTimeout


def create_app(url: str | None = None, token: str | None = None, queue: str = "billing",
               wait_s: float = 10) -> Starlette:
    """``wait_s``: how long a request awaits the outcome before it answers 202 with the task's state."""
    url = url or os.environ.get("PULSE_URL", "http://127.0.0.1:7381")
    token = token or os.environ["PULSE_TOKEN"]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with AsyncClient(url, token) as pulse:  # one pool, shared by every request
            app.state.pulse = pulse
            yield

    async def send_invoice(request: Request) -> JSONResponse:
        invoice = request.path_params["invoice"]
        handle = await request.app.state.pulse.submit(queue, "invoice.send", {"invoice": invoice},
                                                      idempotency_key=f"invoice-{invoice}")
        try:
            receipt = await handle.result(timeout=wait_s)
        except TaskOutcomeError as ended:  # FAILED, UNKNOWN or CANCELLED
            return JSONResponse({"task_id": handle.task_id, "state": ended.state, "error": ended.error_code},
                                status_code=502)
        except WaitTimeout as waited:  # not ended yet (READY, OFFERED or RUNNING): the caller may ask again later
            return JSONResponse({"task_id": handle.task_id, "state": waited.task.get("state")}, status_code=202)
        return JSONResponse({"task_id": handle.task_id, "receipt": receipt})

    return Starlette(routes=[Route("/invoices/{invoice:int}", send_invoice, methods=["POST"])], lifespan=lifespan)
