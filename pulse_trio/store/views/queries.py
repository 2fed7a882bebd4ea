"""The producer client's named read-only queries: task listings, queue depths, workers, nodes.

No transitions: nothing here writes. The client, the CLI and the HTTP API
(``/metrics`` reads the queue depths too) run them through the store.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence

from pulse_trio.charts.states import (
    DRAINING_SESSION_STATES, LIVE_LEASE_STATES, LIVE_NODE_STATES, LIVE_SESSION_STATES, TASK_STATES,
    TERMINAL_TASK_STATES, WAITING_TASK_STATES, sql_list,
)
from pulse_trio.store.views.dashboard import oldest_ready_age_s
from pulse_trio.store.engine.registry import read_only
from pulse_trio.store.engine.rows import READY_PICKS, TaskRow
from pulse_trio.store.engine.tx import Tx, rfc3339



#: How many ids one probe of :func:`ended_tasks` names (one statement each; a long-poll's whole set is one).
ENDED_PROBE_IDS = 5000
_ENDED = f"SELECT task_id FROM tasks WHERE task_id IN %s AND state IN {sql_list(sorted(TERMINAL_TASK_STATES))}"


@read_only(takes_locks=False)
def ended_tasks(tx: Tx, *, task_ids: Sequence[str]) -> set[str]:
    """Which of ``task_ids`` are in a terminal state: primary-key probes, however many processes wait on them."""
    ended: set[str] = set()
    ids = sorted(set(task_ids))
    for start in range(0, len(ids), ENDED_PROBE_IDS):
        ended.update(r[0] for r in tx.all(_ENDED, (tuple(ids[start:start + ENDED_PROBE_IDS]),)))
    return ended


#: ``GET /v1/tasks?order=``: by id ascending (oldest first, the default) or descending.
LIST_ORDERS = ("oldest", "newest")


@read_only
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
    where, args = [], []
    for column, value in (("queue", queue), ("state", state), ("kind", kind), ("dedup_key", idempotency_key)):
        if value is not None:
            where.append(f"t.{column} = %s")
            args.append(value)
    if idempotency_key is not None and queue is None and queues is None:
        queues = [q for (q,) in tx.all("SELECT DISTINCT queue FROM tasks")]  # loose index scan
    if queues is not None:
        if not queues:
            return []
        where.append("t.queue IN %s")
        args.append(tuple(queues))
    newest = order == "newest"
    if after is not None:
        where.append("t.task_id < %s" if newest else "t.task_id > %s")
        args.append(after)
    sql = f"SELECT {TaskRow.columns()} FROM tasks t"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY t.task_id DESC LIMIT %s" if newest else " ORDER BY t.task_id LIMIT %s"
    args.append(limit)
    return [TaskRow.from_row(r) for r in tx.all(sql, args)]


@read_only
def queue_depths(tx: Tx, *, now: dt.datetime) -> dict[str, dict[str, object]]:
    """Tasks per state per queue, and the age of the oldest due READY task.

    Each group is read through an index that holds only its tasks: READY and
    SCHEDULED through ``tasks_due (pick_state, …)``, OFFERED and RUNNING
    through their live leases, ended tasks through ``tasks_finished`` (an
    ended task's state is its outcome).
    """
    out: dict[str, dict[str, object]] = {}
    counts = tx.all(
        "SELECT queue, pick_state, COUNT(*) FROM tasks FORCE INDEX (tasks_due)"
        f" WHERE pick_state IN {sql_list((*WAITING_TASK_STATES, *READY_PICKS))} GROUP BY queue, pick_state"
        " UNION ALL SELECT t.queue, l.state, COUNT(*) FROM leases l FORCE INDEX (leases_due)"
        f" JOIN tasks t ON t.task_id = l.task_id WHERE l.state IN {sql_list(LIVE_LEASE_STATES)} GROUP BY t.queue, l.state"
        " UNION ALL SELECT queue, outcome_status, COUNT(*) FROM tasks FORCE INDEX (tasks_finished)"
        " WHERE finished_at IS NOT NULL GROUP BY queue, outcome_status")
    for queue, state, count in counts:
        entry = out.setdefault(queue, {"states": {}, "oldest_ready_age_s": None})
        state = READY_PICKS.get(state, state)  # keyed, or set aside for its key: still READY
        entry["states"][state] = entry["states"].get(state, 0) + int(count)  # type: ignore[index,union-attr]
    for queue, entry in out.items():
        if "READY" in entry["states"]:  # type: ignore[operator]
            entry["oldest_ready_age_s"] = oldest_ready_age_s(tx, queue, now)
    return out


@read_only
def list_workers(tx: Tx, *, include_disconnected: bool = False, limit: int = 1000) -> list[dict[str, object]]:
    """Worker instances with their session, capacity, drain, held leases and the serve process (node) holding it."""
    sql = ("SELECT i.instance_id, i.session_id, i.epoch, i.state, i.worker_name, i.subscriptions, i.capacity,"
           " i.sequence, i.concurrency_keys, i.cancellation_notifications, i.registered_at, i.disconnected_at,"
           " i.node_id,"
           " (SELECT COUNT(*) FROM leases l WHERE l.owner_session_id = i.session_id"
           f"  AND l.state IN {sql_list(LIVE_LEASE_STATES)}) AS held"
           " FROM worker_instances i")
    if not include_disconnected:
        sql += f" WHERE i.state IN {sql_list(LIVE_SESSION_STATES)}"
    sql += " ORDER BY i.epoch LIMIT %s"
    workers = []
    for row in tx.all(sql, (limit,)):
        (instance_id, session_id, epoch, state, name, subscriptions, capacity, sequence, keys, notify,
         registered_at, disconnected_at, node_id, held) = row
        workers.append({
            "instance_id": instance_id, "session_id": session_id, "epoch": str(epoch), "state": state,
            "worker_name": name, "subscriptions": json.loads(subscriptions), "capacity": int(capacity),
            "drain": state in DRAINING_SESSION_STATES, "sequence": None if sequence is None else str(sequence),
            "concurrency_keys": bool(keys), "cancellation_notifications": bool(notify),
            "active_leases": int(held), "registered_at": rfc3339(registered_at),
            "disconnected_at": rfc3339(disconnected_at) if disconnected_at else None,
            "node_id": node_id,
        })
    return workers


@read_only
def list_nodes(tx: Tx, *, include_stopped: bool = False, limit: int = 1000) -> list[dict[str, object]]:
    """The serve processes (chart ``node``), newest first, with the sessions each still holds open.

    Without ``include_stopped`` only ALIVE and LOST ones: what runs, and what died and was noticed.
    """
    sql = ("SELECT n.node_id, n.state, n.host, n.pid, n.lapse_ms, n.started_at, n.heartbeat_at, n.lost_at,"
           " n.lost_by, n.stopped_at,"
           " (SELECT COUNT(*) FROM worker_instances i WHERE i.node_id = n.node_id"
           f" AND i.state IN {sql_list(LIVE_SESSION_STATES)})"
           " FROM server_nodes n")
    if not include_stopped:
        sql += f" WHERE n.state IN {sql_list(LIVE_NODE_STATES)}"
    sql += " ORDER BY n.started_at DESC, n.node_id LIMIT %s"
    nodes = []
    for (node_id, state, host, pid, lapse_ms, started_at, heartbeat_at, lost_at, lost_by, stopped_at,
         open_sessions) in tx.all(sql, (limit,)):
        nodes.append({
            "node_id": node_id, "state": state, "host": host, "pid": int(pid), "lapse_s": lapse_ms / 1000,
            "started_at": rfc3339(started_at), "heartbeat_at": rfc3339(heartbeat_at),
            "lost_at": rfc3339(lost_at) if lost_at else None, "lost_by": lost_by,
            "stopped_at": rfc3339(stopped_at) if stopped_at else None, "open_sessions": int(open_sessions),
        })
    return nodes
