"""The open transaction a transaction function works in.

A :class:`Tx` wraps one cursor of one pooled connection. Reads go through
:meth:`one` / :meth:`all`; writes through :meth:`write` / :meth:`cas`, which
refuse to run unless a registered transition function is on the stack: that
is how "every persistent write is a chart transition" is enforced rather than
hoped for. ``trail`` records which transitions ran, in order, so a composite
transaction (lease.assign + task.offer + key_permit.acquire) can be checked.

Times: the database holds naive UTC ``DATETIME(6)``; Python code holds aware
UTC datetimes. :func:`db_time` and :func:`py_time` convert at the boundary.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from pymysql.cursors import RE_INSERT_VALUES

UTC = dt.timezone.utc


class UnregisteredWrite(RuntimeError):
    """A write was attempted outside every registered transition function."""


class CasMismatch(RuntimeError):
    """A guarded UPDATE matched fewer rows than the locked rows promised.

    Rows are locked before they are checked, so this means a bug or a writer
    that skipped the locks; the transaction is rolled back and the facade
    retries it a bounded number of times.
    """


class ConcurrentChange(CasMismatch):
    """A row moved between two locks taken in the global order; re-running the function is safe."""


class InvariantViolation(RuntimeError):
    """Two charts disagree about one task (e.g. lease OFFERED but task not); never expected."""


# ``datetime.replace(tzinfo=...)`` parses keyword arguments on every call;
# rebuilding from date and time does the same conversion at a fraction of the
# cost, and every lease command converts several timestamps.
_combine = dt.datetime.combine


#: The ``*_by`` columns (who paused, updated, created, asked): VARCHAR(128) in every table that has one.
MAX_ACTOR_CHARS = 128


def db_actor(name: str) -> str:
    """Who did it, as its ``*_by`` column stores it: cut to the column, so a long CLI host name still fits
    and a re-run compares what was stored."""
    return name[:MAX_ACTOR_CHARS]


def db_time(value: dt.datetime) -> dt.datetime:
    """Aware (or naive UTC) datetime -> the naive UTC value stored in DATETIME(6)."""
    zone = value.tzinfo
    if zone is None:
        return value
    if zone is not UTC:
        value = value.astimezone(UTC)
    return _combine(value.date(), value.time())


def aware_utc(value: dt.datetime) -> dt.datetime:
    """A naive UTC datetime read from DATETIME(6) -> the same moment, aware."""
    return _combine(value.date(), value.time(), UTC)


def py_time(value: dt.datetime | None) -> dt.datetime | None:
    """DATETIME(6) value read back -> aware UTC datetime (None stays None)."""
    return None if value is None else aware_utc(value)


def after_ms(moment: dt.datetime, ms: int | float) -> dt.datetime:
    return moment + dt.timedelta(milliseconds=ms)


def rfc3339(value: dt.datetime) -> str:
    """The wire form: UTC, exactly 6 fractional digits, ``Z``."""
    return db_time(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Tx:
    """One transaction's cursor, plus bookkeeping that keeps writes honest."""

    __slots__ = ("cursor", "recovering", "node_id", "trail", "_stack", "wrote")

    def __init__(self, cursor: Any, *, recovering: bool = False, node_id: str | None = None) -> None:
        self.cursor = cursor
        #: True when the facade re-runs a function whose COMMIT was cut off:
        #: the function must re-read what it may already have committed.
        self.recovering = recovering
        #: The serve process (chart ``node``) this transaction runs for; None
        #: outside one (CLI, producer client). Who is asking is part of the
        #: store's identity, like the connection a transaction runs on:
        #: ``register`` records it on the session, and the node functions act
        #: on it (a node can only heartbeat itself, never declare itself lost).
        self.node_id = node_id
        self.trail: list[str] = []
        self._stack: list[str] = []
        self.wrote = False

    # -- bookkeeping used by the @transition decorator ---------------------
    def enter(self, name: str) -> None:
        self._stack.append(name)
        self.trail.append(name)

    def leave(self) -> None:
        self._stack.pop()

    @property
    def current(self) -> str | None:
        return self._stack[-1] if self._stack else None

    # -- reads ----------------------------------------------------------------
    def one(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> tuple | None:
        self.cursor.execute(sql, args)
        return self.cursor.fetchone()

    def all(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> list[tuple]:
        self.cursor.execute(sql, args)
        return list(self.cursor.fetchall())

    def literal(self, value: Any) -> str:
        """``value`` as an SQL literal, escaped by the connection (for values a statement repeats)."""
        return self.cursor.connection.escape(value)

    # -- writes -----------------------------------------------------------------
    def write(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> int:
        """Run one INSERT/UPDATE/DELETE inside the current transition; rows affected."""
        self._check_write(sql)
        self.wrote = True
        return self.cursor.execute(sql, args)

    def last_insert_id(self) -> int:
        """The AUTO_INCREMENT value the last INSERT of this transaction allocated."""
        return int(self.cursor.lastrowid)

    def write_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """A multi-row INSERT, sent as one statement.

        PyMySQL folds ``executemany`` into one statement only when its VALUES
        are all placeholders; otherwise it quietly sends one per row. A
        literal in the VALUES is refused here rather than paid for per row.
        """
        self._check_write(sql)
        if not RE_INSERT_VALUES.match(sql):
            raise ValueError(f"write_many needs INSERT ... VALUES (%s, ...) with placeholders only: {sql[:60]!r}")
        if not rows:
            return 0
        self.wrote = True
        return self.cursor.executemany(sql, rows)

    def cas(self, sql: str, args: Sequence[Any] | dict[str, Any], expected: int = 1) -> None:
        """A guarded compare-and-set UPDATE that must change exactly ``expected`` rows."""
        changed = self.write(sql, args)
        if changed != expected:
            raise CasMismatch(f"{self.current}: expected {expected} row(s), changed {changed}: {sql.split()[0:3]}")

    def _check_write(self, sql: str) -> None:
        if not self._stack:
            raise UnregisteredWrite(f"write outside any transition function: {sql[:60]!r}")
