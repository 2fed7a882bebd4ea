"""Chart ``fair_share``: where a task of a fairness key is placed in the pick-up order.

Each (queue, fairness_key) has a virtual clock (``fair_shares.virtual_at``).
A task of the key that becomes READY — submitted due, promoted, retried by
hand — is placed at ``max(due_at, clock)`` (its *fair due time*) and moves
the clock on by ``fairness_quantum / weight``; its ``effective_at`` is the
fair due time minus its priority offset, as for every task. So a key with
many tasks waiting has them spread out in the pick-up order, one every
``quantum / weight``, and a key with few is placed at its due time, ahead of
a flood that was spread past it (docs/priority-and-fairness.md §5).

Everything is decided when the task becomes READY: the claim reads the
same index in the same order as without fairness keys, whatever the number
of keys, and tasks without a key pay nothing. A batch reads its keys'
clocks and weights in one statement that locks nothing, and moves each
key's clock with one UPDATE that only changes the clock it read (rows in
one order, by ``share_id``); another placer's move in between makes it
read the row again under its lock. Keys new to the queue are inserted,
in one statement, with their clocks already past the batch's tasks. So
every serve process and producer places the key's tasks on one clock, and
a batch of one key costs two statements besides the quantum's read (which
a submit shares with the priority step's).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence

import pymysql

from pulse_trio.store.cluster_setting import settings
from pulse_trio.store.engine.chart_write import create, move, try_move
from pulse_trio.store.engine.registry import read_only, transition
from pulse_trio.store.engine.rows import READY_PICKS
from pulse_trio.store.engine.tx import Tx, db_actor, db_time, py_time
from pulse_trio.store.queue import sql

DUPLICATE_KEY = 1062

#: Weights are whole numbers in this range (pulse_trio.client.ranges.FAIRNESS_WEIGHT checks input against
#: the same); a key without a stored weight weighs DEFAULT_WEIGHT.
MIN_WEIGHT, MAX_WEIGHT, DEFAULT_WEIGHT = 1, 10_000, 1


@dataclasses.dataclass(frozen=True, slots=True)
class Arrival:
    """A task of a fairness key becoming READY: where it would be without fairness."""

    queue: str
    fairness_key: str
    due_at: dt.datetime
    priority_offset_ms: int


def share_id(queue: str, fairness_key: str) -> str:
    """The row's key: a queue name holds no space, so the first space splits it."""
    return f"{queue} {fairness_key}"


def weights(tx: Tx, keys: Sequence[str]) -> dict[str, int]:
    """The stored weight of each key (DEFAULT_WEIGHT where none is stored)."""
    found = {k: int(w) for k, w in tx.all(sql.WEIGHTS_OF, (tuple(keys),))} if keys else {}
    return {k: found.get(k, DEFAULT_WEIGHT) for k in keys}


@dataclasses.dataclass(slots=True)
class _Share:
    """One (queue, key) of a placement: its arrivals (indexes, in order), weight and the clock last seen."""

    arrivals: list[int]
    weight: int = DEFAULT_WEIGHT
    clock: dt.datetime | None = None  # None: no row read (a new key, or another transaction inserted it first)


def _walk(arrivals: Sequence[Arrival], share: _Share, clock: dt.datetime, step: dt.timedelta,
          placed: list[dt.datetime]) -> dt.datetime:
    """Place the share's arrivals from ``clock`` on, in order; the clock after them."""
    due_of: dict[dt.datetime, dt.datetime] = {}
    for i in share.arrivals:
        a = arrivals[i]
        due = due_of.get(a.due_at)
        if due is None:
            due = due_of[a.due_at] = py_time(db_time(a.due_at))
        fair = due if due > clock else clock
        placed[i] = fair - dt.timedelta(milliseconds=a.priority_offset_ms) if a.priority_offset_ms else fair
        clock = fair + step
    return clock


def _step(quantum_ms: int, weight: int) -> dt.timedelta:
    return dt.timedelta(microseconds=quantum_ms * 1000 // weight)


@transition("fair_share", "open", entry=False)
def _open(tx: Tx, *, rows: Sequence[tuple[Arrival, dt.datetime, int]], now: dt.datetime) -> set[str]:
    """NONE -> ACTIVE: a row per new (queue, key), its clock already past the ``count`` tasks placed from
    its first arrival's due time on (``end``); the share ids inserted.

    One multi-row INSERT. A concurrent first submit of the same key may
    insert it first: then one row at a time, and a key whose row another
    transaction inserted is placed again by :func:`_advance`, from that
    row's clock.
    """
    values = [(share_id(a.queue, a.fairness_key), a.queue, a.fairness_key, db_time(end), count, db_time(now))
              for a, end, count in rows]
    try:
        create(tx, "fair_share", "open", columns=sql.OPEN_COLUMNS, row=sql.OPEN_ROW, rows=values)
        return {v[0] for v in values}
    except pymysql.err.IntegrityError as exc:
        if exc.args[0] != DUPLICATE_KEY:
            raise
    inserted = set()
    for v in values:
        try:
            create(tx, "fair_share", "open", columns=sql.OPEN_COLUMNS, row=sql.OPEN_ROW, rows=[v])
            inserted.add(v[0])
        except pymysql.err.IntegrityError as exc:
            if exc.args[0] != DUPLICATE_KEY:
                raise
    return inserted


@transition("fair_share", "advance", entry=False)
def _advance(tx: Tx, *, arrivals: Sequence[Arrival], shares: dict[str, _Share], quantum_ms: int,
             now: dt.datetime, placed: list[dt.datetime]) -> None:
    """ACTIVE -> ACTIVE: each key's arrivals placed on its clock (into ``placed``) and the clock moved past them.

    One statement per key: a compare-and-set on the clock this transaction
    read, so the row is locked only by the UPDATE that moves it. If another
    placer moved the clock in between, nothing changed: the row is read
    again under its lock and the arrivals placed from there. Keys go in
    ``share_id`` order, so two placers lock rows in one order.
    """
    stamp = db_time(now)
    for sid in sorted(shares):
        share = shares[sid]
        step = _step(quantum_ms, share.weight)
        count = len(share.arrivals)
        if share.clock is not None:
            end = _walk(arrivals, share, share.clock, step, placed)
            if try_move(tx, "fair_share", "advance", [sid], source="ACTIVE", sets=sql.ADVANCE_SETS,
                        args=(db_time(end), count, stamp), where="virtual_at = %s",
                        where_args=(db_time(share.clock),)) == 1:
                continue
        row = tx.one(sql.LOCK_CLOCK, (sid,))
        assert row is not None  # rows of fair_shares are never deleted
        end = _walk(arrivals, share, py_time(row[0]), step, placed)
        move(tx, "fair_share", "advance", [sid], source="ACTIVE", sets=sql.ADVANCE_SETS, args=(db_time(end), count, stamp))


def place(tx: Tx, arrivals: Sequence[Arrival], *, now: dt.datetime,
          quantum_ms: int | None = None) -> list[dt.datetime]:
    """The fair ``effective_at`` of each arrival, in order, with the keys' clocks moved on.

    ``quantum_ms``: the fairness_quantum the caller read in this
    transaction (a submit reads it with the priority step); None reads it
    here. Arrivals of one key are placed in the order given. A submit whose
    idempotency key turns out to exist already was placed too: its slot
    stays a gap on the key's clock (the key's next task comes one slot
    later, never earlier).
    """
    if not arrivals:
        return []
    if quantum_ms is None:
        quantum_ms = settings.value_ms(tx, "fairness_quantum")
        assert quantum_ms is not None
    shares: dict[str, _Share] = {}
    for i, a in enumerate(arrivals):
        sid = share_id(a.queue, a.fairness_key)
        share = shares.get(sid)
        if share is None:
            share = shares[sid] = _Share([])
        share.arrivals.append(i)
    # The clocks and weights in one read that locks nothing: the UPDATE that moves a clock checks it.
    for sid, clock, weight in tx.all(sql.CLOCKS_AND_WEIGHTS, (tuple(sorted(shares)),)):
        shares[sid].clock = py_time(clock)
        shares[sid].weight = DEFAULT_WEIGHT if weight is None else int(weight)
    placed: list[dt.datetime] = [now] * len(arrivals)
    new = {sid: share for sid, share in sorted(shares.items()) if share.clock is None}
    if new:
        weight_of = weights(tx, sorted({arrivals[share.arrivals[0]].fairness_key for share in new.values()}))
        rows = []
        for share in new.values():
            first = arrivals[share.arrivals[0]]
            share.weight = weight_of[first.fairness_key]
            end = _walk(arrivals, share, py_time(db_time(first.due_at)), _step(quantum_ms, share.weight), placed)
            rows.append((first, end, len(share.arrivals)))
        for sid in _open(tx, rows=rows, now=now):
            del shares[sid]  # placed: its row starts past them
    if shares:
        _advance(tx, arrivals=arrivals, shares=shares, quantum_ms=quantum_ms, now=now, placed=placed)
    return placed


@read_only(takes_locks=False)
def list_weights(tx: Tx) -> dict[str, dict[str, object]]:
    """Every stored weight (keys not listed weigh DEFAULT_WEIGHT)."""
    return {k: {"weight": int(w), "updated_at": py_time(at), "updated_by": by}
            for k, w, at, by in tx.all(sql.ALL_WEIGHTS)}




@transition("fairness_weight", "set")
def set_weight(tx: Tx, *, fairness_key: str, weight: int, now: dt.datetime, updated_by: str) -> int | None:
    """Store the key's weight (checked by the caller); the weight it had (None: never set, so 1)."""
    if not MIN_WEIGHT <= weight <= MAX_WEIGHT:
        raise ValueError(f"weight must be {MIN_WEIGHT} to {MAX_WEIGHT}")
    row = tx.one(sql.LOCK_WEIGHT, (fairness_key,))
    stamp, who = db_time(now), db_actor(updated_by)
    if row is None:
        try:
            create(tx, "fairness_weight", "set", columns=sql.WEIGHT_COLUMNS, row=sql.WEIGHT_ROW, rows=[(fairness_key, weight, stamp, who)])
            return None
        except pymysql.err.IntegrityError as exc:
            if exc.args[0] != DUPLICATE_KEY:
                raise
            row = tx.one(sql.LOCK_WEIGHT, (fairness_key,))
    if int(row[0]) == weight:
        return weight  # nothing changes
    move(tx, "fairness_weight", "set", [fairness_key], source="SET", sets="weight = %s, updated_at = %s,"
         " updated_by = %s", args=(weight, stamp, who))
    return int(row[0])


#: Per queue, /metrics and the dashboard name this many fairness keys (the most ready work); the rest are "other".
TOP_KEYS = 10
OTHER = "other"


@read_only(takes_locks=False)
def key_figures(tx: Tx, *, since: dt.datetime, queues: Sequence[str] | None = None,
                top: int = TOP_KEYS) -> dict[str, list[dict[str, object]]]:
    """Per queue, the fairness keys with the most READY tasks, then ``other``: ready count and recent finishes.

    Bounded label sets: at most ``top`` keys plus ``other`` per queue. Ready
    counts read the READY ranges (``READY``, ``KEYED``, ``KEY_WAIT``) of
    ``tasks_pickup (queue, pick_state, effective_at, task_id,
    fairness_key)``, index only, in the queues where a key was ever placed
    (``fair_shares``): an index of their own would move at every offer of a
    keyed task. The finishes since ``since`` read each (queue, outcome)
    range of ``tasks_finished`` from ``since`` on, so their cost follows the
    finishing rate.
    """
    ready: dict[str, dict[str, int]] = {}
    fair_queues = [r[0] for r in tx.all(sql.FAIR_QUEUES)]
    if queues is not None:
        fair_queues = [q for q in fair_queues if q in set(queues)]
    if fair_queues:
        for queue, key, count in tx.all(sql.READY_BY_KEY, (tuple(fair_queues), tuple(READY_PICKS))):
            ready.setdefault(queue, {})[key] = int(count)
    finished: dict[str, dict[str, int]] = {}
    pairs = tx.all(sql.FINISHED_PAIRS)
    if pairs:
        args = [v for queue, status in pairs for v in (queue, status, db_time(since))]
        for queue, key, count in tx.all(" UNION ALL ".join([sql.FINISHED_BY_KEY] * len(pairs)), args):
            per = finished.setdefault(queue, {})
            per[key] = per.get(key, 0) + int(count)
    wanted = None if queues is None else set(queues)
    out: dict[str, list[dict[str, object]]] = {}
    for queue in sorted(set(ready) | set(finished)):
        if wanted is not None and queue not in wanted:
            continue
        r, f = ready.get(queue, {}), finished.get(queue, {})
        keys = sorted(set(r) | set(f), key=lambda k: (-r.get(k, 0), -f.get(k, 0), k))
        # A key that is itself called "other" is counted in the row of that name, never shown beside it.
        shown = [k for k in keys if k != OTHER][:top]
        rest = [k for k in keys if k not in shown]  # shown holds at most ``top``
        total = sum(f.values())
        rows: list[dict[str, object]] = [
            {"fairness_key": k, "ready": r.get(k, 0), "recent_finished": f.get(k, 0),
             "recent_share": round(f.get(k, 0) / total, 4) if total else None} for k in shown]
        if rest:
            other_f = sum(f.get(k, 0) for k in rest)
            rows.append({"fairness_key": OTHER, "ready": sum(r.get(k, 0) for k in rest), "recent_finished": other_f,
                         "recent_share": round(other_f / total, 4) if total else None, "keys": len(rest)})
        out[queue] = rows
    return out


__all__ = ["Arrival", "DEFAULT_WEIGHT", "MAX_WEIGHT", "MIN_WEIGHT", "OTHER", "TOP_KEYS", "key_figures", "list_weights",
           "place", "set_weight", "share_id", "weights"]
