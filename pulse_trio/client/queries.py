"""Read-only queries behind `list` and queue depths (no transitions: nothing writes)."""

from __future__ import annotations

import datetime as dt

from pulse_trio.store.registry import read_only
from pulse_trio.store.rows import TaskRow
from pulse_trio.store.tx import Tx, py_time

TASK_STATES = ("SCHEDULED", "READY", "OFFERED", "RUNNING", "SUCCEEDED", "FAILED", "UNKNOWN", "CANCELLED")


@read_only
def list_tasks(tx: Tx, *, queue: str | None = None, state: str | None = None, kind: str | None = None,
               after: str | None = None, limit: int = 100) -> list[TaskRow]:
    """Tasks by id (ULIDs sort by creation), filtered; ``after`` is the cursor."""
    where, args = [], []
    for column, value in (("queue", queue), ("state", state), ("kind", kind)):
        if value is not None:
            where.append(f"t.{column} = %s")
            args.append(value)
    if after is not None:
        where.append("t.task_id > %s")
        args.append(after)
    sql = f"SELECT {TaskRow.columns()} FROM tasks t"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY t.task_id LIMIT %s"
    args.append(limit)
    return [TaskRow.from_row(r) for r in tx.all(sql, args)]


@read_only
def queue_depths(tx: Tx, *, now: dt.datetime) -> dict[str, dict[str, object]]:
    """Tasks per state per queue, and the age of the oldest due READY task."""
    out: dict[str, dict[str, object]] = {}
    for queue, state, count in tx.all("SELECT queue, state, COUNT(*) FROM tasks GROUP BY queue, state"):
        entry = out.setdefault(queue, {"states": {}, "oldest_ready_age_s": None})
        entry["states"][state] = int(count)  # type: ignore[index]
    for queue, oldest in tx.all("SELECT queue, MIN(due_at) FROM tasks WHERE state = 'READY' GROUP BY queue"):
        if queue in out and oldest is not None:
            out[queue]["oldest_ready_age_s"] = max(0.0, (now - py_time(oldest)).total_seconds())
    return out
