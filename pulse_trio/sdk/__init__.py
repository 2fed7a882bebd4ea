"""The worker SDK: run Python handlers for pulse-trio tasks, under asyncio or Trio.

It speaks ``pulse.worker.v1`` through the contract layer only, like any
third-party worker would (it never imports the server or the store), and
is written against AnyIO, so the same ``Worker`` runs under
``asyncio.run()`` (uvloop too) and ``trio.run()``::

    from pulse_trio.sdk import Registry, TaskContext, Worker, RetryableError

    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send_invoice(task: TaskContext, invoice: Invoice) -> dict:
        await asyncio.sleep(0.1)   # any asyncio library
        return {"sent": invoice.number}

    asyncio.run(Worker("ws://127.0.0.1:7380/v1/worker", token, registry, capacity=8).run())

Modules: ``registry`` (handlers), ``context`` (what a handler gets),
``payload`` (typed payloads), ``errors`` (outcomes a handler raises), ``outcome`` (outcome → finish),
``protocol`` (sans-IO session checks and pending requests), ``frames``
(lease commands from fields encoded once; command acks in one pass), ``websocket``
(the RFC 6455 client on ``websockets``' sans-IO codec), ``endpoint`` (URLs and token checked when a worker is made), ``transport`` (one
session: reader, writer, heartbeat), ``refusal`` (whose fault a refusal is: the token's, a URL's, or
nobody's for good), ``lease`` (one attempt, through reconnects),
``pool`` (the handler tasks, a context per handler),
``clock`` (every lease's renewal and watchdog timer, in one task),
``worker`` (the reconnect loop, capacity, drain). See ``docs/worker.md``.
"""

from pulse_trio.sdk.context import CANCEL_REQUESTED, LEASE_LOST, TaskContext
from pulse_trio.sdk.errors import (
    CommandRefused, ConnectionLost, HandlerOutcome, LeaseLost, PermanentError, ProtocolViolation, RetryableError,
    TaskCancelled, UnknownOutcome, WorkerError, WorkerRefused,
)
from pulse_trio.sdk.payload import INVALID_PAYLOAD, InvalidPayload
from pulse_trio.sdk.registry import Handler, Registry
from pulse_trio.sdk.worker import DEFAULT_URL, Backoff, Worker, WorkerStats

__all__ = [
    "Backoff", "CANCEL_REQUESTED", "CommandRefused", "ConnectionLost", "DEFAULT_URL", "Handler", "HandlerOutcome",
    "INVALID_PAYLOAD", "InvalidPayload", "LEASE_LOST", "LeaseLost", "PermanentError", "ProtocolViolation", "Registry", "RetryableError", "TaskCancelled",
    "TaskContext", "UnknownOutcome", "Worker", "WorkerError", "WorkerRefused", "WorkerStats",
]
