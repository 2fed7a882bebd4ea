"""Chart ``task``: every statement its transaction functions send, named, in one place.

The functions beside this module (``tasks``, ``steps``, ``retention``)
refer to these by name. Column lists come from the row classes and state
lists from the charts, built once at import. A move's own ``SET`` and
``WHERE`` additions stay at its ``chart_write.move`` call, which makes the
UPDATE from the chart.
"""

from __future__ import annotations

from pulse_trio.charts import CHARTS
from pulse_trio.charts.states import LIVE_LEASE_STATES, live_states, sql_list
from pulse_trio.store.engine.rows import KEY_WAIT, UNKEYED_READY, TaskRow
from pulse_trio.store.engine.timer_scan import DueScan

# -- submit, promote, retry (tasks) ----------------------------------------------------------------
#: A new task row (task.submit, task.retry), written through chart_write.create: the state is the chart's.
NEW_TASK_COLUMNS = ("task_id, queue, kind, state, payload, priority, priority_offset_ms, due_at, effective_at,"
                    " idempotency_key, dedup_key, concurrency_key, concurrency_limit, max_attempts, backoff_initial_ms,"
                    " backoff_factor, backoff_max_ms, retry_uncertain, lease_ttl_ms, attempt, effect_uncertain, retry_of,"
                    " created_at, updated_at, fairness_key")
NEW_TASK_ROW = "(%s,%s,%s,{state},%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"
#: The keys of a batch that already have a counter (key_permit's table; no state of its own here).
KEY_COUNTERS_OF = "SELECT concurrency_key FROM key_counters WHERE concurrency_key IN %s"
INSERT_KEY_COUNTER = "INSERT INTO key_counters (concurrency_key, last_token, outstanding) VALUES (%s, 0, 0)"
#: A task's live lease, joined in the statement that reads the task (``t``) for a reader: a held task
#: (OFFERED) is seen as offered or running, at the attempt it runs, by the snapshot that read its row; a
#: second read could meet a finish committed in between and show a running task as offered again.
LIVE_LEASE_JOIN = (" LEFT JOIN leases l FORCE INDEX (leases_task) ON l.task_id = t.task_id"
                   f" AND l.state IN {sql_list(LIVE_LEASE_STATES)}")
#: The task a duplicate submit met: the same id, or the same idempotency key in the queue; with its live
#: lease's state (NULL without one).
_SUBMITTED_BY_ID = f"SELECT t.task_id, t.state, l.state FROM tasks t{LIVE_LEASE_JOIN} WHERE t.task_id = %s"
_SUBMITTED_BY_KEY = (f"SELECT t.task_id, t.state, l.state FROM tasks t{LIVE_LEASE_JOIN}"
                     " WHERE t.queue = %s AND t.dedup_key = %s")
SUBMITTED_BEFORE = f"{_SUBMITTED_BY_ID} UNION ALL {_SUBMITTED_BY_KEY} LIMIT 1"
#: The same as a locking read, which sees the latest committed rows whatever the isolation level: the
#: row a duplicate met was committed after the snapshot of a caller's REPEATABLE READ transaction.
SUBMITTED_BEFORE_LOCKED = (f"({_SUBMITTED_BY_ID} LOCK IN SHARE MODE)"
                           f" UNION ALL ({_SUBMITTED_BY_KEY} LOCK IN SHARE MODE) LIMIT 1")
#: Due SCHEDULED tasks, through ``tasks_due (due_state, due_at)`` (``due_state``: the state while it
#: is one promote leaves, else NULL; migration 0023).
PROMOTE_SCAN = DueScan("task", "promote", "SELECT task_id, due_at, queue, fairness_key, priority_offset_ms"
                       " FROM tasks", "tasks_due", "due_state", "due_at")
LOCK_RETRY_SOURCE = f"SELECT {TaskRow.columns()} FROM tasks t WHERE t.task_id = %s FOR UPDATE"
#: A source's retry (at most one: ``tasks_retry_of`` is unique), found by the source's id even once the
#: purge took the source; share-locked: the purge (SKIP LOCKED) passes it over until the retry call that
#: found it has read it back in its own transaction.
RETRY_OF = "SELECT task_id, effect_uncertain FROM tasks WHERE retry_of = %s LOCK IN SHARE MODE"

# -- the steps other charts' transactions run (steps) -----------------------------------------------
#: A key's READY tasks in the pick-up range that no other claim holds, to set aside.
READY_OF_KEY = ("SELECT task_id FROM tasks FORCE INDEX (tasks_key_pick) WHERE concurrency_key = %s"
                f" AND key_pick = '{UNKEYED_READY}'"
                " LIMIT %s FOR UPDATE SKIP LOCKED")
_WAITING = ("SELECT task_id, queue, kind FROM tasks FORCE INDEX (tasks_key_pick) WHERE concurrency_key = %s"
            f" AND key_pick = '{KEY_WAIT}'")
_IN_PICK_UP_ORDER = " ORDER BY queue, kind, effective_at, task_id LIMIT %s FOR UPDATE"
#: A key's set-aside tasks place by place (queue, kind), each place's in pick-up order, locked.
WAITING_OF_KEY = _WAITING + _IN_PICK_UP_ORDER
#: The same in the places after one (queue, kind): a later kind of its queue, then the later queues. Two
#: ranges of one interval each, never one with an OR, which the optimizer may read from the key's first
#: place on (a run of every task waiting before it). The key is bounded on both sides, not equal: with
#: equal columns before the range the optimizer may choose a ``ref`` on them instead, which reads the
#: key's (or its queue's) waiting tasks from the first on, whenever the range looks dearer (statistics, or
#: entries InnoDB has not purged yet, counted in the range's estimate). Bounded, only the range is left,
#: and the ORDER BY names the index's columns from the key on, so it reads them in order, unsorted.
_AFTER = ("SELECT task_id, queue, kind FROM tasks FORCE INDEX (tasks_key_pick)"
          f" WHERE concurrency_key >= %s AND concurrency_key <= %s AND key_pick = '{KEY_WAIT}'")
_IN_INDEX_ORDER = " ORDER BY concurrency_key, key_pick, queue, kind, effective_at, task_id LIMIT %s FOR UPDATE"
WAITING_AFTER_PLACE = (f"({_AFTER} AND queue = %s AND kind > %s{_IN_INDEX_ORDER})"
                       f" UNION ALL ({_AFTER} AND queue > %s{_IN_INDEX_ORDER})"
                       " ORDER BY queue, kind LIMIT %s")
#: One place's set-aside tasks (a cancel's top-up, with SKIP_LOCKED appended).
WAITING_IN_PLACE = _WAITING + " AND queue = %s AND kind = %s" + _IN_PICK_UP_ORDER
SKIP_LOCKED = " SKIP LOCKED"

# -- the purge (retention) ---------------------------------------------------------------------------
#: The states a purge takes from: the task chart's own list (the terminal ones).
PURGEABLE: tuple[str, ...] = tuple(s for s in CHARTS["task"].spec.states if CHARTS["task"].dests("purge", s))
#: A queue's tasks that ended before a time, through ``tasks_finished``.
DUE = (f"SELECT task_id, state FROM tasks FORCE INDEX (tasks_finished) WHERE queue = %s"
       f" AND outcome_status IN {sql_list(PURGEABLE)} AND finished_at < %s")
#: The key permits a purge leaves with their task: those the key's counter still counts (the chart's live ones).
PERMIT_LIVE: tuple[str, ...] = live_states(CHARTS["key_permit"])
#: Cancel intents that still act on their task (requested or notified, not yet resolved).
INTENT_LIVE = ("REQUESTED", "NOTIFIED")
#: Why a purge leaves an ended task for a later pass however old, one row per reason: the rows (with
#: their task's id and their state) that hold their task while in one of the states. A live lease; a key
#: permit the key's counter still counts (deleting it would lose the count; reached through its lease);
#: a cancel intent that still acts on its task. Each is (its table, the state index a dry run reads it
#: through, what it joins, the held task's column, the state column, the states that hold): the index is
#: forced for the dry run's whole-range read, as MariaDB scans the table once a tenth of it is live; a
#: batch's read goes through the task's ids.
_HOLDS: tuple[tuple[str, str | None, str, str, str, tuple[str, ...]], ...] = (
    ("leases l", "leases_due", "", "l.task_id", "l.state", LIVE_LEASE_STATES),
    ("key_permits p", "key_permits_due", " JOIN leases l ON l.lease_id = p.lease_id", "l.task_id", "p.state",
     PERMIT_LIVE),
    ("cancel_intents c", None, "", "c.task_id", "c.state", INTENT_LIVE),
)


def held_tasks(*, of_batch: bool) -> str:
    """The held tasks' ids (column ``task_id``), from the one rule (:data:`_HOLDS`) the purge and its dry run share.

    ``of_batch``: only the tasks of the list ``%(batch)s`` (a purge's
    batch); else every held task (the dry run's count, which reads each
    reason's rows through its state; the intents by a scan of their table,
    which holds every intent not yet purged: an operator's dry run only).
    """
    return " UNION ".join(
        f"SELECT {task} AS task_id FROM {table}"
        + (f" FORCE INDEX ({index})" if index and not of_batch else "")
        + f"{join} WHERE {state} IN {sql_list(states)}" + (f" AND {task} IN %(batch)s" if of_batch else "")
        for table, index, join, task, state, states in _HOLDS)


#: The due tasks, and how many of them a purge would hold (one scan of the range, for ``--dry-run``).
COUNT_DUE = (f"SELECT COUNT(*), COUNT(held.task_id) FROM ({DUE}) due"
             f" LEFT JOIN ({held_tasks(of_batch=False)}) held ON held.task_id = due.task_id")
#: One state's due tasks in the index's own order, from a position on (the batch's select).
DUE_FROM = ("SELECT task_id, state, finished_at FROM tasks FORCE INDEX (tasks_finished) WHERE queue = %s"
            " AND outcome_status = %s AND finished_at < %s{after}"
            " ORDER BY finished_at, task_id LIMIT %s FOR UPDATE SKIP LOCKED")
DUE_AFTER = " AND (finished_at > %s OR (finished_at = %s AND task_id > %s))"
#: The queues with ended tasks, one index dive per queue (a loose index scan: the MIN is what lets MariaDB
#: jump from queue to queue; ``SELECT DISTINCT queue … WHERE outcome_status IS NOT NULL`` read every entry).
QUEUES_WITH_ENDED_TASKS = ("SELECT queue, MIN(outcome_status) FROM tasks FORCE INDEX (tasks_finished)"
                           " WHERE outcome_status IS NOT NULL GROUP BY queue")
QUEUE_RETENTIONS = ("SELECT queue, task_retention_ms FROM queues"
                    " WHERE task_retention_ms IS NOT NULL AND queue IN %s")
#: The batch's leases, each with whether it has a key permit, in one read.
LEASES_OF_TASKS = ("SELECT l.lease_id, l.task_id, p.lease_id IS NOT NULL FROM leases l FORCE INDEX (leases_task)"
                   " LEFT JOIN key_permits p ON p.lease_id = l.lease_id WHERE l.task_id IN %(batch)s")
#: The batch's tasks that have a cancel intent (``held`` false) and those the purge holds (true), in one read.
INTENTS_AND_HELD_OF_TASKS = ("SELECT task_id, FALSE AS held FROM cancel_intents WHERE task_id IN %(batch)s"
                             f" UNION ALL SELECT task_id, TRUE FROM ({held_tasks(of_batch=True)}) h")
DELETE_RENEW_RECEIPTS = "DELETE FROM renew_receipts WHERE lease_id IN %s"
DELETE_KEY_PERMITS = "DELETE FROM key_permits WHERE lease_id IN %s"
DELETE_LEASES = "DELETE FROM leases WHERE lease_id IN %s"
DELETE_CANCEL_INTENTS = "DELETE FROM cancel_intents WHERE task_id IN %s"
DELETE_TASKS = f"DELETE FROM tasks WHERE task_id IN %s AND state IN {sql_list(PURGEABLE)}"
OLDEST_DUE = (f"SELECT MIN(finished_at) FROM tasks FORCE INDEX (tasks_finished) WHERE queue = %s"
              f" AND outcome_status IN {sql_list(PURGEABLE)} AND finished_at < %s")
