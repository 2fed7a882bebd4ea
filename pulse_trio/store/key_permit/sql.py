"""Chart ``key_permit``: every statement its transaction functions send, named, in one place.

The functions beside this module (``permits``) refer to these by name.
State lists come from the charts, built once at import. A move's own
``SET`` and ``WHERE`` additions stay at its ``chart_write.move`` call.
"""

from __future__ import annotations

from pulse_trio.charts.states import HELD_PERMIT_STATES, sql_list
from pulse_trio.store.engine.timer_scan import DueScan

#: A key's counter, skipped when another assigner holds it (the row exists from submit).
LOCK_COUNTER = ("SELECT last_token, outstanding FROM key_counters WHERE concurrency_key = %s"
                " FOR UPDATE SKIP LOCKED")
#: The next fencing token and one more permit outstanding, compared on the token read.
TAKE_TOKEN = ("UPDATE key_counters SET last_token = %s, outstanding = outstanding + 1"
              " WHERE concurrency_key = %s AND last_token = %s")
#: A new permit, as ``chart_write.create`` inserts it.
PERMIT_COLUMNS = "lease_id, concurrency_key, concurrency_token, task_id, state, acquired_at"
PERMIT_ROW = "(%s, %s, %s, %s, {state}, %s)"
#: The permits of these leases that still count against their key, locked.
LOCK_HELD = ("SELECT lease_id, concurrency_key FROM key_permits WHERE lease_id IN %s"
             f" AND state IN {sql_list(HELD_PERMIT_STATES)} FOR UPDATE")
#: Released permits counted off their key's counter.
COUNT_OFF = ("UPDATE key_counters SET outstanding = outstanding - %s WHERE concurrency_key = %s"
             " AND outstanding >= %s")
#: Quarantines that ran out, through ``key_permits_due``.
QUARANTINE_OVER_SCAN = DueScan("key_permit", "release_after_quarantine",
                               "SELECT lease_id, concurrency_key, quarantine_until FROM key_permits",
                               "key_permits_due", "state", "quarantine_until")
