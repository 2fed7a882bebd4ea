"""What the shared timers have to do right now: one statement instead of a transaction each.

Every instance ticks several times a second, and almost every tick finds
nothing: no offer past its start timeout, no lease past its expiry, no
task due, no quarantine over, no cancel to push. Each timer is its own
transaction (one per chart transition), so asking each of them costs a
thread hand-off, a locking read and a rollback apiece. :func:`due_work`
asks all of them at once, with non-locking reads of the same index ranges
the timers lock; the timers then run only where something was found. A
row that becomes due just after the look waits for the next tick, as it
would have anyway.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from pulse_trio.store.engine.registry import read_only
from pulse_trio.store.engine.tx import Tx, db_time
from pulse_trio.store.views import sql



@dataclasses.dataclass(frozen=True, slots=True)
class DueWork:
    lapse: bool
    expire: bool
    promote: bool
    quarantine: bool
    cancels: bool  # a lease of this node's opted-in sessions carries a cancel its holder has not been told


@read_only(takes_locks=False)
def due_work(tx: Tx, *, now: dt.datetime, cancels: bool = False) -> DueWork:
    """Which timers have rows due at ``now``; ``cancels``: also look for cancels to push to this node's sessions.

    The cancel look names the node (``tx.node_id``), not its sessions: the
    statement is the same few hundred bytes with one session or ten thousand.
    """
    stamp = db_time(now)
    args: list = [stamp] * 4
    statement = sql.PROBE
    cancels = cancels and tx.node_id is not None
    if cancels:
        statement += sql.CANCELS_PROBE
        args.append(tx.node_id)
    row = tx.one(statement, args)
    return DueWork(bool(row[0]), bool(row[1]), bool(row[2]), bool(row[3]), cancels and bool(row[4]))
