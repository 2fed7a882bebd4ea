"""The pgqueuer side of the comparison: one no-op entrypoint on pgqueuer's default (durable) tables.

Started as ``python pgqueuer_app.py --max-concurrent-tasks C --batch-size B``
by the harness, which sweeps both: ``pgqueuer.run``, what ``pgq run
pgqueuer_app:main`` calls, on uvloop as the CLI picks it (``pgq run`` itself
fails in 1.6.0 before starting: its ``--log-level`` parser hands the logging
setup a string). The database is the
harness's own fresh one, named in COMPARE_PG_DBNAME (host, port and user come
from the PG* variables and asyncpg's defaults, as libpq's do for the others).
asyncpg is the driver pgqueuer's CLI picks first. The handler is ``async``, so
it runs on the worker's event loop, as pulse-trio's bench handler does.

Once the worker's LISTEN is live (pgqueuer's own NOTIFY round trip,
``listener_healthy``, answers), it touches a file in COMPARE_READY_DIR: the
harness submits only when every worker would hear the first batch.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from datetime import timedelta
from pathlib import Path
from typing import AsyncIterator

import asyncpg
import pgqueuer
import uvloop
from pgqueuer import PgQueuer
from pgqueuer.errors import FailingListenerError
from pgqueuer.models import Job

ENTRYPOINT = "compare.noop"


@contextlib.asynccontextmanager
async def main() -> AsyncIterator[PgQueuer]:
    connection = await asyncpg.connect(database=os.environ.get("COMPARE_PG_DBNAME"))
    pgq = PgQueuer.from_asyncpg_connection(connection)

    @pgq.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        return None

    announcer = asyncio.create_task(_announce_ready(pgq))
    try:
        yield pgq
    finally:
        announcer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await announcer
        await connection.close()


async def _announce_ready(pgq: PgQueuer) -> None:
    while True:
        try:
            await pgq.qm.listener_healthy(timeout=timedelta(seconds=1))
        except FailingListenerError:
            continue  # the queue manager has not started listening yet
        break
    ready_dir = os.environ.get("COMPARE_READY_DIR")
    if ready_dir:
        Path(ready_dir, f"pgqueuer-{os.getpid()}").touch()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-concurrent-tasks", type=int, required=True)
    parser.add_argument("--batch-size", type=int, default=10)  # pgq run's default
    options = parser.parse_args()
    uvloop.run(pgqueuer.run(main, max_concurrent_tasks=options.max_concurrent_tasks,
                            batch_size=options.batch_size))
