"""Chart ``node``: the liveness of every serve process, as rows of ``server_nodes``.

Theory of operation. Each ``pulse-trio serve`` process is a *node*. It
records itself at start (``start``), heartbeats from its timers loop
(``heartbeat``: ``expires_at = now + lapse``) and marks itself STOPPED on a
graceful shutdown (``stop``). Every session row names the node holding it
(``instance.register`` records ``tx.node_id``).

A node that dies without stopping (SIGKILL, a lost host) stops
heartbeating. Every other node runs ``lose`` on each timers tick: one
SELECT on ``server_nodes_due (state, expires_at)`` with ``FOR UPDATE SKIP
LOCKED``, so an idle cluster pays one indexed statement per tick and two
instances never sweep the same node at once. A node past its
``expires_at`` turns LOST in the same transaction that disconnects its
sessions (``instance.node_gone``); sessions locked at that moment are left
for a later pass, and the node keeps its ``expires_at`` until none is
left. Leases are never touched: they expire on their own or are resumed.

Who asks is ``tx.node_id`` (the serve process's Store carries it): a node
starts, heartbeats, rejoins and stops only itself, and never declares
itself lost. A node that was alive after all (paused, or cut off from the
database, past its lapse) finds its heartbeat refused with ``node_lost``;
its sessions are already DISCONNECTED, so it closes its connections and
``rejoin``s (``pulse_trio.server.liveness``).

Lock order: the node row, then its session rows. ``register`` share-locks
the node row before inserting its session, so a registration either
commits before a sweep reads the node's sessions or is refused after it.
"""

from __future__ import annotations

import datetime as dt

from pulse_trio.store.instance import instances
from pulse_trio.store.engine.chart_write import create, move
from pulse_trio.store.engine.guard_context import NodeContext
from pulse_trio.store.engine.registry import decide, guard, transition
from pulse_trio.store.engine.results import INVALID_TRANSITION, NODE_LOST, Refusal, TimerResult
from pulse_trio.store.engine.rows import NodeRow
from pulse_trio.store.engine.timer_scan import claim
from pulse_trio.store.engine.tx import Tx, after_ms, db_time
from pulse_trio.store.instance import sql



@guard("node", "not_declared_lost", code=NODE_LOST)
def _not_declared_lost(c) -> bool:
    """No other instance has declared this node lost; if one has, its sessions are DISCONNECTED already."""
    return c.node.state != "LOST"


@guard("node", "heartbeat_lapsed")
def _heartbeat_lapsed(c) -> bool:
    """The node's expires_at (last heartbeat + its lapse) has passed by the sweeping node's clock."""
    return c.node.expires_at is not None and db_time(c.node.expires_at) <= db_time(c.now)


@guard("node", "other_node")
def _other_node(c) -> bool:
    """The node declaring the loss is not the lost node: a node never declares itself lost."""
    return c.node.node_id != c.declared_by


def _me(tx: Tx) -> str:
    if tx.node_id is None:
        raise ValueError("chart node runs only on a serve process's store: Store(..., node_id=...)")
    return tx.node_id


def _lock_me(tx: Tx) -> NodeRow | Refusal:
    """This process's own node row, locked; refused when it is not recorded (removed by hand?)."""
    row = tx.one(sql.LOCK_NODE, (_me(tx),))
    return NodeRow.from_row(row) if row else Refusal(INVALID_TRANSITION, f"no node {tx.node_id}")


@transition("node", "start")
def start(tx: Tx, *, now: dt.datetime, lapse_ms: int, host: str, pid: int) -> NodeRow:
    """A serve process records itself ALIVE before it listens (its ports are bound already).

    A row with this id is this process's own start: its COMMIT landed, and
    either the store's re-run (``tx.recovering``) or, once the store gave up,
    the next heartbeat's fresh try finds it, instead of inserting it again.
    """
    me = _me(tx)
    existing = tx.one(sql.NODE, (me,))
    if existing:
        return NodeRow.from_row(existing)
    if lapse_ms < 1:
        raise ValueError("lapse_ms must be positive")
    dest = decide("node", "start", "NONE", NodeContext())
    assert isinstance(dest, str), dest
    expires = after_ms(now, lapse_ms)
    create(tx, "node", "start", dest=dest,
           columns=sql.NODE_COLUMNS, row=sql.NODE_ROW,
           rows=[(me, host[:255], pid, lapse_ms, db_time(now), db_time(now), db_time(expires))])
    return NodeRow(me, dest, host[:255], pid, lapse_ms, now, now, expires, None, None, None)


@transition("node", "heartbeat")
def heartbeat(tx: Tx, *, now: dt.datetime, lapse_ms: int | None = None) -> NodeRow | Refusal:
    """ALIVE: push expires_at to now + lapse. LOST: refused with ``node_lost`` (see the module docstring).

    ``lapse_ms`` is the node's lapse from now on (the cluster's node_lapse
    may have changed); None keeps the one in its row.
    """
    node = _lock_me(tx)
    if isinstance(node, Refusal):
        return node
    dest = decide("node", "heartbeat", node.state, NodeContext(node=node))
    if isinstance(dest, Refusal):
        return dest
    if db_time(now) <= db_time(node.heartbeat_at):
        return node  # no time has passed (or the clock stepped back): never shorten expires_at
    return _beat(tx, "heartbeat", node, dest, now, lapse_ms)


@transition("node", "rejoin")
def rejoin(tx: Tx, *, now: dt.datetime, lapse_ms: int | None = None) -> NodeRow | Refusal:
    """LOST -> ALIVE with a fresh heartbeat, once the node has closed the connections it held."""
    node = _lock_me(tx)
    if isinstance(node, Refusal):
        return node
    if tx.recovering and node.state == "ALIVE":
        return node
    dest = decide("node", "rejoin", node.state, NodeContext(node=node))
    if isinstance(dest, Refusal):
        return dest
    return _beat(tx, "rejoin", node, dest, now, lapse_ms)


def _beat(tx: Tx, trigger: str, node: NodeRow, dest: str, now: dt.datetime, lapse_ms: int | None) -> NodeRow:
    """``dest`` with a fresh heartbeat: heartbeat_at = now, expires_at = now + the node's (new) lapse."""
    if lapse_ms is not None and lapse_ms < 1:
        raise ValueError("lapse_ms must be positive")
    lapse = node.lapse_ms if lapse_ms is None else lapse_ms
    expires = after_ms(now, lapse)
    move(tx, "node", trigger, [node.node_id], source=node.state, dest=dest,
         sets="lapse_ms = %s, heartbeat_at = %s, expires_at = %s", args=(lapse, db_time(now), db_time(expires)))
    return NodeRow(node.node_id, dest, node.host, node.pid, lapse, node.started_at, now, expires,
                   node.lost_at, node.lost_by, node.stopped_at)


@transition("node", "stop")
def stop(tx: Tx, *, now: dt.datetime) -> int | Refusal:
    """Graceful shutdown: STOPPED; a session still recorded open here is disconnected. Returns how many were."""
    node = _lock_me(tx)
    if isinstance(node, Refusal):
        return node
    if tx.recovering and node.state == "STOPPED":
        return 0
    dest = decide("node", "stop", node.state, NodeContext(node=node))
    if isinstance(dest, Refusal):
        return dest
    gone, _ = instances.node_gone(tx, node_id=node.node_id, now=now, skip_locked=False)
    move(tx, "node", "stop", [node.node_id], source=node.state, dest=dest, sets="stopped_at = %s, expires_at = NULL",
         args=(db_time(now),))
    return len(gone)


@transition("node", "lose")
def lose(tx: Tx, *, now: dt.datetime, limit: int = 500, max_nodes: int = 16) -> TimerResult:
    """Timer: declare lapsed nodes LOST and disconnect their sessions, at most ``limit`` sessions per batch.

    When nothing lapsed this is one indexed SELECT that returns no row. The
    scan has no ORDER BY, so only the rows it returns are read and locked
    (lapsed ALIVE nodes come before LOST ones with sessions left, in index
    order). ``count`` is the sessions disconnected; ``more``: the batch was
    full, of sessions, or of nodes of which some were declared lost now (a
    host running a serve group leaves many at once; a full batch of LOST
    nodes whose sessions are all locked waits for the next tick). Leases are
    not touched.
    """
    me = _me(tx)
    nodes = [NodeRow.from_row(r) for r in claim(tx, sql.LAPSED_SCAN, now=now, limit=max_nodes, where_args=(me,))]
    budget, count, lost = limit, 0, []
    for node in nodes:
        if budget <= 0:
            break
        dest = decide("node", "lose", node.state, NodeContext(node=node, now=now, declared_by=me))
        if isinstance(dest, Refusal):
            continue
        gone, left = instances.node_gone(tx, node_id=node.node_id, now=now, limit=budget)
        budget -= len(gone)
        count += len(gone)
        expires = node.expires_at if left else None
        if node.state == "ALIVE":
            move(tx, "node", "lose", [node.node_id], source=node.state, dest=dest,
                 sets="lost_at = %s, lost_by = %s, expires_at = %s",
                 args=(db_time(now), me, db_time(expires) if expires else None))
            lost.append(node.node_id)
        elif expires is None:
            move(tx, "node", "lose", [node.node_id], source=node.state, dest=dest, sets="expires_at = NULL")
    more_nodes = len(nodes) == max_nodes and bool(lost)
    return TimerResult(count, budget <= 0 or more_nodes, lost_nodes=tuple(lost))


__all__ = ["heartbeat", "lose", "rejoin", "start", "stop"]
