"""Chart ``key_permit``: per-key permits with strictly increasing fencing tokens.

``key_counters`` has one row per key: ``last_token`` (the last
concurrency_token handed out) and ``outstanding`` (permits HELD or
QUARANTINED). Acquisition locks that row with ``SKIP LOCKED``: if another
assigner holds it, the task is skipped for now rather than waited on, which
keeps waiting keyed tasks from blocking anything behind them and keeps the
assigner deadlock-free: it never waits for a counter. A key found at its
limit has its READY tasks set aside (task.wait_for_key) so that no claim
reads them again; every permit released puts one back in each place (queue
and kind) where the key waits (task.key_freed).
Release and quarantine run inside lease transactions after the lease and
task rows; everything that waits takes locks in one order: lease, task,
permit, counter, then the key's waiting tasks.
"""

from __future__ import annotations

import collections
import datetime as dt
from collections.abc import Sequence

from pulse_trio.store.task import steps as task_steps
from pulse_trio.store.engine.chart_write import create, move
from pulse_trio.store.engine.guard_context import KeyPermitContext
from pulse_trio.store.engine.registry import decide, guard, require, transition
from pulse_trio.store.engine.results import TimerResult
from pulse_trio.store.engine.rows import LeaseRow, TaskRow
from pulse_trio.store.engine.timer_scan import claim
from pulse_trio.store.engine.tx import Tx, after_ms, db_time
from pulse_trio.store.key_permit import sql

#: release and quarantine have no guard: the lease transition that runs them decided.

#: What :func:`acquire` returns for a key at its limit (tokens start at 1, so never a token).
AT_LIMIT = 0


@guard("key_permit", "permit_available")
def _permit_available(c) -> bool:
    """Fewer than the task's concurrency_limit permits of its key are HELD or QUARANTINED."""
    return c.outstanding < c.task.concurrency_limit


@guard("key_permit", "quarantine_over")
def _quarantine_over(c) -> bool:
    """quarantine_until has passed."""
    return db_time(c.quarantine_until) <= db_time(c.now)


@transition("key_permit", "acquire", entry=False)
def acquire(tx: Tx, *, task: TaskRow, lease_id: str, now: dt.datetime) -> int | None:
    """Take the next token of the task's key for ``lease_id``.

    None: another assigner holds the key's counter (skip the task for now);
    :data:`AT_LIMIT`: the key is at its limit, and the counter stays locked
    by this transaction until it commits.
    """
    key = task.concurrency_key
    assert key is not None
    row = tx.one(sql.LOCK_COUNTER, (key,))
    if row is None:
        return None  # another assigner holds the key right now (the row exists from submit)
    last, outstanding = int(row[0]), int(row[1])
    dest = decide("key_permit", "acquire", "NONE", KeyPermitContext(task=task, outstanding=outstanding))
    if not isinstance(dest, str):
        return AT_LIMIT
    token = last + 1
    tx.cas(sql.TAKE_TOKEN, (token, key, last))
    create(tx, "key_permit", "acquire", dest=dest,
           columns=sql.PERMIT_COLUMNS, row=sql.PERMIT_ROW, rows=[(lease_id, key, token, task.task_id, db_time(now))])
    return token


def _held(tx: Tx, lease_ids: Sequence[str]) -> list[tuple[str, str]]:
    if not lease_ids:
        return []
    return [(r[0], r[1]) for r in tx.all(sql.LOCK_HELD, (tuple(lease_ids),))]


def _decrement(tx: Tx, keys: Sequence[str]) -> int:
    """Count the released permits off their keys' counters; as many waiting tasks of each key compete again.

    As many in each place (queue and kind) where the key waits, so that one
    is wherever a session may take it. Returns how many compete again.
    """
    freed = 0
    for key, count in sorted(collections.Counter(keys).items()):
        tx.cas(sql.COUNT_OFF, (count, key, count))
        waiting = task_steps.waiting_of_key(tx, key, count)
        if waiting:
            task_steps.key_freed(tx, task_ids=waiting)
            freed += len(waiting)
    return freed


@transition("key_permit", "release", entry=False)
def release(tx: Tx, *, leases: Sequence[LeaseRow], now: dt.datetime) -> int:
    """HELD -> RELEASED for the permits of these (keyed) leases: finish, lapse, revoke.

    Returns how many of the keys' set-aside tasks compete again: work that
    others (a serve group's other members) may take.
    """
    held = _held(tx, [l.lease_id for l in leases if l.concurrency_token is not None])
    if not held:
        return 0
    move(tx, "key_permit", "release", [h[0] for h in held], source="HELD", sets="released_at = %s",
         args=(db_time(now),))
    return _decrement(tx, [h[1] for h in held])


@transition("key_permit", "quarantine", entry=False)
def quarantine(tx: Tx, *, lease: LeaseRow, now: dt.datetime, quarantine_ms: int | None = None) -> bool:
    """HELD -> QUARANTINED until now + quarantine (default: the lease's ttl): the lost worker may still run.

    True if the lease held a permit (now quarantined).
    """
    held = _held(tx, [lease.lease_id])
    if not held:
        return False
    until = after_ms(now, quarantine_ms if quarantine_ms is not None else lease.ttl_ms)
    move(tx, "key_permit", "quarantine", [lease.lease_id], source="HELD", sets="quarantine_until = %s",
         args=(db_time(until),))
    return True


@transition("key_permit", "release_after_quarantine")
def release_after_quarantine(tx: Tx, *, now: dt.datetime, limit: int = 500) -> TimerResult:
    """Timer: quarantines that ran out are released (SKIP LOCKED: instances share it)."""
    rows = claim(tx, sql.QUARANTINE_OVER_SCAN, now=now, limit=limit)
    if not rows:
        return TimerResult(0, False)
    for _, _, until in rows:
        require("key_permit", "release_after_quarantine", "QUARANTINED",
                KeyPermitContext(quarantine_until=until, now=now))
    move(tx, "key_permit", "release_after_quarantine", [r[0] for r in rows], source="QUARANTINED",
         sets="released_at = %s", args=(db_time(now),))
    _decrement(tx, [r[1] for r in rows])
    return TimerResult(len(rows), len(rows) == limit)
