"""Charts ``instance`` and ``node``: every statement their transaction functions send, named, in one place.

The functions beside this module (``instances``, ``nodes``) refer to these
by name. Column lists come from the row classes and state lists from the
charts, built once at import. A move's own ``SET`` and ``WHERE`` additions
stay at its ``chart_write.move`` call.
"""

from __future__ import annotations

from pulse_trio.charts.states import LIVE_HOLD, LIVE_SESSION_STATES, sql_list
from pulse_trio.store.engine.rows import InstanceRow, NodeRow
from pulse_trio.store.engine.timer_scan import DueScan

#: How a read of a row may lock it (appended to the statement).
FOR_UPDATE = " FOR UPDATE"
SKIP_LOCKED = " FOR UPDATE SKIP LOCKED"
SHARE_MODE = " LOCK IN SHARE MODE"

# -- sessions (instances) --------------------------------------------------------------------------
_INSTANCE = f"SELECT {InstanceRow.columns()} FROM worker_instances i"
_LIVE = sql_list(LIVE_SESSION_STATES)
#: One session's instance row (a lock suffix appended when it is locked).
SESSION = _INSTANCE + " WHERE i.session_id = %s"
#: Several sessions' rows, locked shared in session-id order (a finish batch's ride-along claims).
SHARE_LOCK_SESSIONS = _INSTANCE + " WHERE i.session_id IN %s ORDER BY i.session_id LOCK IN SHARE MODE"
INSTANCE = _INSTANCE + " WHERE i.instance_id = %s"
LOCK_INSTANCE = _INSTANCE + " WHERE i.instance_id = %s FOR UPDATE"
#: Live leases per session of a list; ``{marks}``: one ``%s`` per session.
LIVE_LEASE_COUNTS = ("SELECT owner_session_id, COUNT(*) FROM leases FORCE INDEX (leases_owner)"
                     f" WHERE owner_session_id IN ({{marks}}) AND hold = '{LIVE_HOLD}' GROUP BY owner_session_id")
#: Live leases per live session of a node, through the node index and ``leases_owner``
#: (one equality lookup per session on its held leases: its ended ones are never read).
NODE_LEASE_COUNTS = (
    "SELECT l.owner_session_id, COUNT(*) FROM worker_instances i FORCE INDEX (worker_instances_node)"
    " STRAIGHT_JOIN leases l FORCE INDEX (leases_owner)"
    f" ON l.owner_session_id = i.session_id AND l.hold = '{LIVE_HOLD}'"
    f" WHERE i.node_id = %s AND i.state IN {sql_list(LIVE_SESSION_STATES)} GROUP BY l.owner_session_id"
)
LIVE_LEASE_IDS = ("SELECT owner_session_id, lease_id FROM leases FORCE INDEX (leases_owner)"
                  f" WHERE owner_session_id IN %s AND hold = '{LIVE_HOLD}'")
#: A new session, as ``chart_write.create`` inserts it (the epoch is the row's AUTO_INCREMENT).
REGISTER_COLUMNS = ("instance_id, session_id, secret_digest, state, worker_name, subscriptions,"
                    " cancellation_notifications, concurrency_keys, client_info, token_id, capacity, node_id, sequence,"
                    " registered_at, updated_at")
REGISTER_ROW = "(%s, %s, %s, {state}, %s, %s, %s, %s, %s, %s, 0, %s, NULL, %s, %s)"
#: The registering node's state, share-locked so it cannot be declared lost half-way.
NODE_STATE_SHARED = "SELECT state FROM server_nodes WHERE node_id = %s LOCK IN SHARE MODE"
#: A gone node's open sessions, in ``worker_instances_node`` order (a limit and a lock suffix appended).
SESSIONS_OF_NODE = (f"SELECT i.session_id, i.state FROM worker_instances i FORCE INDEX (worker_instances_node)"
                    f" WHERE i.node_id = %s AND i.state IN {_LIVE}")
LIMIT = " LIMIT %s"
OPEN_SESSIONS_OF_NODE = (f"SELECT COUNT(*) FROM worker_instances FORCE INDEX (worker_instances_node)"
                         f" WHERE node_id = %s AND state IN {_LIVE}")

# -- serve processes (nodes) -----------------------------------------------------------------------
_NODE = f"SELECT {NodeRow.columns()} FROM server_nodes n"
NODE = _NODE + " WHERE n.node_id = %s"
LOCK_NODE = _NODE + " WHERE n.node_id = %s FOR UPDATE"
#: A node's first row, as ``chart_write.create`` inserts it.
NODE_COLUMNS = "node_id, state, host, pid, lapse_ms, started_at, heartbeat_at, expires_at"
NODE_ROW = "(%s, {state}, %s, %s, %s, %s, %s, %s)"
#: Lapsed nodes but this one, through ``server_nodes_due``. No ORDER BY: lapsed ALIVE nodes come
#: before LOST ones with sessions left, in index order.
LAPSED_SCAN = DueScan("node", "lose", _NODE, "server_nodes_due", "n.state", "n.expires_at",
                      ordered=False, where="n.node_id <> %s")
