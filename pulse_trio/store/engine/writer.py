"""Which node of a multi-host database URL this process writes to.

pulse-trio runs on a Galera cluster as a *single writer*: row locks, and so
``SKIP LOCKED`` pick-up, are local to one node, so two instances writing
through two nodes would claim the same rows and settle it by certification
failures at COMMIT. Every process therefore applies the same rule to the
same list of nodes:

* the writer is the first node, in the URL's order, that reports itself
  ready: ``wsrep_local_state = 4`` (Synced) and ``wsrep_ready = ON``. A
  server without Galera (``wsrep_on`` off or unknown) is always ready;
* the choice is sticky: it stands until the writer fails (a connection to
  it is lost, or it answers "not ready"), and then it is re-checked first,
  so a blip on a healthy writer changes nothing, nor does a login the
  writer refuses itself (no connection slot free): the store's retries
  wait for it, as every other process's do;
* the choice is recorded in the database (table ``db_writer``, one row), so
  processes agree even when they choose at different times: a process that
  starts, or whose writer failed, takes the recorded node when it is ready
  (and is not the one that just failed); otherwise the first ready node in
  list order, which it records. So a node that comes back after a failure
  does not pull writers back to it, not even newly started ones: the record
  names the node everyone moved to, and it stands until that node fails;
* a process follows the record: one that saw no failure while the others
  moved (it was idle through the blip, or its writer was ready again by the
  time it re-checked) would otherwise write through the old node for good.
  So a re-check that finds the writer ready still joins the recorded node
  when that one is ready, and a working process re-reads the record at most
  every :data:`FOLLOW_AFTER_S` (:meth:`WriterSelector.follow`, from the
  pool), so a transaction pays for it only that often.

Recording is best effort (a database not migrated yet has no table): the
rule then falls back to list order, which every process applies alike.

This module sits in the store, above ``pulse_trio.dburl``: the URL module
parses and opens a connection to one server, and this one chooses the
server of a list (its probes and its ``db_writer`` record are SQL, which
lives in the store). :func:`connect`, :func:`create_database` and
:func:`drop_database` take any URL, one host or several.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import threading
import time

import pymysql

from pulse_trio import dburl
from pulse_trio.dburl import UNKNOWN_VARIABLE, DatabaseConfig, connect_node, set_causal_reads
from pulse_trio.store.engine.failures import node_answered, tls_refused
from pulse_trio.store.engine.tx import db_actor

log = logging.getLogger("pulse_trio.dbwriter")  # the logger's name operators already filter on

#: A probe gives a node this long to connect (capped by the URL's connect_timeout) and
#: then this long for each read or write: a node that accepts and hangs is not ready.
PROBE_TIMEOUT_S = 2.0
#: A writer re-checked within this long is not re-checked again for the next failure.
RECHECK_AFTER_S = 0.5
#: A process that saw no failure re-reads the recorded writer at most this often, when it next works.
FOLLOW_AFTER_S = 5.0
#: CR_CONN_HOST_ERROR: what a caller sees when no node is ready.
NO_WRITER = 2003


class WriterSelector:
    """The writer choice for one list of nodes (one per process and list: see :func:`writer_for`)."""

    def __init__(self, config: DatabaseConfig) -> None:
        if not config.clustered:
            raise ValueError("a writer is chosen among several hosts")
        self.config = config
        self._lock = threading.Lock()
        self._writer: tuple[str, int] | None = None
        self._checked_at = 0.0
        self._follow_at = 0.0  # monotonic time from which the next transaction re-reads the record
        #: How many times the writer failed over, for logs and tests.
        self.changes = 0

    @property
    def writer(self) -> tuple[str, int] | None:
        """The current choice, if one was made (without probing)."""
        return self._writer

    def connect(self, config: DatabaseConfig, *, database: bool = True,
                io_timeout: float | None = None) -> pymysql.connections.Connection:
        """A connection to the writer (``config``'s database and login); on a failure, re-choose once."""
        target = self.current()
        try:
            return connect_node(config.for_node(*target), database=database, io_timeout=io_timeout)
        except (pymysql.err.MySQLError, OSError):
            self.failed(target)
            return connect_node(config.for_node(*self.current()), database=database, io_timeout=io_timeout)

    def current(self) -> tuple[str, int]:
        """The writer, choosing one first if there is none."""
        with self._lock:
            if self._writer is None:
                self._choose(previous=None)
            assert self._writer is not None
            return self._writer

    def reset(self) -> None:
        """Forget the choice: the next connection walks the list from the top (a fresh process's view)."""
        with self._lock:
            self._writer = None

    def failed(self, node: tuple[str, int]) -> None:
        """A connection to ``node`` was lost or refused as not ready: re-check, and fail over if needed.

        Never raises: with no node ready the choice is left empty, and the
        next connection (:meth:`current`) tries again and reports it.
        """
        with self._lock:
            if node != self._writer:
                return  # an older writer's connection; the choice has moved already
            if time.monotonic() - self._checked_at < RECHECK_AFTER_S:
                return  # re-checked a moment ago, by the failure of a sibling connection
            if _ready(self.config.for_node(*node)):
                recorded = self._recorded(node)
                if recorded is None or recorded == node:
                    self._checked_at = time.monotonic()
                    return  # the writer is fine: a blip on one connection
                log.warning("database writer %s:%s failed and is back; joining %s:%s, the recorded writer",
                            *node, *recorded)
                self._take(recorded)
                return
            self._writer = None
            with contextlib.suppress(pymysql.err.OperationalError):
                self._choose(previous=node)

    def follow(self) -> None:
        """Join the recorded writer if the others moved while this process saw no failure (see the module).

        Cheap when not due: the pool calls it for every connection it hands out.
        """
        if time.monotonic() < self._follow_at:
            return
        with self._lock:
            writer = self._writer
            if writer is None or time.monotonic() < self._follow_at:
                return  # no choice yet (the next connection makes one, reading the record), or a sibling follows
            self._follow_at = time.monotonic() + FOLLOW_AFTER_S
        recorded = self._recorded(writer)
        if recorded is None or recorded == writer:
            return
        with self._lock:
            if self._writer == writer:
                log.warning("database writer moved to %s:%s while this process wrote through %s:%s; joining it",
                            *recorded, *writer)
                self._take(recorded)

    def _choose(self, previous: tuple[str, int] | None) -> None:
        failures: list[BaseException] = []
        candidates = [node for node in self.config.hosts if node != previous]
        first = next((node for node in candidates if _ready(self.config.for_node(*node), failures)), None)
        if first is None:
            self._writer = None
            refused = [exc for exc in failures if tls_refused(exc)]
            if refused and len(refused) == len(candidates):
                raise refused[0]  # the URL's TLS, not an outage: its reason, and a refusal (no retry mends it)
            names = ", ".join(f"{h}:{p}" for h, p in self.config.hosts)
            tls = f" ({len(refused)} failed the URL's TLS: {refused[0]})" if refused else ""
            raise pymysql.err.OperationalError(NO_WRITER, f"no database node is synced and ready among {names}{tls}")
        chosen = self._recorded(first, avoid=previous)  # the node the others moved to: stay with them
        if chosen is None:
            chosen = first
            _write_record(self.config.for_node(*chosen), chosen)
        if previous is not None:
            log.warning("database writer %s:%s failed; writing to %s:%s now", *previous, *chosen)
        self._take(chosen, moved=previous is not None)

    def _recorded(self, on: tuple[str, int], *, avoid: tuple[str, int] | None = None) -> tuple[str, int] | None:
        """The writer ``db_writer`` names, read on ``on`` (a node that answers), if this process may take it.

        That is ``on`` itself, or another node of the list that is ready,
        never ``avoid`` (the node that just failed); None otherwise.
        """
        recorded = _read_record(self.config.for_node(*on))
        if recorded == on or (recorded is not None and recorded != avoid and recorded in self.config.hosts
                                 and _ready(self.config.for_node(*recorded))):
            return recorded
        return None

    def _take(self, node: tuple[str, int], *, moved: bool = True) -> None:
        """Write through ``node`` from now on (under the lock); the record was just read or written."""
        if moved:
            self.changes += 1
        self._writer = node
        now = time.monotonic()
        self._checked_at, self._follow_at = now, now + FOLLOW_AFTER_S


def _probe(node: DatabaseConfig, *, database: bool = True) -> pymysql.connections.Connection:
    """A connection to ``node`` whose every step, the connect included, waits at most :data:`PROBE_TIMEOUT_S`."""
    return connect_node(dataclasses.replace(node, connect_timeout=min(PROBE_TIMEOUT_S, node.connect_timeout)),
                        database=database, io_timeout=PROBE_TIMEOUT_S)


def _ready(node: DatabaseConfig, failures: list[BaseException] | None = None) -> bool:
    """The node answers and reports itself Synced and ready (a server without Galera is ready).

    A node that refuses the probe's login itself (every connection slot
    taken, say) is up and counts as ready: moving off it would take this
    process alone to another writer, while the others stay. A failed
    connect is added to ``failures``, for the caller to say why no node is.
    """
    try:
        conn = _probe(node, database=False)
    except (pymysql.err.MySQLError, OSError) as exc:
        if failures is not None:
            failures.append(exc)
        return node_answered(exc)
    try:
        with conn.cursor() as cur:
            try:
                cur.execute("SELECT @@wsrep_on")
                if not cur.fetchone()[0]:
                    return True
            except pymysql.err.MySQLError as exc:
                if exc.args and exc.args[0] == UNKNOWN_VARIABLE:
                    return True
                raise
            cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_state', 'wsrep_ready')")
            status = {name.lower(): value for name, value in cur.fetchall()}
        return status.get("wsrep_local_state") == "4" and status.get("wsrep_ready") == "ON"
    except (pymysql.err.MySQLError, OSError):
        return False
    finally:
        with contextlib.suppress(Exception):
            conn.close()


def _node_text(node: tuple[str, int]) -> str:
    return f"{node[0]}:{node[1]}"


def _read_record(node: DatabaseConfig) -> tuple[str, int] | None:
    """The writer recorded in ``db_writer``, read causally on a ready node; None if none or unreadable."""
    try:
        conn = _probe(node)
    except (pymysql.err.MySQLError, OSError):
        return None
    try:
        with conn.cursor() as cur:
            set_causal_reads(cur)
            cur.execute("SELECT node FROM db_writer WHERE id = 1")
            row = cur.fetchone()
        conn.rollback()
    except (pymysql.err.MySQLError, OSError):
        return None  # not migrated yet, or the node went away: list order decides
    finally:
        with contextlib.suppress(Exception):
            conn.close()
    if row is None:
        return None
    host, _, port = str(row[0]).rpartition(":")
    return (host, int(port)) if host and port.isdigit() else None


def _write_record(node: DatabaseConfig, writer: tuple[str, int]) -> None:
    """Record ``writer`` for the processes that choose later; a failure only leaves list order to decide."""
    try:
        conn = _probe(node)
    except (pymysql.err.MySQLError, OSError):
        return
    try:
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO db_writer (id, node, chosen_at, chosen_by) VALUES (1, %s, UTC_TIMESTAMP(6), %s) "
                "ON DUPLICATE KEY UPDATE node = VALUES(node), chosen_at = VALUES(chosen_at), "
                "chosen_by = VALUES(chosen_by)",
                (_node_text(writer), db_actor(f"{socket.gethostname()}:{os.getpid()}")))
        conn.commit()
    except (pymysql.err.MySQLError, OSError) as exc:
        log.debug("writer %s not recorded: %s", _node_text(writer), exc)
    finally:
        with contextlib.suppress(Exception):
            conn.close()


_selectors: dict[tuple, WriterSelector] = {}
_selectors_lock = threading.Lock()


def writer_for(config: DatabaseConfig) -> WriterSelector:
    """The process's selector for this list of nodes, login and database: one choice shared by its pools."""
    key = (config.hosts, config.user, config.password, config.connect_timeout, config.database, config.tls)
    with _selectors_lock:
        selector = _selectors.get(key)
        if selector is None:
            selector = _selectors[key] = WriterSelector(config)
        return selector


def connect(config: DatabaseConfig, *, database: bool = True,
            io_timeout: float | None = None) -> pymysql.connections.Connection:
    """Open one connection (to the writer, for several nodes); the caller owns it and must close it.

    ``io_timeout``: as :func:`~pulse_trio.dburl.connect_node` takes it.
    """
    if config.clustered:
        return writer_for(config).connect(config, database=database, io_timeout=io_timeout)
    return connect_node(config, database=database, io_timeout=io_timeout)


def create_database(config: DatabaseConfig) -> None:
    """Create the configured database (on the writer, for several nodes) if it does not exist yet."""
    dburl.create_database(config, connector=connect)


def drop_database(config: DatabaseConfig) -> None:
    """Drop the configured database (on the writer, for several nodes) if it exists."""
    dburl.drop_database(config, connector=connect)
