"""The procrastinate side of the comparison: one no-op task on the default Postgres job table.

The connection string comes from COMPARE_PG_CONNINFO (set by the harness to
its own fresh database). The task is ``async`` like pulse-trio's bench
handler, so it runs on the worker's event loop and not in a thread.
"""

from __future__ import annotations

import os

from procrastinate import App, PsycopgConnector

app = App(connector=PsycopgConnector(conninfo=os.environ.get("COMPARE_PG_CONNINFO", "dbname=postgres")))


@app.task(name="compare.noop", queue="compare")
async def noop() -> dict:
    return {}
