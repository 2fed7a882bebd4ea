"""The producer client's named read-only queries: task listings, queue depths, workers, nodes.

No transitions: nothing here writes. The client, the CLI and the HTTP API
(``/metrics`` reads the queue depths too) run them through the store.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence

from pulse_trio.charts.states import (  # noqa: F401  (the CLI reads TASK_STATES here)
    DRAINING_SESSION_STATES, HELD_TASK_STATE, LIVE_LEASE_STATES, TASK_STATES,
)
from pulse_trio.store.views.dashboard import oldest_ready_age_s
from pulse_trio.store.engine.registry import read_only
from pulse_trio.store.engine.rows import READY_PICKS, TaskRow
from pulse_trio.store.engine.tx import Tx, rfc3339
from pulse_trio.store.views import sql
from pulse_trio.store.views.task import seen



#: How many ids one probe of :func:`ended_tasks` names (one statement each; a long-poll's whole set is one).
ENDED_PROBE_IDS = 5000


@read_only(takes_locks=False)
def ended_tasks(tx: Tx, *, task_ids: Sequence[str]) -> set[str]:
    """Which of ``task_ids`` are in a terminal state: primary-key probes, however many processes wait on them."""
    ended: set[str] = set()
    ids = sorted(set(task_ids))
    for start in range(0, len(ids), ENDED_PROBE_IDS):
        ended.update(r[0] for r in tx.all(sql.ENDED, (tuple(ids[start:start + ENDED_PROBE_IDS]),)))
    return ended


#: ``GET /v1/tasks?order=``: by id ascending (oldest first, the default) or descending.
LIST_ORDERS = ("oldest", "newest")


@read_only(takes_locks=False)
def list_tasks(tx: Tx, *, queue: str | None = None, state: str | None = None, kind: str | None = None,
               idempotency_key: str | None = None, after: str | None = None, limit: int = 100,
               queues: Sequence[str] | None = None, order: str = "oldest") -> list[TaskRow]:
    """Tasks by id (ULIDs sort by creation), filtered; ``queues``: any of these.

    ``after`` is a keyset cursor: the last id of the previous page, so the
    next page starts strictly past it in the listing's order whatever was
    inserted since (no offset to shift). ``idempotency_key`` finds the task
    submitted with that key (the manual retries sharing it are reached by
    lineage): one unique-index probe per queue.
    """
    if order not in LIST_ORDERS:
        raise ValueError(f"order must be one of {', '.join(LIST_ORDERS)}")
    held_as = state if state in LIVE_LEASE_STATES else None  # a held row is offered or running as its lease is
    row_state = HELD_TASK_STATE if held_as else state
    where, args = [], []
    for column, value in (("queue", queue), ("state", row_state), ("kind", kind), ("dedup_key", idempotency_key)):
        if value is not None:
            where.append(f"t.{column} = %s")
            args.append(value)
    if held_as:
        where.append(sql.HELD_AS)
        args.append(held_as)
    if idempotency_key is not None and queue is None and queues is None:
        queues = [q for (q,) in tx.all(sql.TASK_QUEUES)]  # loose index scan
    if queues is not None:
        if not queues:
            return []
        where.append(sql.IN_QUEUES)
        args.append(tuple(queues))
    newest = order == "newest"
    if after is not None:
        where.append(sql.BEFORE_ID if newest else sql.AFTER_ID)
        args.append(after)
    statement = sql.LIST_TASKS
    if where:
        statement += " WHERE " + " AND ".join(where)
    statement += sql.NEWEST_FIRST if newest else sql.OLDEST_FIRST
    args.append(limit)
    return [seen(r) for r in tx.all(statement, args)]


@read_only(takes_locks=False)
def queue_depths(tx: Tx, *, now: dt.datetime, ended: bool = True) -> dict[str, dict[str, object]]:
    """Tasks per state per queue, and the age of the oldest due READY task.

    Each group is read through an index that holds only its tasks: READY and
    SCHEDULED through ``tasks_pickup (queue, pick_state, …)``, OFFERED and
    RUNNING through their live leases, ended tasks through ``tasks_finished``
    (an ended task's state is its outcome). ``ended=False`` leaves the ended
    ones out: counting them reads every entry of the history the retention
    keeps, which a frequent caller (a metrics scrape) must not pay.
    """
    out: dict[str, dict[str, object]] = {}
    counts = tx.all(sql.QUEUE_DEPTHS if ended else sql.QUEUE_DEPTHS_OPEN)
    for queue, state, count in counts:
        entry = out.setdefault(queue, {"states": {}, "oldest_ready_age_s": None})
        state = READY_PICKS.get(state, state)  # keyed, or set aside for its key: still READY
        entry["states"][state] = entry["states"].get(state, 0) + int(count)  # type: ignore[index,union-attr]
    for queue, entry in out.items():
        if "READY" in entry["states"]:  # type: ignore[operator]
            entry["oldest_ready_age_s"] = oldest_ready_age_s(tx, queue, now)
    return out


@read_only(takes_locks=False)
def list_workers(tx: Tx, *, include_disconnected: bool = False, limit: int = 1000) -> list[dict[str, object]]:
    """Worker instances with their session, capacity, drain, held leases and the serve process (node) holding it."""
    statement = sql.WORKERS
    if not include_disconnected:
        statement += sql.LIVE_WORKERS
    statement += sql.WORKERS_ORDER
    return [_worker(row) for row in tx.all(statement, (limit,))]


@read_only(takes_locks=False)
def get_worker(tx: Tx, *, instance_id: str) -> dict[str, object] | None:
    """One worker instance as :func:`list_workers` shows it, connected or not; None if there is none."""
    row = tx.one(sql.WORKERS + sql.WORKER_BY_ID, (instance_id,))
    return None if row is None else _worker(row)


def _worker(row: tuple) -> dict[str, object]:
    (instance_id, session_id, epoch, state, name, subscriptions, capacity, sequence, keys, notify,
     registered_at, disconnected_at, node_id, held) = row
    return {
        "instance_id": instance_id, "session_id": session_id, "epoch": str(epoch), "state": state,
        "worker_name": name, "subscriptions": json.loads(subscriptions), "capacity": int(capacity),
        "drain": state in DRAINING_SESSION_STATES, "sequence": None if sequence is None else str(sequence),
        "concurrency_keys": bool(keys), "cancellation_notifications": bool(notify),
        "active_leases": int(held), "registered_at": rfc3339(registered_at),
        "disconnected_at": rfc3339(disconnected_at) if disconnected_at else None,
        "node_id": node_id,
    }


@read_only(takes_locks=False)
def list_nodes(tx: Tx, *, include_stopped: bool = False, limit: int = 1000) -> list[dict[str, object]]:
    """The serve processes (chart ``node``), newest first, with the sessions each still holds open.

    Without ``include_stopped`` only ALIVE and LOST ones: what runs, and what died and was noticed.
    """
    statement = sql.NODES
    if not include_stopped:
        statement += sql.LIVE_NODES
    statement += sql.NODES_ORDER
    nodes = []
    for (node_id, state, host, pid, lapse_ms, started_at, heartbeat_at, lost_at, lost_by, stopped_at,
         open_sessions) in tx.all(statement, (limit,)):
        nodes.append({
            "node_id": node_id, "state": state, "host": host, "pid": int(pid), "lapse_s": lapse_ms / 1000,
            "started_at": rfc3339(started_at), "heartbeat_at": rfc3339(heartbeat_at),
            "lost_at": rfc3339(lost_at) if lost_at else None, "lost_by": lost_by,
            "stopped_at": rfc3339(stopped_at) if stopped_at else None, "open_sessions": int(open_sessions),
        })
    return nodes
