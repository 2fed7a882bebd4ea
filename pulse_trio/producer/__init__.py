"""Producers for applications: submit tasks and await their outcomes over the HTTP API.

::

    from pulse_trio.producer import AsyncClient

    async with AsyncClient("http://127.0.0.1:7381", token) as client:
        handle = await client.submit("billing", "invoice.send", {"invoice": 991})
        receipt = await handle.result(timeout=30)   # or TaskFailed / TaskCancelled / WaitTimeout ...

``Client`` has the same methods, blocking. Both need a producer token (or
an operator's), never database credentials. For transactional enqueue
(the task exists if and only if your own database transaction commits),
use :class:`pulse_trio.client.DatabaseClient` with ``connection=``.
"""

from pulse_trio.producer.calls import task
from pulse_trio.producer.clients import AsyncClient, AsyncTaskHandle, Client, TaskHandle
from pulse_trio.producer.errors import (
    ClientError, RequestRefused, TaskCancelled, TaskFailed, TaskNotFound, TaskOutcomeError, TaskUnknown, WaitTimeout,
)

__all__ = ["AsyncClient", "AsyncTaskHandle", "Client", "ClientError", "RequestRefused", "TaskCancelled", "TaskFailed",
           "TaskHandle", "TaskNotFound", "TaskOutcomeError", "TaskUnknown", "WaitTimeout", "task"]
