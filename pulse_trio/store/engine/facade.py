"""The store's blocking core: ``store.run_sync(fn, **kwargs)`` runs one transaction function.

It has no event loop in it (the Trio side is :mod:`pulse_trio.store.engine.trio_bridge`),
so the CLI, the producer client and worker threads use it as is, and
importing the store never imports Trio. :meth:`SyncStore.run_sync`:

* takes a connection from the pool (one thread at a time per connection);
* runs ``fn(tx, **kwargs)``; commits, or rolls back for a Refusal or when
  nothing was written. A read-only view that takes no locks
  (``@read_only(takes_locks=False)``) runs on an autocommit connection of
  its own pool instead: under READ COMMITTED
  each statement sees the latest commits either way, and there is no
  transaction to end, so it costs no ROLLBACK round trip;
* retries deadlocks (1213) and lock-wait timeouts (1205) with jittered
  exponential backoff, a bounded number of times;
* replaces a connection lost mid-transaction, or whose cluster node stopped
  being ready (1047, 1180: ``failures.classify``), and runs the function again;
  on a cluster the writer is re-checked first (``writer.py``).
  If the loss happened during COMMIT the outcome is unknown, so the re-run
  gets ``tx.recovering = True``: every entry function then re-reads what it
  may already have committed (receipts, pre-made ids) instead of guessing.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pymysql

from pulse_trio.dburl import DatabaseConfig
from pulse_trio.store.engine.failures import CONFLICT, LOST, classify
from pulse_trio.store.engine.pool import SERVER_IDLE_TIMEOUT_S, ConnectionPool, connect_pooled, connect_within
from pulse_trio.store.engine.registry import is_read_only, registration_of, takes_no_locks
from pulse_trio.store.engine.results import Refusal
from pulse_trio.store.engine.tx import CasMismatch, Tx

T = TypeVar("T")


class StoreUnavailable(RuntimeError):
    """The transaction could not be completed after the bounded retries.

    The server answers ``internal`` with ``retry_after_ms`` (docs/protocol.md §4.8).
    """

    def __init__(self, message: str, retry_after_ms: int = 1000, *, commit_lost: bool = False,
                 conflict: bool = False) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms
        #: A COMMIT's answer was lost on the way: what ran may have committed.
        self.commit_lost = commit_lost
        #: The last attempt failed on a conflict (a deadlock, a lock wait, certification, a guard that moved):
        #: the database answered, it is busy with these rows, not away.
        self.conflict = conflict


def database_away(exc: BaseException) -> bool:
    """The store's one reading of "the database is away": its retries gave up, or the connection was lost.

    Callers answer it as a storage failure (503, ``storage_unavailable``)
    and log it once, as the service's loops do; any other failure is theirs
    to report with its cause.
    """
    return isinstance(exc, StoreUnavailable) or classify(exc) == LOST


@dataclasses.dataclass(frozen=True, slots=True)
class StoreStatistics:
    pool_size: int
    threads_busy: int
    connections_opened: int
    connections_discarded: int
    commits: int
    rollbacks: int
    retries: int
    recoveries: int


class SyncStore:
    """Pooled connections + bounded retries for transaction functions, run in the calling thread."""

    def __init__(self, config: DatabaseConfig, pool_size: int = 8, *, max_attempts: int = 10,
                 backoff_s: float = 0.002, max_backoff_s: float = 0.2,
                 connector: Callable[[DatabaseConfig], Any] = connect_pooled, node_id: str | None = None,
                 server_idle_timeout_s: int = SERVER_IDLE_TIMEOUT_S) -> None:
        self.config = config
        self.server_idle_timeout_s = server_idle_timeout_s
        #: The serve process whose transactions these are (see :attr:`Tx.node_id`).
        self.node_id = node_id
        self.pool = ConnectionPool(config, pool_size, connector, server_idle_timeout_s=server_idle_timeout_s)
        self.read_pool = ConnectionPool(config, pool_size, connector, server_idle_timeout_s=server_idle_timeout_s,
                                        autocommit=True)
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._stats_lock = threading.Lock()
        self._counts = {"commits": 0, "rollbacks": 0, "retries": 0, "recoveries": 0}

    def run_batch_sync(self, calls: Sequence[tuple[Callable[..., Any], dict[str, Any]]],
                       then: Callable[[Tx, list[Any]], Any] | None = None,
                       first: Callable[[Tx], None] | None = None) -> list[Any]:
        """Several entry functions in ONE transaction (one COMMIT), results in order.

        For the server to coalesce concurrent lease commands: each function is
        still exactly one transition and refuses without writing, so the
        others' writes are unaffected by a refusal; they only share the
        commit. If the batch fails as a whole (a deadlock after the retries,
        a value the database refuses or a bug in one command), it falls back
        to one transaction per command so one bad command cannot take its
        neighbours down: a call that takes a batch (``commands=[...]``) runs
        each of its commands alone, and its result is then the list of their
        results, each the command's answer or the exception that failed it.

        ``then(tx, results)``, if given, runs last in the same transaction,
        with the calls' results (a finish batch's ride-along claims); what it
        returns is appended to the results. ``first(tx)``, if given, runs
        before the calls (the locks ``then`` needs, taken in the lock
        order). Both run again if the transaction does, and only in the
        shared transaction: after a fallback the results have no entry for
        ``then``.
        """
        for fn, _ in calls:
            self._check_runnable(fn)
        if len(calls) == 1 and then is None and first is None and len(calls[0][1].get("commands", ())) <= 1:
            fn, kwargs = calls[0]
            return [self.run_sync(fn, **kwargs)]

        lost_commit = False  # a COMMIT of this batch lost its answer: it may have landed

        def body(tx: Tx) -> list[Any]:
            nonlocal lost_commit
            lost_commit = lost_commit or tx.recovering
            if first is not None:
                first(tx)
            results = [fn(tx, **kwargs) for fn, kwargs in calls]
            if then is not None:
                results.append(then(tx, results))
            return results

        try:
            return self._transaction(body, "batch")
        except Exception as exc:  # one call's bad value (too long, a duplicate) or bug, or the store gave up
            # The batch may have committed before its answer was lost: each call then
            # re-reads what it may already have done, as a retry of its own would. That
            # holds however the batch ended: out of attempts, or a re-run that raised.
            lost = lost_commit or (isinstance(exc, StoreUnavailable) and exc.commit_lost)
            gave_up: list[StoreUnavailable] = []
            return [self._each(fn, kwargs, recovering=lost, gave_up=gave_up) for fn, kwargs in calls]

    def _each(self, fn: Callable[..., Any], kwargs: dict[str, Any], *, recovering: bool,
              gave_up: list[StoreUnavailable]) -> Any:
        """A call of a failed batch on its own; a batch function's commands one transaction each.

        One command the database refuses (or a bug its data triggers) would
        fail every command of its call again, from every connection.
        """
        commands = kwargs.get("commands")
        if commands is None or len(commands) <= 1:
            return self._safely(fn, kwargs, recovering=recovering, gave_up=gave_up)
        alone = (self._safely(fn, {**kwargs, "commands": [command]}, recovering=recovering, gave_up=gave_up)
                 for command in commands)
        return [result if isinstance(result, BaseException) else result[0] for result in alone]

    def _safely(self, fn: Callable[..., Any], kwargs: dict[str, Any], *, recovering: bool,
                gave_up: list[StoreUnavailable]) -> Any:
        """One call of a fallback, its answer or the exception that failed it.

        Once the store gave up on one because the database is away (out of
        attempts on lost connections), the rest get that answer at once: each
        waiting its own attempts would hold the batch for as many times the
        retries. A give-up on conflicts (a row held past the lock wait,
        deadlocks, certification) found the database up: that row is the
        command's own trouble, and the others still run.
        """
        if gave_up:
            return gave_up[0]
        try:
            return self._run_one(fn, kwargs, recovering=recovering)
        except StoreUnavailable as exc:
            if not exc.conflict:
                gave_up.append(exc)
            return exc
        except Exception as exc:  # this call's own answer: its neighbours keep theirs
            return exc

    def run_sync(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        """Run ``fn`` as one transaction in the calling thread (CLI, tests, worker threads)."""
        self._check_runnable(fn)
        return self._run_one(fn, kwargs, recovering=False)

    def run_once_sync(self, fn: Callable[..., T], /, *, timeout_s: float, **kwargs: Any) -> T:
        """:meth:`run_sync` on a connection of its own, each wait on the database at most ``timeout_s``.

        For what must not hold a stop (its node's STOPPED): the pool's
        connections may all be held by a database that hangs, each for its
        I/O bound, and :meth:`run_sync` tries a lost one again up to
        ``max_attempts`` times. So a database that does not answer is given
        up at its first failure. A conflict (:attr:`StoreUnavailable.conflict`)
        found it up and busy with these rows: it is run again, until
        ``timeout_s`` has passed since the call; no attempt starts after that.
        """
        deadline = time.monotonic() + timeout_s
        once = SyncStore(self.config, pool_size=1, max_attempts=1, node_id=self.node_id,
                         connector=connect_within(timeout_s), server_idle_timeout_s=self.server_idle_timeout_s)
        try:
            attempt = 0
            while True:
                try:
                    return once.run_sync(fn, **kwargs)
                except StoreUnavailable as exc:
                    attempt += 1
                    if not exc.conflict:
                        raise
                    self._sleep(attempt)
                    if time.monotonic() >= deadline:
                        raise
        finally:
            once.close()

    def _run_one(self, fn: Callable[..., T], kwargs: dict[str, Any], *, recovering: bool) -> T:
        return self._transaction(lambda tx: fn(tx, **kwargs), getattr(fn, "__name__", repr(fn)),
                                 reads_only=registration_of(fn) is None and takes_no_locks(fn),
                                 recovering=recovering)

    @staticmethod
    def _check_runnable(fn: Callable[..., Any]) -> None:
        registration = registration_of(fn)
        if registration is None and not is_read_only(fn):
            raise TypeError(f"{fn!r} is neither a registered transition nor a read-only view")
        if registration is not None and not registration.entry:
            raise TypeError(f"{registration.name} is a step: it runs inside another transition's transaction")

    def _transaction(self, body: Callable[[Tx], T], name: str, *, reads_only: bool = False,
                     recovering: bool = False) -> T:
        """``reads_only``: a view without locks, on an autocommit connection (nothing to end).

        ``recovering``: an earlier run of the same work may have committed (its
        COMMIT's answer was lost), so the body re-reads before it writes.
        """
        pool = self.read_pool if reads_only else self.pool
        last_error: BaseException | None = None
        for attempt in range(self.max_attempts):
            if attempt:
                self._sleep(attempt)
            try:
                conn = pool.acquire()
            except pymysql.err.MySQLError as exc:  # cannot even connect: the database is away
                last_error = exc
                self._count("retries")
                continue
            committing = False
            try:
                with conn.cursor() as cur:
                    tx = Tx(cur, recovering=recovering, node_id=self.node_id)
                    result = body(tx)
                if reads_only:
                    pass
                elif isinstance(result, Refusal) or not tx.wrote:
                    conn.rollback()
                    self._count("rollbacks")
                else:
                    committing = True
                    conn.commit()
                    self._count("commits")
                pool.release(conn)
                return result
            except pymysql.err.MySQLError as exc:
                kind = classify(exc)
                last_error = exc
                if kind == CONFLICT:  # deadlock, lock wait, or a cluster's certification failure
                    self._rollback_or_discard(conn, pool)
                    self._count("retries")
                    continue
                if kind == LOST:  # the connection, or its node's readiness, is gone
                    pool.lost(conn)
                    if committing:
                        recovering = True
                        self._count("recoveries")
                    self._count("retries")
                    continue
                self._rollback_or_discard(conn, pool)
                raise
            except CasMismatch as exc:
                last_error = exc
                self._rollback_or_discard(conn, pool)
                self._count("retries")
                continue
            except BaseException:
                self._rollback_or_discard(conn, pool)
                raise
        raise StoreUnavailable(f"{name} failed after {self.max_attempts} attempts: {last_error!r}",
                               commit_lost=recovering, conflict=isinstance(last_error, CasMismatch)
                               or classify(last_error) == CONFLICT) from last_error

    def _sleep(self, attempt: int) -> None:
        ceiling = min(self.max_backoff_s, self.backoff_s * 2 ** attempt)
        time.sleep(random.uniform(ceiling / 2, ceiling))

    def _rollback_or_discard(self, conn: Any, pool: ConnectionPool) -> None:
        try:
            conn.rollback()
        except Exception:
            pool.discard(conn)
            return
        self._count("rollbacks")
        pool.release(conn)

    def _count(self, name: str) -> None:
        with self._stats_lock:
            self._counts[name] += 1

    def statistics(self) -> StoreStatistics:
        with self._stats_lock:
            counts = dict(self._counts)
        return StoreStatistics(
            pool_size=self.pool.size,
            threads_busy=self.threads_busy(),
            connections_opened=self.pool.opened + self.read_pool.opened,
            connections_discarded=self.pool.discarded + self.read_pool.discarded,
            **counts,
        )

    def threads_busy(self) -> int:
        """Threads running a transaction now; only the Trio bridge hands work to threads of its own."""
        return 0

    def close(self) -> None:
        """Close idle connections; call after every run has returned."""
        self.pool.close()
        self.read_pool.close()

    def interrupt(self) -> None:
        """No transaction starts or runs again from now on, and each one waiting on the database fails at once.

        A stop's bound: a database that hangs would hold each thread for up
        to ``max_attempts`` I/O bounds. What was cut short ends as after a
        crash of this process: rolled back, or, for a COMMIT under way,
        unknown until it is read again.
        """
        self.pool.interrupt()
        self.read_pool.interrupt()
