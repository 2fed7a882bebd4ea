"""Chart ``cancellation``: every statement its transaction functions send, named, in one place.

The functions beside this module (``intents``) refer to these by name; the
timers' probe (:mod:`pulse_trio.store.views.timer_probe`) reads the node's
pushes through the same FROM and WHERE. Column lists come from the row
classes and state lists from the charts, built once at import. A move's own
``SET`` and ``WHERE`` additions stay at its ``chart_write.move`` call.
"""

from __future__ import annotations

from pulse_trio.charts.states import (
    LEASE_HOLDS, LIVE_LEASE_STATES, LIVE_SESSION_STATES, REVOKED_LEASE_STATES, sql_list, sql_rows,
)
from pulse_trio.store.engine.rows import LeaseRow, TaskRow

# -- request ---------------------------------------------------------------------------------------
#: The task's live lease, locked first (lease -> task, as every lease command), through ``leases_task``.
LOCK_LIVE_LEASES_OF_TASK = (f"SELECT {LeaseRow.columns()} FROM leases l WHERE l.task_id = %s"
                            f" AND l.state IN {sql_list(LIVE_LEASE_STATES)} FOR UPDATE")
LOCK_TASK = f"SELECT {TaskRow.columns(lean=True)} FROM tasks t WHERE t.task_id = %s FOR UPDATE"
#: ... with who asked and why last: a re-run after a lost COMMIT knows its own intent by them.
LOCK_INTENT = ("SELECT state, requested_at, grace_expires_at, reason, requested_by FROM cancel_intents"
               " WHERE task_id = %s FOR UPDATE")
#: A new intent, as ``chart_write.create`` inserts it.
INTENT_COLUMNS = ("task_id, state, requested_at, grace_expires_at, reason, requested_by, task_state, lease_id,"
                  " resolved_at")
INTENT_ROW = "(%s, {state}, %s, %s, %s, %s, %s, %s, %s)"

# -- notify ----------------------------------------------------------------------------------------
#: The leases that may need a task.cancel pushed: live (or revoked) and carrying a cancel request.
PUSH_LEASE_STATES = (*LIVE_LEASE_STATES, *REVOKED_LEASE_STATES)
#: ... as ``leases_owner`` files them (``leases.hold``: LIVE, REVOKED).
PUSH_HOLDS = tuple(dict.fromkeys(LEASE_HOLDS[s] for s in PUSH_LEASE_STATES))
PUSH_LEASES = f"l.hold IN {sql_list(PUSH_HOLDS)} AND l.cancel_requested_at IS NOT NULL"
#: This node's live, opted-in sessions and their leases, through the node index and
#: ``leases_owner`` (FROM and WHERE, one node id argument): the same statement
#: whatever the number of sessions. Each (session, hold) is one equality
#: lookup, so a session's finished leases are never read (``sql_rows``).
NODE_PUSH_FROM = ("worker_instances i FORCE INDEX (worker_instances_node)"
                  f" STRAIGHT_JOIN {sql_rows(PUSH_HOLDS, 'hold')} ph STRAIGHT_JOIN leases l FORCE INDEX (leases_owner)"
                  " ON l.owner_session_id = i.session_id AND l.hold = ph.hold")
NODE_PUSH_WHERE = (f"i.node_id = %s AND i.state IN {sql_list(LIVE_SESSION_STATES)} AND i.cancellation_notifications"
                   " AND l.cancel_requested_at IS NOT NULL")
#: ... whose holder has not been told yet (a resume makes a new holder, told again).
NOT_TOLD = " AND (c.notified_session_id IS NULL OR c.notified_session_id <> l.owner_session_id)"
#: The pushes due to this node's sessions (FROM and WHERE, one node id argument): what
#: notify reads and the timers' probe asks about, so a told cancel is news to neither.
NODE_PUSHES_DUE = (f"{NODE_PUSH_FROM} JOIN cancel_intents c ON c.task_id = l.task_id"
                   f" WHERE {NODE_PUSH_WHERE}{NOT_TOLD}")
_PUSH = "SELECT l.task_id, l.lease_id, l.owner_session_id, l.state FROM "
#: The pushes due to this node's sessions (the node id and a limit), not locked.
PUSHES_OF_NODE = f"{_PUSH}{NODE_PUSHES_DUE} LIMIT %s"
#: The pushes due to the named sessions (their ids and a limit), not locked.
PUSHES_OF_SESSIONS = (_PUSH + "leases l JOIN cancel_intents c ON c.task_id = l.task_id"
                      f" WHERE l.owner_session_id IN %s AND {PUSH_LEASES}{NOT_TOLD} LIMIT %s")
#: The due revoked offers' leases, locked before their intents (lease -> intent, the store's order);
#: one another transaction holds is skipped, its push left for a later tick.
LOCK_DUE_OFFERS = (f"SELECT lease_id FROM leases WHERE lease_id IN %s AND state IN {sql_list(REVOKED_LEASE_STATES)}"
                    " FOR UPDATE SKIP LOCKED")
LOCK_DUE_INTENTS = ("SELECT task_id, state, requested_at, grace_expires_at, reason, notified_session_id FROM cancel_intents"
                    " WHERE task_id IN %s FOR UPDATE SKIP LOCKED")
OPTED_IN_SESSIONS = ("SELECT session_id FROM worker_instances WHERE session_id IN %s"
                     " AND cancellation_notifications")
#: Told revoked offers leave ``leases_owner``'s REVOKED filing (``leases.hold``): nothing is due to them any more.
UNFILE_TOLD_OFFERS = (f"UPDATE leases SET cancel_requested_at = NULL WHERE lease_id IN %s"
                      f" AND state IN {sql_list(REVOKED_LEASE_STATES)}")

# -- resolve, escalate -----------------------------------------------------------------------------
LOCK_INTENT_STATE = "SELECT state FROM cancel_intents WHERE task_id = %s FOR UPDATE"
