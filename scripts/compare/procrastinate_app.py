"""The procrastinate side of the comparison: one no-op task on the default Postgres job table.

The connection string comes from COMPARE_PG_CONNINFO (set by the harness to
its own fresh database), the connection pool's size from COMPARE_PG_POOL_SIZE.
procrastinate's pool is psycopg's, whose default is four connections; its docs
ask for about one connection per sub-worker plus one when jobs are short, as
here, because a sub-worker that waits for a connection does nothing. So the
harness sizes the pool to the worker's ``--concurrency`` plus one.

The task is ``async`` like pulse-trio's bench handler, so it runs on the
worker's event loop and not in a thread.
"""

from __future__ import annotations

import os

from procrastinate import App, PsycopgConnector

TASK_NAME = "compare.noop"
QUEUE = "compare"


def make_app(conninfo: str, pool_size: int | None = None) -> App:
    """A fresh app on one database: the harness makes one per run, each on its own database."""
    sizing = {} if pool_size is None else {"min_size": pool_size, "max_size": pool_size}
    app = App(connector=PsycopgConnector(conninfo=conninfo, **sizing))

    @app.task(name=TASK_NAME, queue=QUEUE)
    async def noop() -> dict:
        return {}

    return app


_pool = os.environ.get("COMPARE_PG_POOL_SIZE")
app = make_app(os.environ.get("COMPARE_PG_CONNINFO", "dbname=postgres"), int(_pool) if _pool else None)
