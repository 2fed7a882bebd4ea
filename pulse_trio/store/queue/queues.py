"""Chart ``queue``: pausing and resuming a queue, and its own task retention.

A queue is a name tasks carry, not a row: most queues never get one. A row
of ``queues`` (migration 0015) appears when an operator first pauses a
queue or gives it a retention of its own, and records that decision for
every serve process:

* :func:`pause` / :func:`resume` move the row between ACTIVE and PAUSED.
  Nothing else changes: tasks stay as they are, leases run on. Each serve
  process keeps the PAUSED set in memory (:func:`paused_queues`, re-read by
  ``pulse_trio.server.queue_sync``) and its claims skip those queues.
* :func:`set_retention` stores the queue's own ``task_retention`` (or NULL:
  the cluster's applies), read by the purge (:mod:`pulse_trio.store.task.retention`).

Pausing a queue without a row inserts it PAUSED; two operators racing to
insert the same queue's row meet on its primary key, and the loser moves
the row the winner inserted (``INSERT IGNORE``, then the ordinary move).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence

from pulse_trio.cluster_settings import json_seconds
from pulse_trio.store.engine.chart_write import create, destination, move
from pulse_trio.store.engine.registry import read_only, transition
from pulse_trio.store.engine.tx import Tx, db_actor, db_time, py_time, rfc3339
from pulse_trio.store.queue import sql


#: Where a pause takes a queue: the one state whose queues offer nothing.
PAUSED = destination("queue", "pause", "ACTIVE")
#: Where a resume takes a paused queue (and what a queue without a row is).
ACTIVE = destination("queue", "resume", "PAUSED")


@dataclasses.dataclass(frozen=True, slots=True)
class QueueControl:
    """One row of ``queues``: the queue's state and its own retention (ms; None: the cluster's)."""

    queue: str
    state: str
    task_retention_ms: int | None
    paused_at: dt.datetime | None
    paused_by: str | None
    updated_at: dt.datetime | None
    updated_by: str | None

    @classmethod
    def absent(cls, queue: str) -> QueueControl:
        """A queue without a row: active, on the cluster's retention."""
        return cls(queue, ACTIVE, None, None, None, None, None)

    @classmethod
    def from_row(cls, row: tuple) -> QueueControl:
        return cls(row[0], row[1], None if row[2] is None else int(row[2]), py_time(row[3]), row[4],
                   py_time(row[5]), row[6])

    @property
    def paused(self) -> bool:
        return self.state == PAUSED

    def as_json(self) -> dict[str, object]:
        """What ``queues`` and ``GET /v1/queues`` show beside the depths (retention in seconds)."""
        return {
            "state": self.state, "paused": self.paused,
            "paused_at": rfc3339(self.paused_at) if self.paused and self.paused_at else None,
            "paused_by": self.paused_by if self.paused else None,
            "task_retention": json_seconds(self.task_retention_ms),
        }


@dataclasses.dataclass(frozen=True, slots=True)
class QueueChange:
    """The row after a pause, resume or retention change, and whether this call changed it."""

    control: QueueControl
    changed: bool


def _locked(tx: Tx, queue: str) -> QueueControl | None:
    row = tx.one(sql.LOCK_QUEUE, (queue,))
    return None if row is None else QueueControl.from_row(row)


def _insert(tx: Tx, queue: str, trigger: str, *, now: dt.datetime, by: str, retention_ms: int | None = None,
            paused: bool = False) -> bool:
    """Insert the queue's row in the chart's destination from NONE; False if another writer got there first."""
    stamp = db_time(now)
    return create(tx, "queue", trigger, ignore=True,
                  columns=sql.QUEUE_COLUMNS, row=sql.QUEUE_ROW,
                  rows=[(queue, retention_ms, stamp if paused else None, by if paused else None, stamp, by)]) == 1


def _row(tx: Tx, queue: str) -> QueueControl:
    row = tx.one(sql.QUEUE, (queue,))
    assert row is not None
    return QueueControl.from_row(row)


@transition("queue", "pause")
def pause(tx: Tx, *, queue: str, now: dt.datetime, paused_by: str) -> QueueChange:
    """Stop offering the queue's tasks (leases already out continue); idempotent."""
    by = db_actor(paused_by)
    current = _locked(tx, queue)
    if current is None:
        if _insert(tx, queue, "pause", now=now, by=by, paused=True):
            return QueueChange(_row(tx, queue), True)
        current = _locked(tx, queue)  # another writer inserted it meanwhile
        assert current is not None
    if current.state == PAUSED:
        return QueueChange(current, False)  # the self-loop: nothing to write
    stamp = db_time(now)
    move(tx, "queue", "pause", [queue], source=current.state,
         sets="paused_at = %s, paused_by = %s, updated_at = %s, updated_by = %s", args=(stamp, by, stamp, by))
    return QueueChange(_row(tx, queue), True)


@transition("queue", "resume")
def resume(tx: Tx, *, queue: str, now: dt.datetime, resumed_by: str) -> QueueChange:
    """Offer the queue's tasks again; idempotent (a queue without a row is active: nothing is written)."""
    current = _locked(tx, queue)
    if current is None:
        return QueueChange(QueueControl.absent(queue), False)
    if current.state != PAUSED:
        return QueueChange(current, False)  # the self-loop: nothing to write
    stamp = db_time(now)
    move(tx, "queue", "resume", [queue], source=current.state, sets="updated_at = %s, updated_by = %s",
         args=(stamp, db_actor(resumed_by)))
    return QueueChange(_row(tx, queue), True)


@transition("queue", "retain")
def set_retention(tx: Tx, *, queue: str, retention_ms: int | None, now: dt.datetime,
                  updated_by: str) -> QueueChange:
    """Give the queue its own task retention (ms), or clear it (None: the cluster's applies)."""
    by = db_actor(updated_by)
    current = _locked(tx, queue)
    if current is None:
        if retention_ms is None:
            return QueueChange(QueueControl.absent(queue), False)  # nothing to clear
        if _insert(tx, queue, "retain", now=now, by=by, retention_ms=retention_ms):
            return QueueChange(_row(tx, queue), True)
        current = _locked(tx, queue)
        assert current is not None
    if current.task_retention_ms == retention_ms:
        return QueueChange(current, False)
    move(tx, "queue", "retain", [queue], source=current.state,
         sets="task_retention_ms = %s, updated_at = %s, updated_by = %s", args=(retention_ms, db_time(now), by))
    return QueueChange(_row(tx, queue), True)


@read_only(takes_locks=False)
def paused_queues(tx: Tx) -> frozenset[str]:
    """The queues that offer nothing now: what every serve process keeps in memory."""
    return frozenset(q for (q,) in tx.all(sql.PAUSED_QUEUES, (PAUSED,)))


@read_only(takes_locks=False)
def queue_controls(tx: Tx, *, queues: Sequence[str] | None = None) -> dict[str, QueueControl]:
    """Every row of ``queues`` (or those of ``queues``), by name."""
    statement, args = sql.ALL_QUEUES, ()
    if queues is not None:
        if not queues:
            return {}
        statement, args = statement + sql.QUEUES_IN, (tuple(queues),)
    return {row[0]: QueueControl.from_row(row) for row in tx.all(statement + sql.BY_NAME, args)}


__all__ = ["ACTIVE", "PAUSED", "QueueChange", "QueueControl", "pause", "paused_queues", "queue_controls", "resume",
           "set_retention"]
