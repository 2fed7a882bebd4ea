"""One SQL statement against a test database, for tests that check what was written.

Shared by every test folder (``tests/`` is on the ``pythonpath`` of
pyproject.toml). Each call is its own connection and transaction, committed,
so a read sees everything committed before it and a write is visible to
the service under test at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from pulse_trio.dburl import DatabaseConfig
from pulse_trio.store.engine.tx import Tx
from pulse_trio.store.engine.writer import connect

T = TypeVar("T")

#: InnoDB's ``information_schema.innodb_trx`` is a cache, refreshed only when nobody has read it for 100 ms:
#: a loop that reads it more often sees the same rows for ever (a lock wait that began after never shows).
#: Pollers wait this long between two reads.
INNODB_TRX_READ_GAP_S = 0.12

#: The transactions of a server waiting for a row lock now (read it at most every INNODB_TRX_READ_GAP_S).
LOCK_WAITS = "SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT'"


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


@contextlib.contextmanager
def user_with_password(server: DatabaseConfig, user: str, grant: str) -> Iterator[DatabaseConfig]:
    """``server`` as ``user``, made for the block with a fresh password and ``GRANT {grant}`` (from any host), then
    dropped: for tests of where a password must not show."""
    password = "pw-" + os.urandom(8).hex()
    root = connect(server, database=False)
    try:
        with root.cursor() as cursor:
            for host in ("localhost", "%"):
                cursor.execute("CREATE OR REPLACE USER %s@%s IDENTIFIED BY %s", (user, host, password))
                cursor.execute(f"GRANT {grant} TO %s@%s", (user, host))
        yield dataclasses.replace(server, user=user, password=password)
    finally:
        with root.cursor() as cursor:
            for host in ("localhost", "%"):
                cursor.execute("DROP USER IF EXISTS %s@%s", (user, host))
        root.close()


@contextlib.contextmanager
def purge_held_back(config: DatabaseConfig) -> Iterator[None]:
    """InnoDB's purge held back for the block: a connection holds a consistent snapshot (as a backup does), so the
    index entries of rows changed or deleted since stay, and count in the optimizer's estimates."""
    snapshot = connect(config)
    try:
        with snapshot.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        yield
    finally:
        snapshot.rollback()
        snapshot.close()


def plan(config: DatabaseConfig, query: str, args: Any = (), verb: str = "EXPLAIN") -> list[dict[str, Any]]:
    """MariaDB's ``EXPLAIN`` (or ``ANALYZE``: the plan plus what running it really read, ``r_rows``) of
    ``query``, one dict per row of the plan; the statement itself is rolled back."""
    conn = connect(config)
    try:
        with conn.cursor() as cur:
            cur.execute(f"{verb} {query}", args)
            names = [d[0] for d in cur.description]
            found = [dict(zip(names, r)) for r in cur.fetchall()]
        conn.rollback()
        return found
    finally:
        conn.close()


def index_reads(config: DatabaseConfig, call: Callable[[Tx], T], **tx_fields: Any) -> tuple[T, int]:
    """Run ``call`` on a transaction of its own (rolled back): its answer, and how many index entries
    and rows its statements read (the connection's ``Handler_read_*`` counters, and
    ``Handler_icp_attempts``: the entries a pushed-down index condition looked at and turned away,
    which no ``Handler_read_*`` counts), for tests that hold a question's cost flat while the tables grow."""
    conn = connect(config)
    try:
        with conn.cursor() as cur:
            def reads() -> int:
                cur.execute("SHOW SESSION STATUS WHERE Variable_name LIKE 'Handler_read%'"
                            " OR Variable_name = 'Handler_icp_attempts'")
                return sum(int(value) for _, value in cur.fetchall())

            before = reads()
            answer = call(Tx(cur, **tx_fields))
            read = reads() - before
        conn.rollback()
        return answer, read
    finally:
        conn.close()
