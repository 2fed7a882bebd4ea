"""Charts ``queue``, ``fair_share`` and ``fairness_weight``: every statement their functions send, named.

The functions beside this module (``queues``, ``fairness``) refer to these
by name. A move's own ``SET`` and ``WHERE`` additions stay at its
``chart_write.move`` call, which makes the UPDATE from the chart.
"""

from __future__ import annotations

# -- a queue's pause and retention (queues) ---------------------------------------------------------
QUEUE_COLUMNS = "queue, state, task_retention_ms, paused_at, paused_by, updated_at, updated_by"
LOCK_QUEUE = f"SELECT {QUEUE_COLUMNS} FROM queues WHERE queue = %s FOR UPDATE"
QUEUE = f"SELECT {QUEUE_COLUMNS} FROM queues WHERE queue = %s"
#: A queue's first row, as ``chart_write.create`` inserts it (``INSERT IGNORE``).
QUEUE_ROW = "(%s, {state}, %s, %s, %s, %s, %s)"
PAUSED_QUEUES = "SELECT queue FROM queues FORCE INDEX (queues_state) WHERE state = %s"
#: Every queue's row, or (``QUEUES_IN`` appended) those of a list; then ``BY_NAME``.
ALL_QUEUES = f"SELECT {QUEUE_COLUMNS} FROM queues"
QUEUES_IN = " WHERE queue IN %s"
BY_NAME = " ORDER BY queue"

# -- fairness (fair_share, fairness_weight) ---------------------------------------------------------
WEIGHTS_OF = "SELECT fairness_key, weight FROM fairness_weights WHERE fairness_key IN %s"
#: A new (queue, key) row: fair_share.open, through chart_write.create.
OPEN_COLUMNS = "share_id, queue, fairness_key, state, virtual_at, placed, updated_at"
OPEN_ROW = "(%s, %s, %s, {state}, %s, %s, %s)"
#: What fair_share.advance sets: the clock moved past the placed arrivals.
ADVANCE_SETS = "virtual_at = %s, placed = placed + %s, updated_at = %s"
LOCK_CLOCK = "SELECT virtual_at FROM fair_shares WHERE share_id = %s FOR UPDATE"
#: The clocks and weights of the shares, in one read that locks nothing.
CLOCKS_AND_WEIGHTS = ("SELECT s.share_id, s.virtual_at, w.weight FROM fair_shares s"
                      " LEFT JOIN fairness_weights w ON w.fairness_key = s.fairness_key WHERE s.share_id IN %s")
ALL_WEIGHTS = ("SELECT fairness_key, weight, updated_at, updated_by FROM fairness_weights"
               " ORDER BY fairness_key")
LOCK_WEIGHT = "SELECT weight FROM fairness_weights WHERE fairness_key = %s FOR UPDATE"
#: A key's first weight, as ``chart_write.create`` inserts it.
WEIGHT_COLUMNS = "fairness_key, state, weight, updated_at, updated_by"
WEIGHT_ROW = "(%s, {state}, %s, %s, %s)"
#: READY tasks per (queue, fairness key): index only (a test EXPLAINs it).
READY_BY_KEY = ("SELECT queue, fairness_key, COUNT(*) FROM tasks FORCE INDEX (tasks_pickup)"
                " WHERE queue IN %s AND pick_state IN %s AND fairness_key IS NOT NULL GROUP BY queue, fairness_key")
FAIR_QUEUES = "SELECT DISTINCT queue FROM fair_shares FORCE INDEX (fair_shares_key)"
FINISHED_PAIRS = ("SELECT DISTINCT queue, outcome_status FROM tasks FORCE INDEX (tasks_finished)"
                  " WHERE outcome_status IS NOT NULL")
#: One (queue, outcome) range's finishes per key since a time; a query is several of these, UNION ALL.
FINISHED_BY_KEY = ("(SELECT queue, fairness_key, COUNT(*) FROM tasks FORCE INDEX (tasks_finished)"
                   " WHERE queue = %s AND outcome_status = %s AND finished_at >= %s AND fairness_key IS NOT NULL"
                   " GROUP BY queue, fairness_key)")
