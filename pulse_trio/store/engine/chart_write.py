"""The one writer of a persistent state change: a guarded compare-and-set taken from the chart.

Every UPDATE that moves a row of a persistent chart goes through :func:`move`,
and every INSERT of a new row through :func:`create`.
Its ``SET state = %s`` is the destination the chart declares for
(trigger, source) and its ``WHERE state IN (...)`` are the sources being
moved, so a transaction function cannot write a state name of its own:
an undeclared (trigger, source), or a destination the chart does not name
for it, raises :class:`UndeclaredTransition` before anything is sent. The
caller adds the columns the transition changes besides the state (``sets``)
and any further compare-and-set condition (``where``). :func:`create` writes
the state the chart declares for (trigger, the chart's initial state: no row
yet) into the new rows, so an insert cannot name a state of its own either.

It runs only inside the transition's own transaction function (the
``@transition`` of the same chart and trigger is on the stack), and a batch
is one statement per group of rows that share (source, destination) and
the same extra values: callers group before they call.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Sequence
from typing import Any

from pulse_trio.charts import CHARTS, ChartError
from pulse_trio.store.engine.tx import InvariantViolation, Tx, UnregisteredWrite

#: The table and key column behind each persistent chart's rows.
TABLES: dict[str, tuple[str, str]] = {
    "task": ("tasks", "task_id"),
    "lease": ("leases", "lease_id"),
    "key_permit": ("key_permits", "lease_id"),
    "cancellation": ("cancel_intents", "task_id"),
    "instance": ("worker_instances", "session_id"),
    "node": ("server_nodes", "node_id"),
    "queue": ("queues", "queue"),
    "schedule": ("schedules", "schedule_id"),
    "fair_share": ("fair_shares", "share_id"),
    "fairness_weight": ("fairness_weights", "fairness_key"),
    "cluster_setting": ("cluster_settings", "name"),
}


#: The move keys a table's primary key does not start with, and the index that does. Every other
#: key is its table's primary key.
SECONDARY_KEY_INDEXES: dict[tuple[str, str], str] = {("worker_instances", "session_id"): "worker_instances_session"}


def key_index(table: str, column: str) -> str:
    """The index that finds ``table``'s rows by a move's key (its first ``column``).

    A move names it (FORCE INDEX), so the optimizer never weighs the other
    indexes for an IN list of keys. Left to itself it took ``leases_owner``
    (whose entries end in the primary key) for the lean lease moves: a second
    index read per row, and a buffered UPDATE since that index holds the state
    being moved.
    """
    return SECONDARY_KEY_INDEXES.get((table, column), "PRIMARY")


class UndeclaredTransition(InvariantViolation):
    """The chart declares no such (trigger, source) -> dest; nothing was written."""


@functools.lru_cache(maxsize=None)
def destination(chart: str, trigger: str, source: str, dest: str | None = None) -> str:
    """Where ``trigger`` takes a row in ``source``, as the chart declares it.

    ``dest`` is the one :func:`~pulse_trio.store.engine.registry.decide` chose when
    guards select among several; it must be one the chart names for the
    pair. Without it the pair must lead to exactly one state.
    """
    try:
        dests = CHARTS[chart].dests(trigger, source)
    except (KeyError, ChartError) as exc:
        raise UndeclaredTransition(f"{chart}.{trigger}: {exc}") from None
    if not dests:
        raise UndeclaredTransition(f"{chart}.{trigger} is not declared from {source}")
    if dest is None:
        if len(dests) != 1:
            raise UndeclaredTransition(f"{chart}.{trigger} from {source} leads to {sorted(dests)}: name one")
        (dest,) = dests
    elif dest not in dests:
        raise UndeclaredTransition(f"{chart}.{trigger} does not lead from {source} to {dest}")
    return dest


def _dest_of(chart: str, trigger: str, sources: tuple[str, ...], dest: str | None) -> str:
    found = {destination(chart, trigger, s, dest) for s in sources}
    if len(found) != 1:
        raise UndeclaredTransition(f"{chart}.{trigger} from {list(sources)} leads to {sorted(found)}: one group each")
    return found.pop()


@functools.lru_cache(maxsize=512)
def statement(chart: str, sets: str = "", where: str = "", key: str | None = None) -> str:
    """``UPDATE <table> FORCE INDEX (<key's>) SET state = %s[, sets] WHERE <key> IN %s AND state IN %s[ AND where]``.

    ``key`` is a column or a tuple of columns (``(lease_id, owner_session_id, revision)``) whose
    first names the rows; :func:`key_index` says which index finds them. Kept per shape (bounded:
    a batch of mixed outcomes adds a CASE per lease to ``sets``, so shapes vary with batch sizes).
    """
    table, default_key = TABLES[chart]
    key = key or default_key
    index = key_index(table, key.strip("()").split(",")[0].strip())
    return (f"UPDATE {table} FORCE INDEX ({index}) SET state = %s{', ' + sets if sets else ''}"
            f" WHERE {key} IN %s AND state IN %s{' AND ' + where if where else ''}")


def move(tx: Tx, chart: str, trigger: str, ids: Collection[Any], *, source: str | Sequence[str],
         dest: str | None = None, sets: str = "", args: Sequence[Any] = (), where: str = "",
         where_args: Sequence[Any] = (), key: str | None = None) -> str:
    """Move the rows ``ids`` (all in ``source``) by ``trigger``; return the state they are in now.

    One guarded UPDATE that must change one row per id, else
    :class:`~pulse_trio.store.engine.tx.CasMismatch` rolls the transaction back.
    """
    keys = tuple(ids)
    sql, params, state = _prepared(tx, chart, trigger, keys, source, dest, sets, args, where, where_args, key)
    tx.cas(sql, params, expected=len(keys))
    return state


def try_move(tx: Tx, chart: str, trigger: str, ids: Collection[Any], *, source: str | Sequence[str],
             dest: str | None = None, sets: str = "", args: Sequence[Any] = (), where: str = "",
             where_args: Sequence[Any] = (), key: str | None = None) -> int:
    """:func:`move` for rows nobody locked first: the rows changed, which may be fewer than ``ids``.

    The statement is the same chart-checked compare-and-set; ``where`` is
    the guard the database checks in place of a locking read. A caller that
    gets fewer rows than it asked for decides what to do (the lean lease
    commands take the locking path, or roll back and run again).
    """
    sql, params, _ = _prepared(tx, chart, trigger, ids, source, dest, sets, args, where, where_args, key)
    return tx.write(sql, params)


def create(tx: Tx, chart: str, trigger: str, *, columns: str, row: str, rows: Sequence[Sequence[Any]],
           dest: str | Sequence[str] | None = None, suffix: str = "", ignore: bool = False) -> int:
    """Insert ``rows`` as new rows of ``chart`` by ``trigger``; return how many were inserted.

    ``columns`` names the table's columns, ``state`` among them; ``row`` is
    one row's VALUES tuple with ``{state}`` where the state goes and ``%s``
    for each of the row's values in ``rows``. The state is the chart's
    destination from its initial state (no row yet): ``dest`` names the one
    the guards chose when the chart leads to several, one for all rows or
    one per row. Several rows of parameters only go through ``executemany``
    (PyMySQL cuts them into statements that fit the packet limit; the state
    is a parameter too); rows with literals in them (a claim's shared
    values) go in one statement, with one state for all as a literal.
    ``ignore``: INSERT IGNORE (a row whose key exists is skipped, not an error). ``suffix``
    follows the VALUES (``ON DUPLICATE KEY UPDATE ...``).
    """
    name = f"{chart}.{trigger}"
    if tx.current != name:
        raise UnregisteredWrite(f"{name} is written only by its own transaction function, not {tx.current}")
    if not rows:
        return 0
    initial = CHARTS[chart].spec.initial
    table = TABLES[chart][0]
    if dest is None or isinstance(dest, str):
        states = [destination(chart, trigger, initial, dest)] * len(rows)
    else:
        states = [destination(chart, trigger, initial, d) for d in dest]
        if len(states) != len(rows):
            raise ValueError("one dest per row")
    as_parameter = row.replace("{state}", "%s")
    insert = f"INSERT {'IGNORE ' if ignore else ''}INTO {table} ({columns}) VALUES"
    at = row[:row.index("{state}")].count("%s")  # the state's place among the row's parameters
    if len(rows) > 1 and not suffix and _ONLY_PARAMETERS.fullmatch(as_parameter):
        # Parameters only: executemany folds the rows into statements that fit the packet limit.
        return tx.write_many(f"{insert} {as_parameter}", [(*r[:at], st, *r[at:]) for st, r in zip(states, rows)])
    if len(set(states)) == 1:
        # One state, as a literal sent once per statement (beside the row's other literals, if any).
        one = row.replace("{state}", tx.literal(states[0]))
        return tx.write(f"{insert} {', '.join([one] * len(rows))}{suffix}", [a for r in rows for a in r])
    return tx.write(f"{insert} {', '.join([as_parameter] * len(rows))}{suffix}",
                    [a for st, r in zip(states, rows) for a in (*r[:at], st, *r[at:])])


#: A VALUES tuple of parameters only: what PyMySQL's executemany turns into multi-row statements.
_ONLY_PARAMETERS = re.compile(r"\(\s*%s(?:\s*,\s*%s)*\s*\)")


def _prepared(tx: Tx, chart: str, trigger: str, ids: Collection[Any], source: str | Sequence[str],
              dest: str | None, sets: str, args: Sequence[Any], where: str, where_args: Sequence[Any],
              key: str | None) -> tuple[str, tuple, str]:
    name = f"{chart}.{trigger}"
    if tx.current != name:
        raise UnregisteredWrite(f"{name} is written only by its own transaction function, not {tx.current}")
    sources = (source,) if isinstance(source, str) else tuple(source)
    state = _dest_of(chart, trigger, sources, dest)
    return statement(chart, sets, where, key), (state, *args, tuple(ids), sources, *where_args), state


__all__ = ["SECONDARY_KEY_INDEXES", "TABLES", "UndeclaredTransition", "create", "destination", "key_index", "move", "statement",
           "try_move"]
