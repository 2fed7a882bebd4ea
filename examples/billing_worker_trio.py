"""The billing example's invoice handler on Trio: run it with ``--backend trio``.

::

    pulse-trio worker run examples.billing_worker_trio:registry --backend trio --token "$TOKEN"

The SDK is the same under both event loops; only the handler's own awaits
differ (``trio.sleep`` here, where the asyncio example awaits asyncio).
"""

from __future__ import annotations

import trio

from examples.billing_worker import SENT, Invoice, render_invoice
from pulse_trio.sdk import Registry, RetryableError, TaskContext

registry = Registry()


@registry.handler("billing", "invoice.send")
async def send_invoice(task: TaskContext, invoice: Invoice) -> dict:
    if task.effect_uncertain and task.idempotency_key in SENT:
        return dict(SENT[task.idempotency_key], deduplicated=True)
    if invoice.simulate_outage and task.attempt == 1:
        raise RetryableError("mail gateway unavailable", code="gateway.unavailable")
    with trio.fail_after(5):
        await trio.sleep(0.2)  # the network call, with a Trio library
    receipt = {"invoice": invoice.invoice, "sent": True, "attempt": task.attempt, "message_id": f"msg-{invoice.invoice}"}
    SENT[task.idempotency_key] = receipt
    return receipt


registry.add("billing", "invoice.render", render_invoice)
