"""One SQL statement against a test database, for tests that check what was written.

Shared by every test folder (``tests/`` is on the ``pythonpath`` of
pyproject.toml). Each call is its own connection and transaction, committed,
so a read sees everything committed before it and a write is visible to
the service under test at once.
"""

from __future__ import annotations

from typing import Any

from pulse_trio.dburl import DatabaseConfig
from pulse_trio.store.engine.writer import connect


def rows(config: DatabaseConfig, query: str, args: Any = ()) -> list[tuple]:
    """Run ``query`` with ``args``; its rows (none for a write)."""
    conn = connect(config)
    try:
        with conn.cursor() as cur:
            cur.execute(query, args)
            found = list(cur.fetchall())
        conn.commit()
        return found
    finally:
        conn.close()
