"""One serve process: the worker service, and the HTTP API beside it.

The one module that knows both halves. ``pulse_trio.server`` runs the
worker endpoint, the dispatcher and the timers; ``pulse_trio.http`` serves
the API through the producer client and the store, plus the narrow
:class:`~pulse_trio.live_instance.LiveInstance` for what only the running
instance can do. Neither package imports the other: they meet here.
"""

from __future__ import annotations

import trio

from pulse_trio.config import Settings
from pulse_trio.dburl import DatabaseConfig
from pulse_trio.http.server import HttpApi
from pulse_trio.server.clock import ServiceClock
from pulse_trio.server.service import DEFAULT_POOL_SIZE, ServiceHandle, run_service


async def serve(settings: Settings, database: DatabaseConfig, *, handle_signals: bool = True,
                clock: ServiceClock | None = None, pool_size: int = DEFAULT_POOL_SIZE,
                task_status: trio.TaskStatus[ServiceHandle] = trio.TASK_STATUS_IGNORED) -> None:
    """Run the instance and its HTTP API until stopped (the database must already be migrated)."""
    await run_service(settings, database, beside=HttpApi(settings), handle_signals=handle_signals, clock=clock,
                      pool_size=pool_size, task_status=task_status)
