"""An example worker: invoices for a billing system.

Run it against a local service (see docs/worker.md, "Quick start")::

    pulse-trio worker run examples.billing_worker:registry --token "$TOKEN" --capacity 4

and submit work::

    pulse-trio submit --queue billing --kind invoice.send --payload '{"invoice": 991, "amount": "12.50"}'

It shows the three things every handler should think about:

* the **idempotency key** is the business identity of the effect: the fake
  mail gateway below remembers what it already sent under that key, so an
  attempt that runs again (``effect_uncertain``) does not mail twice;
* **outcomes** are raised, not returned: a gateway outage is a
  ``RetryableError`` (the service schedules the next attempt), a malformed
  invoice a ``PermanentError``;
* a **sync handler** (PDF rendering) runs in a thread and polls
  ``task.check_cancelled()``.
"""

from __future__ import annotations

import time

import trio

from pulse_trio.sdk import PermanentError, Registry, RetryableError, TaskContext

registry = Registry()

#: Stands in for an external mail provider that deduplicates by key.
_SENT: dict[str, dict] = {}


@registry.handler("billing", "invoice.send")
async def send_invoice(task: TaskContext) -> dict:
    invoice = task.payload.get("invoice")
    if not isinstance(invoice, int):
        raise PermanentError("payload needs an integer 'invoice'", code="invoice.malformed")
    if task.effect_uncertain and task.idempotency_key in _SENT:
        # An earlier attempt may have sent it: ask the provider instead of sending again.
        return dict(_SENT[task.idempotency_key], deduplicated=True)
    if task.payload.get("simulate_outage") and task.attempt == 1:
        raise RetryableError("mail gateway unavailable", code="gateway.unavailable")
    await trio.sleep(0.2)  # the network call
    receipt = {"invoice": invoice, "sent": True, "attempt": task.attempt, "message_id": f"msg-{invoice}"}
    _SENT[task.idempotency_key] = receipt
    print(f"invoice {invoice} sent (task {task.task_id}, attempt {task.attempt})", flush=True)
    return receipt


@registry.handler("billing", "invoice.render", sync=True)
def render_invoice(task: TaskContext) -> dict:
    pages = int(task.payload.get("pages", 1))
    for _ in range(pages):
        task.check_cancelled()  # a sync handler cannot be interrupted: it checks between steps
        time.sleep(0.05)  # render one page
    return {"invoice": task.payload.get("invoice"), "pages": pages}
