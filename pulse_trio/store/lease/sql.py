"""Chart ``lease``: every statement its transaction functions send, named, in one place.

The functions beside this module (``leases``, ``assign``, ``resume``,
``timers``) refer to these by name, so a reader sees what the chart asks of
the database without reading the Python around it. Column lists come from
the row classes (:mod:`pulse_trio.store.engine.rows`) and state lists from the
charts, built once at import. A move's own ``SET`` and ``WHERE`` additions
stay at its ``chart_write.move`` call, which makes the UPDATE from the chart.
"""

from __future__ import annotations

from pulse_trio.store.engine.rows import (
    KEYED, LEASE_COMMAND, LEASE_FULL, TASK_COMMAND, TASK_LEAN, TASK_PICKUP, UNKEYED_READY, InstanceRow, LeaseRow,
    TaskRow,
)
from pulse_trio.store.engine.timer_scan import DueScan

# -- the worker's commands (leases) -------------------------------------------------------------------
#: One lease and its task, locked in that order (resume, and a single command).
LOCK_LEASE_AND_TASK = (
    f"SELECT {LEASE_FULL.columns('l')}, {TASK_LEAN.columns('t')} FROM leases l"
    " JOIN tasks t ON t.task_id = l.task_id WHERE l.lease_id = %s FOR UPDATE"
)
#: A batch's leases and their tasks, locked in lease-id order.
LOCK_LEASES_AND_TASKS = (
    f"SELECT {LEASE_COMMAND.columns('l')}, {TASK_COMMAND.columns('t')} FROM leases l"
    " JOIN tasks t ON t.task_id = l.task_id WHERE l.lease_id IN %s ORDER BY l.lease_id FOR UPDATE"
)
#: The receipts a lease row keeps (its start's and its finish's), for a replay.
RECEIPTS_OF_LEASE = ("SELECT state, revision, start_revision, started_at, finish_digest, ended_at FROM leases"
                     " WHERE lease_id = %s")
#: A renewal's receipt at one revision, for a replay.
RENEW_RECEIPT_AT = ("SELECT command, content_digest, committed_at FROM renew_receipts"
                    " WHERE lease_id = %s AND revision = %s")
INSERT_RENEW_RECEIPTS = ("INSERT INTO renew_receipts (lease_id, revision, command, task_id, content_digest,"
                         " committed_at) VALUES (%s, %s, %s, %s, %s, %s)")
#: What the database checks in place of the locking read. The move's key is each lease with the owner
#: and revision this process expects (one list: the range on the primary key comes from its first
#: part, so no second list of the same ids is parsed and analysed); the guard adds the lease not
#: timed out at ``now`` and no cancel intent (the state is the move's own ``state IN``).
LEAN_KEY = "(lease_id, owner_session_id, revision)"
LEAN_GUARD = "expires_at > %s AND cancel_requested_at IS NULL AND cancel_deadline IS NULL"

# -- the claim (assign) ----------------------------------------------------------------------------
#: One source's page of READY tasks in pick-up order; ``{index}``, ``{kind}`` and ``{after}`` are
#: filled by ``assign.pickup_sql`` (the index, an optional kind, and the row the page starts after).
PICKUP = (
    f"SELECT {TASK_PICKUP.columns('t')} FROM tasks t FORCE INDEX ({{index}})"
    " WHERE t.queue = %s AND t.pick_state = %s{kind}{after}"
    " ORDER BY t.effective_at, t.task_id LIMIT %s FOR UPDATE SKIP LOCKED"
)
PICKUP_BY_KIND = " AND t.kind = %s"
PICKUP_AFTER = " AND (t.effective_at > %s OR (t.effective_at = %s AND t.task_id > %s))"
#: Whether one queue has a READY task (one index dive); a probe is several of these, UNION ALL.
QUEUE_HAS_READY_WORK = ("SELECT %s FROM DUAL WHERE EXISTS (SELECT 1 FROM tasks FORCE INDEX (tasks_pickup)"
                        f" WHERE queue = %s AND pick_state IN ('{UNKEYED_READY}', '{KEYED}'))")
#: Whether a queue (or some kinds of it: ``{kinds}`` is KINDS_IN, through ``tasks_pickup_kind``)
#: holds at least %s unkeyed READY tasks: at most that many index entries read, no rows, no locks.
READY_AT_LEAST = ("SELECT %s FROM DUAL WHERE (SELECT COUNT(*) FROM (SELECT 1 FROM tasks t FORCE INDEX ({index})"
                  f" WHERE t.queue = %s AND t.pick_state = '{UNKEYED_READY}'{{kinds}} LIMIT %s) AS d) >= %s")
KINDS_IN = " AND t.kind IN %s"
#: The leases (and tasks) a claim whose COMMIT was lost may already have made.
OFFERS_MADE = (f"SELECT {LeaseRow.columns()}, {TaskRow.columns()} FROM leases l JOIN tasks t"
               " ON t.task_id = l.task_id WHERE l.lease_id IN %s")
#: The columns of an offered lease, as ``chart_write.create`` inserts it.
OFFER_COLUMNS = ("lease_id, task_id, secret_digest, state, revision, attempt, owner_instance_id, owner_session_id,"
                 " epoch, expires_at, offered_at, ttl_ms, effect_uncertain, concurrency_token")

# -- resume ----------------------------------------------------------------------------------------
#: The instance a resumed lease was held by, share-locked: its epoch and secret never change, but an operator's
#: drain of it commits before the resume reads it, or waits for the resume.
OLD_INSTANCE = f"SELECT {InstanceRow.columns()} FROM worker_instances i WHERE i.instance_id = %s LOCK IN SHARE MODE"

# -- the timers (lapse, expire) ----------------------------------------------------------------------
#: Due leases, through ``leases_due (state, expires_at)``: the states are the trigger's sources.
LAPSE_SCAN, EXPIRE_SCAN = (DueScan("lease", trigger, f"SELECT {LeaseRow.columns()} FROM leases l", "leases_due",
                                   "l.state", "l.expires_at") for trigger in ("lapse", "expire"))
#: The tasks of the due leases, locked after them (the order of every lease command).
LOCK_TASKS = f"SELECT {TaskRow.columns(lean=True)} FROM tasks t WHERE t.task_id IN %s ORDER BY t.task_id FOR UPDATE"
