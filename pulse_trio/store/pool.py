"""A small thread-safe pool of PyMySQL connections.

A connection is handed to one thread at a time and returned (or discarded
after an error) by that thread: PyMySQL connections are never shared. The
facade's CapacityLimiter keeps concurrent users at or below ``size``, so the
pool never opens more than that many connections for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pymysql

from pulse_trio.dburl import DatabaseConfig, connect

# Every transaction here locks what it changes with locking reads, so it needs
# no snapshot; READ COMMITTED also avoids the gap locks that made concurrent
# SKIP LOCKED claims deadlock under REPEATABLE READ (platform.md §9).
SESSION_SETUP = (
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    # Waits are short by design (nobody waits on a pick-up); a long one is a
    # bug or an outage, and 1205 is retried.
    "SET SESSION innodb_lock_wait_timeout = 10",
)


class ConnectionPool:
    def __init__(self, config: DatabaseConfig, size: int,
                 connector: Callable[[DatabaseConfig], pymysql.connections.Connection] = connect) -> None:
        if size < 1:
            raise ValueError("pool size must be at least 1")
        self.config = config
        self.size = size
        self._connector = connector
        self._idle: list[pymysql.connections.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        self.opened = 0
        self.discarded = 0

    def acquire(self) -> pymysql.connections.Connection:
        with self._lock:
            if self._closed:
                raise RuntimeError("the pool is closed")
            if self._idle:
                return self._idle.pop()
        conn = self._connector(self.config)
        try:
            with conn.cursor() as cur:
                for statement in SESSION_SETUP:
                    cur.execute(statement)
            conn.commit()
        except BaseException:
            conn.close()
            raise
        with self._lock:
            self.opened += 1
        return conn

    def release(self, conn: pymysql.connections.Connection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self.size:
                self._idle.append(conn)
                return
        _close_quietly(conn)

    def discard(self, conn: pymysql.connections.Connection) -> None:
        with self._lock:
            self.discarded += 1
        _close_quietly(conn)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            _close_quietly(conn)

    @property
    def idle(self) -> int:
        with self._lock:
            return len(self._idle)


def _close_quietly(conn: pymysql.connections.Connection) -> None:
    try:
        conn.close()
    except Exception:  # already broken: closing is best effort
        pass
