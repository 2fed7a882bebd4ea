"""A stop while the node's start waits on a database that holds it: it ends promptly, and is no outage.

The cluster settings are read; the node's row then waits on a table lock
another connection holds on ``server_nodes`` (the database answers, but
never in time: the store's retries would wait out its lock wait ten
times). Abandoning the start (a SIGTERM while starting cancels it) cuts the
store's work short, and the node start that meets that cut ends there,
instead of logging the database as away and going on.
"""

from __future__ import annotations

import contextlib
import logging

import pytest
import trio

from pulse_trio.config import Settings
from pulse_trio.dburl import connect
from pulse_trio.serve import serve

pytestmark = pytest.mark.live

#: A start cut short ends within this (its threads' statements are ended at once, not waited out).
PROMPT_S = 2.0


async def _rows(db, query: str) -> list[tuple]:
    def read() -> list[tuple]:
        with contextlib.closing(connect(db)) as conn, conn.cursor() as cur:
            cur.execute(query)
            return list(cur.fetchall())
    return await trio.to_thread.run_sync(read)


async def _node_start_waits_on_its_lock(db) -> None:
    """Until a statement of another connection waits on a table lock of ``server_nodes``."""
    while not await _rows(db, "SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID()"
                              " AND STATE LIKE '%%metadata lock%%' AND INFO LIKE '%%server_nodes%%'"):
        await trio.sleep(0.05)


async def test_a_stop_while_the_node_start_waits_on_the_database_ends_promptly_and_is_no_outage(db, caplog):
    holder = connect(db)
    try:
        with holder.cursor() as cur:
            cur.execute("LOCK TABLES server_nodes WRITE")
        settings = Settings(worker_listen=("127.0.0.1", 0), http_listen=("127.0.0.1", 0))
        with caplog.at_level(logging.WARNING, logger="pulse_trio"):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: serve(settings, db, handle_signals=False))
                with trio.fail_after(15):
                    await _node_start_waits_on_its_lock(db)
                stopped_at = trio.current_time()
                nursery.cancel_scope.cancel()  # what a SIGTERM while starting does
            took = trio.current_time() - stopped_at
    finally:
        holder.close()  # its table lock with it
    assert took < PROMPT_S, took
    outages = [r.getMessage() for r in caplog.records if "not recorded yet" in r.getMessage()]
    assert not outages, outages
    assert await _rows(db, "SELECT node_id FROM server_nodes") == []
