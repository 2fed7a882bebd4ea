"""Chart ``instance``: worker registration, capacity/drain, disconnect.

One ``worker.hello`` registers one worker instance with its session. The
epoch is allocated by the database as the row is inserted
(AUTO_INCREMENT), so epochs strictly increase across every server
instance, and a registration holds no cluster-wide row lock until its
commit: registrations on any number of connections run side by side.
Resume compares epochs to decide who owns a lease; a worker's old
session always committed before its new one began, so the new epoch is
the larger.

The row names the serve process holding the session (``tx.node_id``, chart
``node``). Registration share-locks that node's row first, so it cannot be
declared lost half-way through; when a node is gone without its
connections' own disconnects, ``node_gone`` ends its sessions in bulk.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Collection, Sequence

from pulse_trio.contract.limits import MAX_CAPACITY, MAX_COUNTER
from pulse_trio.store.engine import ids
from pulse_trio.store.engine.chart_write import create, move
from pulse_trio.store.engine.guard_context import InstanceContext
from pulse_trio.store.engine.inputs import NewInstance, SubscribedQueue
from pulse_trio.store.engine.registry import decide, guard, read_only, transition
from pulse_trio.store.engine.results import (
    INSTANCE_NOT_FOUND, PERMISSION_DENIED, SERVER_SHUTTING_DOWN, SESSION_NOT_FOUND, STALE_SEQUENCE,
    CapacityResult, InstanceView, Refusal, Registered,
)
from pulse_trio.store.engine.rows import InstanceRow
from pulse_trio.store.engine.tx import Tx, db_time
from pulse_trio.store.instance import sql
from pulse_trio.store.token.tokens import LiveTokens

#: The registration's guards that refuse with ``permission_denied``, by name: the live session words the
#: refusal for the worker from the one that failed (``Refusal.guard``).
QUEUES_ALLOWED = "queues_allowed"
TOKEN_LIVE = "token_live"


@guard("instance", "node_alive", code=SERVER_SHUTTING_DOWN)
def _node_alive(c) -> bool:
    """The serve process taking the session is ALIVE: not declared lost, not stopped (a registration outside any serve process names no node)."""
    return c.node_id is None or c.node_state == "ALIVE"


@guard("instance", QUEUES_ALLOWED, code=PERMISSION_DENIED)
def _queues_allowed(c) -> bool:
    """Every subscribed queue is allowed by the worker's token (None: any queue)."""
    return c.allowed_queues is None or all(s.queue in c.allowed_queues for s in c.new.subscriptions)


@guard("instance", TOKEN_LIVE, code=PERMISSION_DENIED)
def _token_live(c) -> bool:
    """The worker token the connection opened with is not revoked (a revoke may follow the handshake)."""
    return c.token_live


@guard("instance", "sequence_newer", code=STALE_SEQUENCE)
def _sequence_newer(c) -> bool:
    """The frame's sequence is greater than the last applied one; otherwise nothing changes."""
    return c.row.sequence is None or c.sequence > c.row.sequence


@guard("instance", "drain_requested")
def _drain_requested(c) -> bool:
    """The capacity frame says drain=true."""
    return c.drain


@guard("instance", "operator_drained")
def _operator_drained(c) -> bool:
    """An operator drained this instance; only the end of its session lifts that."""
    return c.row.operator_drained_at is not None


def active_leases(tx: Tx, session_id: str) -> int:
    """Offered or running leases the session holds (what its capacity is spent on)."""
    return live_lease_counts(tx, session_ids=[session_id]).get(session_id, 0)


@read_only(takes_locks=False)
def live_lease_counts(tx: Tx, *, session_ids: Sequence[str] | None = None) -> dict[str, int]:
    """Offered or running leases per session (sessions without any are absent); one indexed query.

    ``session_ids``: those sessions; None: every live session of this
    transaction's node (``tx.node_id``), found through the node index, so
    the statement is the same size however many sessions the node holds.
    """
    if session_ids is None:
        if tx.node_id is None:
            return {}
        rows = tx.all(sql.NODE_LEASE_COUNTS, (tx.node_id,))
        return {row[0]: int(row[1]) for row in rows}
    if not session_ids:
        return {}
    marks = ", ".join(["%s"] * len(session_ids))
    rows = tx.all(sql.LIVE_LEASE_COUNTS.format(marks=marks), tuple(session_ids))
    return {row[0]: int(row[1]) for row in rows}


@read_only(takes_locks=False)
def live_lease_ids(tx: Tx, *, session_ids: Sequence[str]) -> dict[str, frozenset[str]]:
    """The offered or running leases of each session (sessions without any are absent).

    Asked only for the sessions whose count a serve process found higher
    than the database's: the list is what changed, not what is connected.
    """
    if not session_ids:
        return {}
    rows = tx.all(sql.LIVE_LEASE_IDS, (tuple(session_ids),))
    found: dict[str, set[str]] = {}
    for session_id, lease_id in rows:
        found.setdefault(session_id, set()).add(lease_id)
    return {sid: frozenset(ids) for sid, ids in found.items()}


def view(tx: Tx, row: InstanceRow) -> InstanceView:
    return InstanceView(
        instance_id=row.instance_id, session_id=row.session_id, epoch=row.epoch, state=row.state,
        capacity=row.capacity, drain=row.state == "DRAINING", sequence=row.sequence,
        active_leases=active_leases(tx, row.session_id),
    )


def load_session(tx: Tx, session_id: str, *, lock: bool, shared: bool = False) -> InstanceRow | None:
    """The session's instance row; ``lock``: FOR UPDATE, or a shared lock with ``shared``."""
    suffix = (sql.SHARE_MODE if shared else sql.FOR_UPDATE) if lock else ""
    row = tx.one(sql.SESSION + suffix, (session_id,))
    return InstanceRow.from_row(row) if row else None


def share_lock_sessions(tx: Tx, session_ids: Sequence[str]) -> dict[str, InstanceRow]:
    """Lock these sessions' rows shared, in session-id order, and read them: a finish batch's ride-along claims.

    Taken before the batch locks any lease, it keeps the lock order
    (session -> lease -> task); shared locks of concurrent batches do not
    wait on each other, only on a dispatcher's claim, which locks the row
    exclusively. Nothing can change a row while the lock is held, so the
    claims at the end of the batch take these rows as read here instead of
    reading each again.
    """
    if not session_ids:
        return {}
    rows = tx.all(sql.SHARE_LOCK_SESSIONS, (tuple(session_ids),))
    return {row.session_id: row for row in map(InstanceRow.from_row, rows)}


@transition("instance", "register")
def register(tx: Tx, *, instance: NewInstance, now: dt.datetime, allowed_queues: Collection[str] | None = None,
             tokens: LiveTokens | None = None) -> Registered | Refusal:
    """worker.hello: a new instance and session with the next epoch, capacity 0.

    ``tokens``: the live tokens of the registrations sharing this
    transaction, read once for all of them (None: this one's token alone).
    """
    if tx.recovering:
        existing = tx.one(sql.INSTANCE, (instance.instance_id,))
        if existing:
            return Registered(view(tx, InstanceRow.from_row(existing)), instance.instance_secret)
    ctx = InstanceContext(new=instance, allowed_queues=None if allowed_queues is None else frozenset(allowed_queues),
                          node_id=tx.node_id, node_state=_node_state(tx),
                          token_live=instance.token_id is None
                          or (tokens or LiveTokens(())).live(tx, instance.token_id))
    dest = decide("instance", "register", "NONE", ctx)
    if isinstance(dest, Refusal):
        return dest
    stamp = db_time(now)
    create(tx, "instance", "register", dest=dest,
           columns=sql.REGISTER_COLUMNS, row=sql.REGISTER_ROW,
           rows=[(instance.instance_id, instance.session_id, ids.secret_digest(instance.instance_secret),
                  instance.worker_name, json.dumps([s.as_json() for s in instance.subscriptions]),
                  instance.cancellation_notifications, instance.concurrency_keys, instance.client_json,
                  instance.token_id, tx.node_id, stamp, stamp)])
    epoch = tx.last_insert_id()  # allocated by the insert: no counter row to lock
    return Registered(
        InstanceView(instance.instance_id, instance.session_id, epoch, dest, 0, False, None, 0),
        instance.instance_secret,
    )


@transition("instance", "set_capacity")
def set_capacity(tx: Tx, *, session_id: str, sequence: int, capacity: int, drain: bool,
                 now: dt.datetime) -> CapacityResult | Refusal:
    """worker.capacity: apply capacity/drain if the sequence is newer; else report the current state."""
    if not 0 <= capacity <= MAX_CAPACITY or not 1 <= sequence <= MAX_COUNTER:
        raise ValueError(f"capacity must be 0..{MAX_CAPACITY} and sequence a uint64 counter")
    row = load_session(tx, session_id, lock=True)
    if row is None:
        return Refusal(SESSION_NOT_FOUND, f"no session {session_id}")
    ctx = InstanceContext(row=row, sequence=sequence, drain=drain)
    dest = decide("instance", "set_capacity", row.state, ctx)
    if isinstance(dest, Refusal):
        if dest.code == STALE_SEQUENCE:
            return CapacityResult(view(tx, row), applied=False)
        return dest
    move(tx, "instance", "set_capacity", [session_id], source=row.state, dest=dest,
         sets="capacity = %s, sequence = %s, updated_at = %s", args=(capacity, sequence, db_time(now)),
         where="sequence <=> %s", where_args=(row.sequence,))
    updated = dataclasses.replace(row, state=dest, capacity=capacity, sequence=sequence)
    return CapacityResult(view(tx, updated), applied=True)


@transition("instance", "operator_drain")
def operator_drain(tx: Tx, *, instance_id: str, now: dt.datetime) -> InstanceView | Refusal:
    """An operator stops new assignments to an instance, on whichever server its session lives."""
    row = tx.one(sql.LOCK_INSTANCE, (instance_id,))
    if row is None:
        return Refusal(INSTANCE_NOT_FOUND, f"no worker instance {instance_id}")
    current = InstanceRow.from_row(row)
    dest = decide("instance", "operator_drain", current.state, InstanceContext(row=current))
    if isinstance(dest, Refusal):
        return dest
    move(tx, "instance", "operator_drain", [instance_id], source=current.state, dest=dest, key="instance_id",
         sets="operator_drained_at = COALESCE(operator_drained_at, %s), updated_at = %s",
         args=(db_time(now), db_time(now)))
    return view(tx, dataclasses.replace(current, state=dest, operator_drained_at=current.operator_drained_at or now))


@transition("instance", "inherit_drain", entry=False)
def inherit_drain(tx: Tx, *, row: InstanceRow, drained_at: dt.datetime, now: dt.datetime) -> bool:
    """A resume moved a lease here from an operator-drained instance: this instance is drained too.

    A worker that reconnects is a new instance; without this its operator's
    drain would end with the old session. The resume has ``row`` locked.
    Returns whether an operator's drain holds the session now, for its live
    session to apply.
    """
    if row.operator_drained_at is not None:
        return True
    dest = decide("instance", "inherit_drain", row.state, InstanceContext(row=row))
    if isinstance(dest, Refusal):  # a session that is already disconnected takes nothing over
        return False
    move(tx, "instance", "inherit_drain", [row.session_id], source=row.state, dest=dest,
         sets="operator_drained_at = %s, updated_at = %s", args=(db_time(drained_at), db_time(now)),
         where="operator_drained_at IS NULL")
    return True


@transition("instance", "disconnect")
def disconnect(tx: Tx, *, session_id: str, now: dt.datetime) -> InstanceView | Refusal:
    """The connection closed; leases stay valid until they expire (resume elsewhere)."""
    row = load_session(tx, session_id, lock=True)
    if row is None:
        return Refusal(SESSION_NOT_FOUND, f"no session {session_id}")
    dest = decide("instance", "disconnect", row.state, InstanceContext(row=row))
    if isinstance(dest, Refusal):
        return dest
    move(tx, "instance", "disconnect", [session_id], source=row.state, dest=dest,
         sets="updated_at = %s, disconnected_at = %s", args=(db_time(now), db_time(now)))
    return view(tx, dataclasses.replace(row, state=dest))


def _node_state(tx: Tx) -> str | None:
    """The registering node's state, share-locked until commit (None: no node).

    ``node.lose`` takes the same row FOR UPDATE before it disconnects the
    node's sessions, so a session is either committed before the sweep
    reads them, or registered after it and refused (the node is LOST).
    """
    if tx.node_id is None:
        return None
    row = tx.one(sql.NODE_STATE_SHARED, (tx.node_id,))
    return row[0] if row else "NONE"


#: node_gone has no guard: the node transition that runs it decided.


@transition("instance", "node_gone", entry=False)
def node_gone(tx: Tx, *, node_id: str, now: dt.datetime, limit: int | None = None,
              skip_locked: bool = True) -> tuple[tuple[str, ...], int]:
    """Disconnect the open sessions of a node that is gone: (their ids, how many are still open).

    Run by ``node.lose`` (another instance, SKIP LOCKED: a session locked
    right now is left for the next pass) and by ``node.stop`` (the node
    itself, after its connections closed; it waits for locks). No ORDER BY:
    the rows come in ``worker_instances_node`` order, so only the rows
    returned are read and locked. Leases are not touched.
    """
    statement = sql.SESSIONS_OF_NODE
    args: tuple = (node_id,)
    if limit is not None:
        statement += sql.LIMIT
        args += (limit,)
    rows = tx.all(statement + (sql.SKIP_LOCKED if skip_locked else sql.FOR_UPDATE), args)
    # Every live state leads to the same place: one UPDATE over all the sources seen.
    if rows:
        move(tx, "instance", "node_gone", [r[0] for r in rows], source=sorted({r[1] for r in rows}),
             sets="updated_at = %s, disconnected_at = %s", args=(db_time(now), db_time(now)))
    (left,) = tx.one(sql.OPEN_SESSIONS_OF_NODE, (node_id,))
    return tuple(r[0] for r in rows), int(left)


def subscriptions_from(items: Sequence[tuple[str, Collection[str] | None]]) -> tuple[SubscribedQueue, ...]:
    """Helper for callers: ``[(queue, kinds | None), ...]`` -> subscriptions."""
    return tuple(SubscribedQueue(q, None if k is None else frozenset(k)) for q, k in items)


__all__ = ["NewInstance", "SubscribedQueue", "disconnect", "inherit_drain", "load_session", "node_gone", "operator_drain", "register",
           "set_capacity", "subscriptions_from", "view"]
