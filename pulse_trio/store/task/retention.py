"""Chart ``task``, trigger ``purge``: delete terminal tasks once they are older than their retention.

Every finished task keeps its row, its leases (one per attempt or lapsed
offer), their renew receipts, a released key permit and a cancel intent.
Kept forever they fill the disk and every index; retention deletes them
once the task ended longer ago than its queue's ``task_retention`` (or the
cluster's, :mod:`pulse_trio.cluster_settings`).

How a pass works, and why it stays out of dispatch's way:

* :func:`retention_plan` (read only) lists, per queue that has ended tasks,
  the cutoff: ``now`` minus the queue's own retention, or the cluster's.
* :func:`purge` deletes one batch of one queue: it reads up to ``limit``
  ended tasks older than the cutoff through ``tasks_finished (queue,
  outcome_status, finished_at)`` ``FOR UPDATE SKIP LOCKED``, in that
  index's order from where the pass's previous batch stopped
  (:class:`PurgePosition`), so two processes purging at once take
  disjoint batches and neither waits; then
  it reads the batch's leases with their key permits (one join), and its
  cancel intents with the tasks it holds, and deletes the children by
  primary key (receipts, permits, leases, cancel intents; a table only when it holds something
  of the batch's) and the tasks: five to seven statements per batch,
  whatever its size. The rows it locks are terminal
  tasks and their ended leases, which no claim, command or timer touches;
  the transaction is short, and the caller pauses between batches.
* A task whose key permit is not RELEASED yet (quarantined after a lost
  lease) or that still has a live lease or cancel intent is left for a
  later pass: deleting it would drop a permit the key's counter still
  counts. Key counters themselves are never deleted: they carry each key's
  fencing token, which must keep increasing.

:func:`count_due` is the same selection, counted, for ``--dry-run``: what a
purge would delete now, and apart what it would leave for a later pass.
Which tasks are held is one rule, ``sql.held_tasks``, that the purge reads
for its batch and the dry run for the whole range, so the two cannot differ.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Sequence

from pulse_trio.store.engine.chart_write import destination
from pulse_trio.store.engine.registry import read_only, transition
from pulse_trio.store.cluster_setting.settings import value_ms
from pulse_trio.store.engine.tx import Tx, after_ms, db_time, py_time
from pulse_trio.store.task import sql
from pulse_trio.store.task.sql import PURGEABLE  # the states a purge takes from: the task chart's terminal ones

#: Tasks per purge transaction (serve's loop and ``pulse-trio task purge``): with their leases and
#: receipts a few thousand rows, a short transaction.
BATCH_TASKS = 500
#: The tables a purge deletes from, children first: what its counts are keyed by.
TABLES = ("renew_receipts", "key_permits", "leases", "cancel_intents", "tasks")


@dataclasses.dataclass(frozen=True, slots=True)
class PurgePosition:
    """Where a batch's select stopped in ``tasks_finished``: the next batch of the pass starts after it.

    Deleted index entries stay behind as delete marks until InnoDB's own
    purge removes them, which lags while the database is busy; a select
    that started at the range's beginning every time would step over all
    the marks the pass has left so far.
    """

    status: str
    finished_at: dt.datetime
    task_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class QueueCutoff:
    """One queue's purge cutoff: tasks that ended before ``before`` are due."""

    queue: str
    retention_ms: int
    own: bool  # the queue's own retention (else the cluster's)
    before: dt.datetime


@dataclasses.dataclass(frozen=True, slots=True)
class PurgeBatch:
    """What one :func:`purge` deleted, per table; ``held``: due tasks left for a later pass."""

    deleted: dict[str, int]
    selected: int
    held: int = 0
    last: PurgePosition | None = None  # where the select stopped (None: it found nothing)

    @property
    def tasks(self) -> int:
        return self.deleted.get("tasks", 0)


@read_only(takes_locks=False)
def retention_plan(tx: Tx, *, now: dt.datetime, queue: str | None = None,
                   older_than_ms: int | None = None) -> list[QueueCutoff]:
    """Each queue with ended tasks (or just ``queue``) and its cutoff.

    ``older_than_ms`` replaces every retention (``pulse-trio task purge
    --older-than``); otherwise a queue's own retention wins over the
    cluster's ``task_retention``.
    """
    if queue is None:
        queues = [q for q, _ in tx.all(sql.QUEUES_WITH_ENDED_TASKS)]
    else:
        queues = [queue]
    if not queues:
        return []
    cluster = value_ms(tx, "task_retention")
    assert cluster is not None
    own = {q: int(ms) for q, ms in tx.all(sql.QUEUE_RETENTIONS, (tuple(queues),))}
    plan = []
    for name in sorted(queues):
        ms = older_than_ms if older_than_ms is not None else own.get(name, cluster)
        plan.append(QueueCutoff(name, ms, older_than_ms is None and name in own, after_ms(now, -ms)))
    return plan


@dataclasses.dataclass(frozen=True, slots=True)
class DueCount:
    """What a purge would do with the queue's tasks that ended before the cutoff."""

    tasks: int  # would be deleted now
    held: int  # would be left for a later pass (a permit not yet released, a live lease or intent)


@read_only(takes_locks=False)
def count_due(tx: Tx, *, queue: str, before: dt.datetime) -> DueCount:
    """The queue's tasks that ended before ``before``, as a purge now would take them (``--dry-run``; nothing is locked).

    Held tasks are counted apart: a dry run that counted them as due would
    promise deletions the purge does not make.
    """
    row = tx.one(sql.COUNT_DUE, (queue, db_time(before)))
    due, held = (int(row[0]), int(row[1])) if row else (0, 0)
    return DueCount(due - held, held)


def _in(ids: Sequence[str]) -> tuple[str, ...]:
    return tuple(ids)


@transition("task", "purge")
def purge(tx: Tx, *, queue: str, before: dt.datetime, limit: int, after: PurgePosition | None = None,
          between: Callable[[], None] | None = None, chunk: int | None = None) -> PurgeBatch:
    """Delete up to ``limit`` of the queue's tasks that ended before ``before``, with everything that is theirs.

    ``after``: the previous batch's ``last``, so that this one's select
    starts where that one stopped (state by state, then ``finished_at``,
    then ``task_id``). Rows passed over (another purge held them) are taken by
    the queue's last batch of the pass, which starts from the beginning again
    (``RetentionPurge.purge_pass``); rows left for later (a live lease, a
    permit not yet released) wait for a later pass.

    ``chunk``: each statement takes at most this many tasks (the batch
    selects, reads and deletes chunk by chunk, in the one transaction with
    one COMMIT), so that no single statement runs long. ``between``, if
    given, is called before each delete, before each chunk after the first
    and before the COMMIT (serve's loop waits there while its process
    dispatches, so the purge's statements and its commit's log flush fall
    between dispatch's; the rows it holds meanwhile are ended tasks no
    dispatch statement touches).
    """
    pause = between if between is not None else _no_pause
    size = limit if chunk is None else max(1, min(chunk, limit))
    done = PurgeBatch({}, 0)
    position = after
    while True:
        asked = min(size, limit - done.selected)
        part = _purge_part(tx, queue=queue, before=before, limit=asked, after=position, pause=pause)
        done = PurgeBatch({t: done.deleted.get(t, 0) + part.deleted.get(t, 0) for t in {*done.deleted, *part.deleted}},
                          done.selected + part.selected, done.held + part.held, part.last or done.last)
        if part.selected < asked or done.selected >= limit:
            break
        position = part.last
        pause()
    if done.selected:
        pause()  # the COMMIT follows
    return done


def _purge_part(tx: Tx, *, queue: str, before: dt.datetime, limit: int, after: PurgePosition | None,
                pause: Callable[[], None]) -> PurgeBatch:
    """One chunk of :func:`purge`: select up to ``limit`` due tasks from ``after`` on, and delete what is theirs."""
    rows: list[tuple[str, str]] = []
    last = after
    statuses = PURGEABLE[PURGEABLE.index(after.status):] if after is not None else PURGEABLE
    for status in statuses:
        if last is not None and last.status == status:
            found = tx.all(sql.DUE_FROM.format(after=sql.DUE_AFTER), (queue, status, db_time(before), db_time(last.finished_at),
                                                           db_time(last.finished_at), last.task_id, limit - len(rows)))
        else:
            found = tx.all(sql.DUE_FROM.format(after=""), (queue, status, db_time(before), limit - len(rows)))
        rows += [(task_id, state) for task_id, state, _ in found]
        if found:
            task_id, _, finished_at = found[-1]
            when = py_time(finished_at)
            assert when is not None  # an ended task has its finished_at
            last = PurgePosition(status, when, task_id)
        if len(rows) >= limit:
            break
    if not rows:
        return PurgeBatch({}, 0)
    for _, state in rows:
        destination("task", "purge", state)  # UndeclaredTransition for a state the chart does not purge
    ids = _in([task_id for task_id, _ in rows])
    # The leases with whether each has a key permit, and the intents with the held tasks (sql.held_tasks,
    # the rule the dry run counts by): two reads; a batch's tasks rarely have permits or intents, so the
    # deletes below only touch the tables that hold something of theirs.
    leases = tx.all(sql.LEASES_OF_TASKS, {"batch": ids})
    marks = tx.all(sql.INTENTS_AND_HELD_OF_TASKS, {"batch": ids})
    held = {task_id for task_id, is_held in marks if is_held}
    keep = [(lease_id, permit) for lease_id, task_id, permit in leases if task_id not in held]
    lease_ids = _in([lease_id for lease_id, _ in keep])
    permit_ids = _in([lease_id for lease_id, permit in keep if permit])
    intent_ids = _in([task_id for task_id, is_held in marks if not is_held and task_id not in held])
    ids = _in([t for t in ids if t not in held])
    deleted = dict.fromkeys(TABLES, 0)
    if lease_ids:
        pause()
        deleted["renew_receipts"] = tx.write(sql.DELETE_RENEW_RECEIPTS, (lease_ids,))
        if permit_ids:
            pause()
            deleted["key_permits"] = tx.write(sql.DELETE_KEY_PERMITS, (permit_ids,))
        pause()
        deleted["leases"] = tx.write(sql.DELETE_LEASES, (lease_ids,))
    if intent_ids:
        pause()
        deleted["cancel_intents"] = tx.write(sql.DELETE_CANCEL_INTENTS, (intent_ids,))
    if ids:
        pause()
        deleted["tasks"] = tx.write(sql.DELETE_TASKS, (ids,))
    return PurgeBatch(deleted, len(rows), len(held), last)


def _no_pause() -> None:
    return None


@read_only(takes_locks=False)
def oldest_due(tx: Tx, *, queue: str, before: dt.datetime) -> dt.datetime | None:
    """When the queue's oldest due task ended (None: nothing is due), for the dry run's report."""
    row = tx.one(sql.OLDEST_DUE, (queue, db_time(before)))
    return py_time(row[0]) if row and row[0] is not None else None


__all__ = ["BATCH_TASKS", "PURGEABLE", "TABLES", "DueCount", "PurgeBatch", "PurgePosition", "QueueCutoff", "count_due", "oldest_due", "purge",
           "retention_plan"]
