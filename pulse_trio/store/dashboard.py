"""Read-only figures for the dashboard's overview, bounded on a large ``tasks`` table.

Nothing here writes. Every query reads an index range whose size does not
grow with the history kept in ``tasks``:

* the (queue, state) pairs that exist come from a loose scan of
  ``tasks_pickup`` (one index dive per pair);
* each pair is counted up to ``COUNT_CAP``: past it the dashboard shows
  "at least", since a count of a million SUCCEEDED rows would read a
  million index entries on every refresh;
* the oldest due READY task is found from the head of the pick-up order
  (see :func:`oldest_ready_due`);
* finishes are read from ``tasks_finished`` (migration 0009) for the time
  range asked, so their cost follows the finishing rate, not the table.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence

from pulse_trio.charts import CHARTS
from pulse_trio.store.registry import read_only
from pulse_trio.store.rows import TERMINAL_TASK_STATES
from pulse_trio.store.tx import Tx, db_time, py_time

#: A (queue, state) count stops here; the answer says which counts reached it.
COUNT_CAP = 10_000

#: How a task can end, in the order of statecharts/task.json.
FINISHED_STATUSES = tuple(state for state in CHARTS["task"].spec.states if state in TERMINAL_TASK_STATES)


@read_only
def state_pairs(tx: Tx) -> list[tuple[str, str]]:
    """Every (queue, state) with at least one task, by a loose index scan."""
    return [(queue, state) for queue, state in tx.all("SELECT DISTINCT queue, state FROM tasks")]


def capped_counts(tx: Tx, pairs: Sequence[tuple[str, str]], cap: int = COUNT_CAP) -> dict[tuple[str, str], int]:
    """Tasks per (queue, state), each counted up to ``cap + 1`` (more than ``cap``: at least that many)."""
    if not pairs:
        return {}
    part = "SELECT %s, %s, (SELECT COUNT(*) FROM (SELECT 1 FROM tasks WHERE queue = %s AND state = %s LIMIT %s) c)"
    args: list[object] = []
    for queue, state in pairs:
        args += [queue, state, queue, state, cap + 1]
    return {(queue, state): int(count)
            for queue, state, count in tx.all(" UNION ALL ".join([part] * len(pairs)), args)}


def oldest_ready_due(tx: Tx, queue: str) -> dt.datetime | None:
    """The earliest ``due_at`` among the queue's READY tasks, exactly, without reading them all.

    ``effective_at = due_at - priority offset`` and offsets are never
    negative, so a task whose ``effective_at`` is later than the ``due_at``
    of the pick-up head cannot be due earlier than the head: only the
    range from the head up to the head's own ``due_at`` is read (empty
    past the head itself when the head has no priority offset).
    """
    head = tx.one("SELECT due_at FROM tasks WHERE queue = %s AND state = 'READY'"
                  " ORDER BY effective_at, task_id LIMIT 1", (queue,))
    if head is None:
        return None
    row = tx.one("SELECT MIN(due_at) FROM tasks WHERE queue = %s AND state = 'READY' AND effective_at <= %s",
                 (queue, head[0]))
    return py_time(row[0] if row and row[0] is not None else head[0])


def oldest_ready_age_s(tx: Tx, queue: str, now: dt.datetime) -> float | None:
    """How long the queue's oldest due READY task has been due (None: nothing READY)."""
    oldest = oldest_ready_due(tx, queue)
    return None if oldest is None else max(0.0, (now - oldest).total_seconds())


@read_only
def queue_states(tx: Tx, *, now: dt.datetime, queues: Iterable[str] | None = None,
                 cap: int = COUNT_CAP) -> dict[str, dict[str, object]]:
    """Per queue: capped counts by state, the states whose count passed the cap, the oldest READY task's age.

    ``queues``: only these (a queue-scoped token's); None: every queue.
    """
    wanted = None if queues is None else frozenset(queues)
    pairs = [p for p in state_pairs(tx) if wanted is None or p[0] in wanted]
    out: dict[str, dict[str, object]] = {}
    for (queue, state), count in capped_counts(tx, pairs, cap).items():
        entry = out.setdefault(queue, {"states": {}, "capped": [], "oldest_ready_age_s": None})
        entry["states"][state] = min(count, cap)  # type: ignore[index]
        if count > cap:
            entry["capped"].append(state)  # type: ignore[union-attr]
    for queue, entry in out.items():
        if "READY" in entry["states"]:  # type: ignore[operator]
            entry["oldest_ready_age_s"] = oldest_ready_age_s(tx, queue, now)
    return out


@read_only
def finishes_by_minute(tx: Tx, *, since: dt.datetime, until: dt.datetime) -> dict[tuple[str, str, int], int]:
    """Tasks that ended in ``[since, until)``: ``(queue, outcome status, whole minutes after since) -> count``.

    ``since`` should be a minute boundary for the minutes to be clock minutes.
    """
    rows = tx.all(
        "SELECT queue, outcome_status, TIMESTAMPDIFF(MINUTE, %s, finished_at) AS minute, COUNT(*)"
        " FROM tasks WHERE finished_at >= %s AND finished_at < %s GROUP BY queue, outcome_status, minute",
        (db_time(since), db_time(since), db_time(until)))
    return {(queue, status, int(minute)): int(count) for queue, status, minute, count in rows}


@read_only
def finishes_since(tx: Tx, *, since: dt.datetime) -> dict[tuple[str, str], int]:
    """Tasks that ended at ``since`` or later: ``(queue, outcome status) -> count``."""
    rows = tx.all("SELECT queue, outcome_status, COUNT(*) FROM tasks WHERE finished_at >= %s"
                  " GROUP BY queue, outcome_status", (db_time(since),))
    return {(queue, status): int(count) for queue, status, count in rows}
