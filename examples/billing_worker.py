"""An example worker: invoices for a billing system, on asyncio.

Run it against a local service (see docs/worker.md, "Quick start")::

    pulse-trio worker run examples.billing_worker:registry --token "$TOKEN" --capacity 4

(``--backend asyncio`` is the default; the same handlers written for Trio are
in ``examples/billing_worker_trio.py``, run with ``--backend trio``) and
submit work::

    pulse-trio submit --queue billing --kind invoice.send --payload '{"invoice": 991, "amount": "12.50"}'

It shows what every handler should think about:

* the handler is an ordinary ``async def`` on asyncio: it may await any
  asyncio library (an httpx ``AsyncClient``, an asyncpg pool); here
  ``asyncio.wait_for`` around ``asyncio.sleep`` stands in for the network call;
* the **payload is typed**: ``Invoice`` is decoded and checked before the
  handler runs, and a payload that does not fit finishes the task FAILED
  with ``invalid_payload`` (never retried) without calling the handler;
* the **idempotency key** is the business identity of the effect: the fake
  mail gateway below remembers what it already sent under that key, so an
  attempt that runs again (``effect_uncertain``) does not mail twice;
* **outcomes** are raised, not returned: a gateway outage is a
  ``RetryableError`` (the service schedules the next attempt);
* a plain **def** handler (PDF rendering) runs in a worker thread, never
  blocking the loop, and polls ``task.check_cancelled()``.

``tests/sdk/test_testing.py`` unit-tests these handlers with
``pulse_trio.testing``, without a server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from pulse_trio.sdk import Registry, RetryableError, TaskContext

registry = Registry()

#: Stands in for an external mail provider that deduplicates by key.
SENT: dict[str, dict] = {}


@dataclasses.dataclass
class Invoice:
    invoice: int
    amount: str = "0.00"
    simulate_outage: bool = False


@dataclasses.dataclass
class Render:
    invoice: int
    pages: int = 1


async def mail_gateway_send(invoice: Invoice) -> str:
    """The network call: any asyncio library would do here."""
    await asyncio.wait_for(asyncio.sleep(0.2), timeout=5)
    return f"msg-{invoice.invoice}"


@registry.handler("billing", "invoice.send")
async def send_invoice(task: TaskContext, invoice: Invoice) -> dict:
    if task.effect_uncertain and task.idempotency_key in SENT:
        # An earlier attempt may have sent it: ask the provider instead of sending again.
        return dict(SENT[task.idempotency_key], deduplicated=True)
    if invoice.simulate_outage and task.attempt == 1:
        raise RetryableError("mail gateway unavailable", code="gateway.unavailable")
    message_id = await mail_gateway_send(invoice)
    receipt = {"invoice": invoice.invoice, "sent": True, "attempt": task.attempt, "message_id": message_id}
    SENT[task.idempotency_key] = receipt
    print(f"invoice {invoice.invoice} sent (task {task.task_id}, attempt {task.attempt})", flush=True)
    return receipt


@registry.handler("billing", "invoice.render")
def render_invoice(task: TaskContext, job: Render) -> dict:
    for _ in range(job.pages):
        task.check_cancelled()  # a thread cannot be interrupted: it checks between steps
        time.sleep(0.05)  # render one page (blocking work: it runs in a worker thread)
    return {"invoice": job.invoice, "pages": job.pages}
