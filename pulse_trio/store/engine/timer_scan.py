"""The claim every shared timer starts with: due rows, ``FOR UPDATE SKIP LOCKED``, up to a limit.

Each timer (lease lapse and expire, task promote, the end of a permit's
quarantine, node lose) reads the rows its trigger may move whose due time
has come, locking them and skipping any another transaction holds, so
several instances share the work and never move a row twice. Which states
are due is the chart's: the sources of the timer's trigger. The caller then
decides each row (``registry.decide``) and moves the rows with
``chart_write.move``, as a group where they change the same way.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Sequence
from typing import Any

from pulse_trio.charts import CHARTS
from pulse_trio.charts.states import sql_list
from pulse_trio.store.engine.tx import Tx, db_time


@dataclasses.dataclass(frozen=True, slots=True)
class DueScan:
    """One timer's claim, by the index that serves it (state, due time), named in the statement.

    Named, because whenever the range up to ``now`` looks dearer than a
    table scan (its estimate counts the entries of rows the timer moved that
    InnoDB has not purged yet, while a long transaction holds purge back),
    MariaDB drops it for a ref on the state alone, which reads every row in
    the state, those due much later too. Forced, the range is kept, and it
    keys more columns than the ref, so it is the plan.
    """

    chart: str
    trigger: str
    select: str  # "SELECT <columns> FROM <table> [alias]"
    index: str  # (state, due time, ...)
    state_column: str
    due_column: str
    #: Oldest first; a scan that reads the index in its own order (no ORDER BY)
    #: reads and locks only the rows it returns.
    ordered: bool = True
    where: str = ""  # a further condition, its arguments passed to claim()


def sources(chart: str, trigger: str) -> tuple[str, ...]:
    """The states ``trigger`` leaves, in declaration order: the rows a timer looks at."""
    return tuple(dict.fromkeys(t.source for t in CHARTS[chart].transitions_for(trigger)))


def due_states(chart: str, trigger: str, column: str) -> str:
    """``column = 'A'`` or ``column IN ('A', 'B')``: the states a timer of ``trigger`` looks at."""
    states = sources(chart, trigger)
    return f"{column} = '{states[0]}'" if len(states) == 1 else f"{column} IN {sql_list(states)}"


@functools.lru_cache(maxsize=None)
def statement(scan: DueScan) -> str:
    return (f"{scan.select} FORCE INDEX ({scan.index}) WHERE {due_states(scan.chart, scan.trigger, scan.state_column)}"
            f" AND {scan.due_column} <= %s"
            f"{' AND ' + scan.where if scan.where else ''}"
            f"{' ORDER BY ' + scan.due_column if scan.ordered else ''} LIMIT %s FOR UPDATE SKIP LOCKED")


def claim(tx: Tx, scan: DueScan, *, now: dt.datetime, limit: int, where_args: Sequence[Any] = ()) -> list[tuple]:
    """Lock and return up to ``limit`` due rows that no other transaction holds."""
    return tx.all(statement(scan), (db_time(now), *where_args, limit))


__all__ = ["DueScan", "claim", "due_states", "sources", "statement"]
