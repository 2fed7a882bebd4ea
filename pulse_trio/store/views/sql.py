"""The read side: every statement its views send, named, in one place.

The views beside this module (``task``, ``queries``, ``dashboard``,
``timer_probe``) refer to these by name. Column lists come from the row
classes and state lists from the charts, built once at import. Nothing here
locks or writes.
"""

from __future__ import annotations

from pulse_trio.charts.states import (
    LIVE_HOLD, LIVE_LEASE_STATES, LIVE_NODE_STATES, LIVE_SESSION_STATES, TERMINAL_TASK_STATES, WAITING_TASK_STATES,
    sql_list, sql_rows,
)
from pulse_trio.store.cancellation.sql import NODE_PUSHES_DUE
from pulse_trio.store.task.sql import LIVE_LEASE_JOIN
from pulse_trio.store.engine.rows import READY_PICKS, LeaseRow, TaskRow
from pulse_trio.store.engine.timer_scan import due_states

# -- one task, as ``task show`` prints it (task) -----------------------------------------------------
#: The task's columns, then its live lease's state and attempt (NULL, NULL without one).
TASK_AS_SEEN = f"{TaskRow.columns()}, l.state, l.attempt"
#: One task and its live lease's columns (all NULL without one), in one statement.
TASK = f"SELECT {TaskRow.columns()}, {LeaseRow.columns()} FROM tasks t{LIVE_LEASE_JOIN} WHERE t.task_id = %s"
#: Whether the task is still there: read after an ended task's other rows (the purge deletes them all at once).
STILL_THERE = "SELECT 1 FROM tasks WHERE task_id = %s"
#: A task's attempts: its started leases, in order.
ATTEMPTS = ("SELECT attempt, lease_id, owner_session_id, status, started_at, ended_at, error_code, error_message,"
            " retryable, effect_uncertain, concurrency_token, result FROM leases WHERE task_id = %s"
            " AND started_at IS NOT NULL ORDER BY attempt")
RETRIED_BY = "SELECT task_id FROM tasks WHERE retry_of = %s"
CANCEL_INTENT = ("SELECT state, requested_at, grace_expires_at, reason, requested_by, resolved_at"
                 " FROM cancel_intents WHERE task_id = %s")

# -- the producer's listings and queue depths (queries) ------------------------------------------------
#: Which of some tasks ended: primary-key probes.
ENDED = f"SELECT task_id FROM tasks WHERE task_id IN %s AND state IN {sql_list(sorted(TERMINAL_TASK_STATES))}"
#: Every queue that has a task (a loose index scan).
TASK_QUEUES = "SELECT DISTINCT queue FROM tasks"
#: The task listing: `` WHERE`` and its conditions (``t.<column> = %s``, ``IN_QUEUES``, a cursor) may
#: follow, then the order and limit.
LIST_TASKS = f"SELECT {TASK_AS_SEEN} FROM tasks t{LIVE_LEASE_JOIN}"
IN_QUEUES = "t.queue IN %s"
#: A held task (``t.state`` OFFERED) whose live lease (joined) is in a given state: offered, or running.
HELD_AS = "l.state = %s"
BEFORE_ID = "t.task_id < %s"
AFTER_ID = "t.task_id > %s"
NEWEST_FIRST = " ORDER BY t.task_id DESC LIMIT %s"
OLDEST_FIRST = " ORDER BY t.task_id LIMIT %s"
#: The queues that have tasks, by a loose scan of ``tasks_pickup`` (one dive per queue, however many
#: tasks), each joined with a set of states (``sql_rows``) so that a lookup by (queue, state) is an
#: equality on both parts of an index. ``SELECT DISTINCT queue, pick_state … WHERE pick_state IS NOT
#: NULL`` is no loose scan: MariaDB walks the whole index for it, every ended task included.
_QUEUES = "(SELECT DISTINCT queue FROM tasks FORCE INDEX (tasks_pickup)) q"
_WAITING_PICKS = sql_rows(tuple(dict.fromkeys((*WAITING_TASK_STATES, *READY_PICKS))))
_ENDED = sql_rows(tuple(sorted(TERMINAL_TASK_STATES)))
#: Tasks per state per queue, each group through an index that holds only it. The waiting ones: per
#: queue and pick state one index-only range of ``tasks_pickup``.
#: The held ones: through their live leases. What both cost grows with the tasks waiting and held only.
QUEUE_DEPTHS_OPEN = (
    f"SELECT q.queue, p.state, COUNT(*) FROM {_QUEUES} STRAIGHT_JOIN {_WAITING_PICKS} p"
    " STRAIGHT_JOIN tasks t FORCE INDEX (tasks_pickup) ON t.queue = q.queue AND t.pick_state = p.state"
    " GROUP BY q.queue, p.state"
    " UNION ALL SELECT t.queue, l.state, COUNT(*) FROM leases l FORCE INDEX (leases_due)"
    f" JOIN tasks t ON t.task_id = l.task_id WHERE l.state IN {sql_list(LIVE_LEASE_STATES)} GROUP BY t.queue, l.state")
#: The ended ones: the whole of ``tasks_finished``, so its cost grows with the history the retention keeps.
QUEUE_DEPTHS = (QUEUE_DEPTHS_OPEN + " UNION ALL SELECT queue, outcome_status, COUNT(*) FROM tasks"
                " FORCE INDEX (tasks_finished) WHERE finished_at IS NOT NULL GROUP BY queue, outcome_status")
#: Worker instances with their held leases (``LIVE_WORKERS`` appended unless disconnected ones are asked).
WORKERS = ("SELECT i.instance_id, i.session_id, i.epoch, i.state, i.worker_name, i.subscriptions, i.capacity,"
           " i.sequence, i.concurrency_keys, i.cancellation_notifications, i.registered_at, i.disconnected_at,"
           " i.node_id,"
           " (SELECT COUNT(*) FROM leases l FORCE INDEX (leases_owner)"
           f"  WHERE l.owner_session_id = i.session_id AND l.hold = '{LIVE_HOLD}') AS held"
           " FROM worker_instances i")
LIVE_WORKERS = f" WHERE i.state IN {sql_list(LIVE_SESSION_STATES)}"
WORKERS_ORDER = " ORDER BY i.epoch LIMIT %s"
WORKER_BY_ID = " WHERE i.instance_id = %s"
#: The serve processes with their open sessions (``LIVE_NODES`` appended unless stopped ones are asked).
NODES = ("SELECT n.node_id, n.state, n.host, n.pid, n.lapse_ms, n.started_at, n.heartbeat_at, n.lost_at,"
         " n.lost_by, n.stopped_at,"
         " (SELECT COUNT(*) FROM worker_instances i WHERE i.node_id = n.node_id"
         f" AND i.state IN {sql_list(LIVE_SESSION_STATES)})"
         " FROM server_nodes n")
LIVE_NODES = f" WHERE n.state IN {sql_list(LIVE_NODE_STATES)}"
NODES_ORDER = " ORDER BY n.started_at DESC, n.node_id LIMIT %s"

# -- the dashboard's figures (dashboard) ---------------------------------------------------------------
#: The (queue, state) pairs with a task waiting, or ended: one index dive per queue and state.
#: (A subquery with LIMIT: an EXISTS would be turned into a semi-join that reads the whole index.)
WAITING_PAIRS = (f"SELECT q.queue, p.state FROM {_QUEUES} STRAIGHT_JOIN {_WAITING_PICKS} p WHERE"
                 " (SELECT 1 FROM tasks t FORCE INDEX (tasks_pickup) WHERE t.queue = q.queue AND t.pick_state = p.state"
                 " LIMIT 1) = 1")
ENDED_PAIRS = (f"SELECT q.queue, p.state FROM {_QUEUES} STRAIGHT_JOIN {_ENDED} p WHERE"
               " (SELECT 1 FROM tasks t FORCE INDEX (tasks_finished) WHERE t.queue = q.queue"
               " AND t.outcome_status = p.state LIMIT 1) = 1")
#: One (queue, state) count up to a cap; a query is several of these, UNION ALL.
COUNT_WAITING = ("SELECT %s, %s, (SELECT COUNT(*) FROM (SELECT 1 FROM tasks FORCE INDEX (tasks_pickup)"
                 " WHERE queue = %s AND pick_state = %s LIMIT %s) c)")
COUNT_ENDED = ("SELECT %s, %s, (SELECT COUNT(*) FROM (SELECT 1 FROM tasks FORCE INDEX (tasks_finished)"
               " WHERE queue = %s AND outcome_status = %s LIMIT %s) c)")
RUNNING_COUNTS = ("SELECT t.queue, l.state, COUNT(*) FROM leases l FORCE INDEX (leases_due)"
                  f" JOIN tasks t ON t.task_id = l.task_id WHERE l.state IN {sql_list(LIVE_LEASE_STATES)}"
                  " GROUP BY t.queue, l.state")
#: The head of one READY range in pick-up order, then the earliest due time up to the head's own.
READY_HEAD = ("SELECT due_at FROM tasks FORCE INDEX (tasks_pickup) WHERE queue = %s AND pick_state = %s"
              " ORDER BY effective_at, task_id LIMIT 1")
EARLIEST_DUE = ("SELECT MIN(due_at) FROM tasks FORCE INDEX (tasks_pickup) WHERE queue = %s"
                " AND pick_state = %s AND effective_at <= %s")
#: One (queue, outcome) range of ``tasks_finished``: ``{select}``, ``{tail}`` and ``{group}`` below.
PER_PAIR = ("(SELECT queue, outcome_status, {select} FROM tasks FORCE INDEX (tasks_finished)"
            " WHERE queue = %s AND outcome_status = %s AND {tail}{group})")
BY_MINUTE = "TIMESTAMPDIFF(MINUTE, %s, finished_at) AS minute, COUNT(*)"
FINISHED_BETWEEN = "finished_at >= %s AND finished_at < %s"
GROUP_BY_MINUTE = " GROUP BY minute"
COUNT = "COUNT(*)"
FINISHED_SINCE = "finished_at >= %s"

# -- which shared timers have work (timer_probe) -----------------------------------------------------
PROBE = (
    "SELECT EXISTS (SELECT 1 FROM leases FORCE INDEX (leases_due)"
    f" WHERE {due_states('lease', 'lapse', 'state')} AND expires_at <= %s),"
    " EXISTS (SELECT 1 FROM leases FORCE INDEX (leases_due)"
    f" WHERE {due_states('lease', 'expire', 'state')} AND expires_at <= %s),"
    " EXISTS (SELECT 1 FROM tasks FORCE INDEX (tasks_due)"
    f" WHERE {due_states('task', 'promote', 'due_state')} AND due_at <= %s),"
    " EXISTS (SELECT 1 FROM key_permits FORCE INDEX (key_permits_due)"
    f" WHERE {due_states('key_permit', 'release_after_quarantine', 'state')} AND quarantine_until <= %s)"
)
#: Appended to ``PROBE``: a cancel whose holder, one of this node's sessions, is still to be told
#: (one node id argument): once told, the ticks after find nothing to push.
CANCELS_PROBE = f", EXISTS (SELECT 1 FROM {NODE_PUSHES_DUE})"
