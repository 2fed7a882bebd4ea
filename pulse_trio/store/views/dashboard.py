"""Read-only figures for the dashboard's overview, bounded on a large ``tasks`` table.

Nothing here writes. Every query reads an index range whose size does not
grow with the history kept in ``tasks``, one group of states at a time
(docs/storage.md §6):

* READY and SCHEDULED through ``tasks_pickup (queue, pick_state, …)``:
  the queues by a loose scan (one index dive per queue), then the states
  each has by one dive per (queue, state), each pair counted up to ``COUNT_CAP``;
* OFFERED and RUNNING through their live leases, which the workers'
  capacity bounds, counted exactly;
* ended tasks through ``tasks_finished (queue, outcome_status,
  finished_at)``: the pairs the same way, each counted up to the cap
  (past it the dashboard shows "at least": a count of a million SUCCEEDED
  rows would read a million index entries on every refresh), and the
  recent finishes as one range per pair, so their cost follows the
  finishing rate, not the table;
* the oldest due READY task from the head of the pick-up order
  (see :func:`oldest_ready_due`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence

from pulse_trio.charts import CHARTS
from pulse_trio.charts.states import TERMINAL_TASK_STATES, WAITING_TASK_STATES
from pulse_trio.store.engine.registry import read_only
from pulse_trio.store.engine.rows import READY_PICKS
from pulse_trio.store.engine.tx import Tx, db_time, py_time
from pulse_trio.store.views import sql

#: A (queue, state) count stops here; the answer says which counts reached it.
COUNT_CAP = 10_000

#: How a task can end, in the order of statecharts/task.json.
FINISHED_STATUSES = tuple(state for state in CHARTS["task"].spec.states if state in TERMINAL_TASK_STATES)


@read_only(takes_locks=False)
def state_pairs(tx: Tx) -> list[tuple[str, str]]:
    """Every (queue, state) with at least one task waiting or ended: one dive per queue, and per queue and state."""
    waiting = tx.all(sql.WAITING_PAIRS)
    ended = tx.all(sql.ENDED_PAIRS)
    return [(queue, state) for queue, state in (*waiting, *ended)]


_WAITING = frozenset((*WAITING_TASK_STATES, *READY_PICKS))


def capped_counts(tx: Tx, pairs: Sequence[tuple[str, str]], cap: int = COUNT_CAP) -> dict[tuple[str, str], int]:
    """Tasks per (queue, waiting or ended state), each counted up to ``cap + 1`` (more than ``cap``: at least that)."""
    if not pairs:
        return {}
    parts, args = [], []
    for queue, state in pairs:
        parts.append(sql.COUNT_WAITING if state in _WAITING else sql.COUNT_ENDED)
        args += [queue, state, queue, state, cap + 1]
    return {(queue, state): int(count) for queue, state, count in tx.all(" UNION ALL ".join(parts), args)}


def running_counts(tx: Tx) -> dict[tuple[str, str], int]:
    """OFFERED and RUNNING tasks per queue, exactly: one per live lease."""
    rows = tx.all(sql.RUNNING_COUNTS)
    return {(queue, state): int(count) for queue, state, count in rows}


def oldest_ready_due(tx: Tx, queue: str) -> dt.datetime | None:
    """The earliest ``due_at`` among the queue's READY tasks, without reading them all.

    Without a fairness key ``effective_at = due_at - priority offset`` and
    offsets are never negative, so a task whose ``effective_at`` is later
    than the ``due_at`` of the pick-up head cannot be due earlier than the
    head: only the range from the head up to the head's own ``due_at`` is
    read (empty past the head itself when the head has no priority offset).
    A fairness key's backlog is placed past its due times, and what lies
    past the head's due time is not read (docs/http-api.md says so).
    """
    oldest = None
    for pick in READY_PICKS:  # each READY range (unkeyed, keyed, set aside) has its own head
        head = tx.one(sql.READY_HEAD, (queue, pick))
        if head is None:
            continue
        row = tx.one(sql.EARLIEST_DUE, (queue, pick, head[0]))
        due = row[0] if row and row[0] is not None else head[0]
        oldest = due if oldest is None or due < oldest else oldest
    return None if oldest is None else py_time(oldest)


def oldest_ready_age_s(tx: Tx, queue: str, now: dt.datetime) -> float | None:
    """How long the queue's oldest due READY task has been due (None: nothing READY)."""
    oldest = oldest_ready_due(tx, queue)
    return None if oldest is None else max(0.0, (now - oldest).total_seconds())


@read_only(takes_locks=False)
def queue_states(tx: Tx, *, now: dt.datetime, queues: Iterable[str] | None = None,
                 cap: int = COUNT_CAP) -> dict[str, dict[str, object]]:
    """Per queue: capped counts by state, the states whose count passed the cap, the oldest READY task's age.

    ``queues``: only these (a queue-scoped token's); None: every queue.
    """
    wanted = None if queues is None else frozenset(queues)
    pairs = [p for p in state_pairs(tx) if wanted is None or p[0] in wanted]
    out: dict[str, dict[str, object]] = {}
    counts = capped_counts(tx, pairs, cap)
    counts.update((pair, count) for pair, count in running_counts(tx).items() if wanted is None or pair[0] in wanted)
    folded: dict[tuple[str, str], int] = {}
    for (queue, state), count in counts.items():  # keyed, or set aside for its key: still READY
        pair = (queue, READY_PICKS.get(state, state))
        folded[pair] = folded.get(pair, 0) + count
    for (queue, state), count in folded.items():
        entry = out.setdefault(queue, {"states": {}, "capped": [], "oldest_ready_age_s": None})
        entry["states"][state] = min(count, cap)  # type: ignore[index]
        if count > cap:
            entry["capped"].append(state)  # type: ignore[union-attr]
    for queue, entry in out.items():
        if "READY" in entry["states"]:  # type: ignore[operator]
            entry["oldest_ready_age_s"] = oldest_ready_age_s(tx, queue, now)
    return out


def _ended_pairs(tx: Tx) -> list[tuple[str, str]]:
    return [tuple(r) for r in tx.all(sql.ENDED_PAIRS)]


def _per_pair(tx: Tx, select: str, tail: str, args: Sequence[object], group: str = "") -> list[tuple]:
    """One range of ``tasks_finished`` per (queue, outcome) pair, as one UNION ALL statement."""
    pairs = _ended_pairs(tx)
    if not pairs:
        return []
    part = sql.PER_PAIR.format(select=select, tail=tail, group=group)
    flat: list[object] = []
    for queue, status in pairs:
        flat += [*args[:select.count("%s")], queue, status, *args[select.count("%s"):]]
    return tx.all(" UNION ALL ".join([part] * len(pairs)), flat)


@read_only(takes_locks=False)
def finishes_by_minute(tx: Tx, *, since: dt.datetime, until: dt.datetime) -> dict[tuple[str, str, int], int]:
    """Tasks that ended in ``[since, until)``: ``(queue, outcome status, whole minutes after since) -> count``.

    ``since`` should be a minute boundary for the minutes to be clock minutes.
    """
    rows = _per_pair(tx, sql.BY_MINUTE, sql.FINISHED_BETWEEN, (db_time(since), db_time(since), db_time(until)),
                     group=sql.GROUP_BY_MINUTE)
    return {(queue, status, int(minute)): int(count) for queue, status, minute, count in rows}


@read_only(takes_locks=False)
def finishes_since(tx: Tx, *, since: dt.datetime) -> dict[tuple[str, str], int]:
    """Tasks that ended at ``since`` or later: ``(queue, outcome status) -> count``."""
    rows = _per_pair(tx, sql.COUNT, sql.FINISHED_SINCE, (db_time(since),))
    return {(queue, status): int(count) for queue, status, count in rows if count}
