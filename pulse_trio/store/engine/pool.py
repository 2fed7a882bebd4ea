"""A small thread-safe pool of PyMySQL connections.

A connection is handed to one thread at a time and returned (or discarded
after an error) by that thread: PyMySQL connections are never shared. The
Trio bridge's CapacityLimiter (``trio_bridge.py``) keeps concurrent users at
or below ``size``, so the pool never opens more than that many connections
for it.

On a multi-host URL every connection goes to the process's writer
(``writer.py``): a connection that is lost or whose node stops being ready
has the writer re-checked (:meth:`ConnectionPool.lost`), the record of
the writer is re-read now and then (:meth:`WriterSelector.follow`), and
idle connections to a writer the process has left are closed, not handed
out.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Callable

import pymysql

from pulse_trio.dburl import DatabaseConfig, set_causal_reads
from pulse_trio.store.engine.failures import LOST, classify
from pulse_trio.store.engine.writer import connect, writer_for

#: The server drops one of our connections after this long without a statement.
#: A transaction function never pauses between statements, so a connection
#: that falls silent inside a transaction belongs to a host that died or was
#: cut off: its row locks (a task, a lease) would otherwise stay held, and
#: skipped by every SKIP LOCKED timer, for the server's default eight hours,
#: until TCP noticed. The server rolls the transaction back when it drops it.
#: The pool never hands out a connection idle for half of it (the server may
#: be about to drop it): it opens a fresh one instead.
SERVER_IDLE_TIMEOUT_S = 60
#: How long a statement waits for a row lock before it fails with 1205 (which is retried).
#: Waits are short by design (nobody waits on a pick-up); a long one is a bug or an outage.
LOCK_WAIT_TIMEOUT_S = 10
#: The longest one statement of the store takes once it has its locks (a purge batch's
#: delete, a count of a large kept history), with room for a loaded machine.
LONGEST_STATEMENT_S = 20
#: Each read and write on a pooled connection waits at most this long. A server that is
#: silent for longer hangs (a stopped mariadbd, a frozen VM or disk: its kernel still
#: acknowledges, so TCP never notices), and the connection counts as lost (2013): the
#: store runs the transaction again and, on a cluster, has the writer re-checked. Not
#: for migrations: they open connections of their own, without it.
STATEMENT_TIMEOUT_S = LOCK_WAIT_TIMEOUT_S + LONGEST_STATEMENT_S


def session_setup(server_idle_timeout_s: int = SERVER_IDLE_TIMEOUT_S) -> tuple[str, ...]:
    """The statements each pooled connection runs once, when it is opened."""
    return (
        # Every transaction here locks what it changes with locking reads, so it
        # needs no snapshot; READ COMMITTED also avoids the gap locks that made
        # concurrent SKIP LOCKED claims deadlock under REPEATABLE READ (docs/storage.md §3).
        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        f"SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_TIMEOUT_S}",
        # A table's metadata lock (held by a migration's ALTER) is waited for as long as a row's, and
        # fails alike (1205, retried), well inside STATEMENT_TIMEOUT_S: the server's default is a year.
        f"SET SESSION lock_wait_timeout = {LOCK_WAIT_TIMEOUT_S}",
        f"SET SESSION wait_timeout = {int(server_idle_timeout_s)}",
    )


def connect_pooled(config: DatabaseConfig) -> pymysql.connections.Connection:
    """The pool's own connector: the writer's, every read and write bounded by :data:`STATEMENT_TIMEOUT_S`."""
    return connect(config, io_timeout=STATEMENT_TIMEOUT_S)


def connect_within(seconds: float) -> Callable[[DatabaseConfig], pymysql.connections.Connection]:
    """A connector whose connect, and every read and write after it, waits at most ``seconds``.

    For a transaction that must not wait out the pool's bounds (a stop's
    last record). On several nodes it connects to the process's writer: the
    choice is looked up by the URL's own config, since a config with another
    ``connect_timeout`` would key a choice of its own, made from scratch by
    probing nodes the process has already left.
    """

    def connector(config: DatabaseConfig) -> pymysql.connections.Connection:
        bounded = dataclasses.replace(config, connect_timeout=min(seconds, config.connect_timeout))
        if config.clustered:
            return writer_for(config).connect(bounded, io_timeout=seconds)
        return connect(bounded, io_timeout=seconds)

    return connector


class ConnectionPool:
    def __init__(self, config: DatabaseConfig, size: int,
                 connector: Callable[[DatabaseConfig], pymysql.connections.Connection] = connect_pooled, *,
                 server_idle_timeout_s: int = SERVER_IDLE_TIMEOUT_S, autocommit: bool = False) -> None:
        if size < 1:
            raise ValueError("pool size must be at least 1")
        if server_idle_timeout_s < 2:
            raise ValueError("the server idle timeout is at least 2 s")
        self.config = config
        self.size = size
        self._connector = connector
        self._setup = session_setup(server_idle_timeout_s)
        #: Autocommit connections serve read-only views: under READ COMMITTED each of
        #: their statements sees the latest commits either way, and they need no
        #: ROLLBACK round trip at the end.
        self.autocommit = autocommit
        #: Several nodes: connections go to the process's writer (``writer.py``).
        self._writer = writer_for(config) if config.clustered else None
        self.max_idle_s = server_idle_timeout_s / 2
        #: (connection, when it was released), most recently released last.
        self._idle: list[tuple[pymysql.connections.Connection, float]] = []
        #: Handed out and not back yet: what :meth:`interrupt` cuts short.
        self._in_use: set[pymysql.connections.Connection] = set()
        self._lock = threading.Lock()
        self._closed = False
        self.opened = 0
        self.discarded = 0

    def acquire(self) -> pymysql.connections.Connection:
        if self._closed:
            raise RuntimeError("the pool is closed")
        if self._writer is not None:
            self._writer.follow()
        with self._lock:
            if self._closed:
                raise RuntimeError("the pool is closed")
            stale: list[tuple[pymysql.connections.Connection, float]] = []
            if self._writer is not None:  # connections to a writer the process has left are closed
                writer = self._writer.writer
                stale = [(c, t) for c, t in self._idle if _node_of(c) != writer]
                if stale:
                    self._idle = [(c, t) for c, t in self._idle if _node_of(c) == writer]
            if self._idle and self._idle[-1][1] >= time.monotonic() - self.max_idle_s:
                conn = self._idle.pop()[0]  # the most recently released is the freshest
                self._in_use.add(conn)
                if not stale:
                    return conn
            else:
                conn = None
                stale, self._idle = stale + self._idle, []  # every idle one is older still
            self.discarded += len(stale)
        for old, _ in stale:
            _close_quietly(old)
        if conn is not None:
            return conn
        conn = self._connector(self.config)
        with self._lock:
            closed = self._closed  # interrupted while it connected
            if not closed:
                self._in_use.add(conn)
        if closed:
            _close_quietly(conn)
            raise RuntimeError("the pool is closed")
        try:
            with conn.cursor() as cur:
                for statement in self._setup:
                    cur.execute(statement)
                if self.autocommit:
                    # On a cluster, a read that must see every commit the cluster has acknowledged waits
                    # for the node to apply them first (``dburl.CAUSAL_READS``). Autocommit views need
                    # it: they may follow a commit made through another node (an instance that has not
                    # failed over yet, or just has). Writes do not: a transaction that read a row older
                    # than a commit it conflicts with fails certification at COMMIT (1213) and runs
                    # again (docs/storage.md §10). A URL of one address may be a cluster too, behind a
                    # proxy that moves connections between nodes; a server without Galera ignores it.
                    set_causal_reads(cur)
            conn.commit()
            if self.autocommit:
                conn.autocommit(True)
        except BaseException as exc:
            with self._lock:
                self._in_use.discard(conn)
            _close_quietly(conn)
            if self._writer is not None and classify(exc) == LOST and not self._closed:
                self._writer.failed(_node_of(conn))  # connected, but the node is not ready
            raise
        with self._lock:
            self.opened += 1
        return conn

    def release(self, conn: pymysql.connections.Connection) -> None:
        with self._lock:
            self._in_use.discard(conn)
            if not self._closed and len(self._idle) < self.size:
                self._idle.append((conn, time.monotonic()))
                return
        _close_quietly(conn)

    def discard(self, conn: pymysql.connections.Connection) -> None:
        with self._lock:
            self._in_use.discard(conn)
            self.discarded += 1
        _close_quietly(conn)

    def lost(self, conn: pymysql.connections.Connection) -> None:
        """``conn`` was lost or its node is not ready: drop it, and have the writer re-checked."""
        self.discard(conn)
        if self._writer is not None and not self._closed:  # an interrupt is ours, not the writer's failure
            self._writer.failed(_node_of(conn))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn, _ in idle:
            _close_quietly(conn)

    def interrupt(self) -> None:
        """:meth:`close`, and end every statement now waiting on a connection handed out (a stop's bound).

        Each connection in use is shut down under its thread, which then
        sees it lost at once instead of after its I/O bound, and finds the
        pool closed when it would try again. A connection being opened still
        takes up to its ``connect_timeout``, then is closed.
        """
        with self._lock:
            self._closed = True
            busy = list(self._in_use)
        self.close()
        for conn in busy:
            sock = getattr(conn, "_sock", None)
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:  # already closed by its thread
                    pass

    @property
    def idle(self) -> int:
        with self._lock:
            return len(self._idle)


def _node_of(conn: pymysql.connections.Connection) -> tuple[str, int]:
    return conn.host, conn.port


def _close_quietly(conn: pymysql.connections.Connection) -> None:
    try:
        conn.close()
    except Exception:  # already broken: closing is best effort
        pass
