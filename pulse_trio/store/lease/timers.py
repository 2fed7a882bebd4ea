"""Chart ``lease``: the timers ``lapse`` and ``expire``, run by every instance.

Both read due leases through ``leases_due (state, expires_at)`` with
``FOR UPDATE SKIP LOCKED``, so several instances share the work and never
end the same lease twice; a lease a worker is renewing right now is locked
by that command and simply skipped until the next tick. The task rows are
locked after the leases (the same order as every lease command).
"""

from __future__ import annotations

import datetime as dt

from pulse_trio.store.cancellation import intents as cancellation
from pulse_trio.store.key_permit import permits
from pulse_trio.store.lease import guards as lease_guards  # noqa: F401  (guards)
from pulse_trio.store.lease import sql
from pulse_trio.store.task import steps as task_steps
from pulse_trio.store.engine.chart_write import move
from pulse_trio.store.engine.guard_context import LeaseContext
from pulse_trio.store.engine.registry import decide, transition
from pulse_trio.store.engine.results import LeaseEnd, Refusal, TimerResult
from pulse_trio.store.engine.rows import LeaseRow, TaskRow
from pulse_trio.store.engine.timer_scan import DueScan, claim
from pulse_trio.store.engine.tx import Tx, db_time




def _due(tx: Tx, scan: DueScan, now: dt.datetime, limit: int) -> tuple[list[LeaseRow], dict[str, TaskRow]]:
    leases = [LeaseRow.from_row(r) for r in claim(tx, scan, now=now, limit=limit)]
    if not leases:
        return [], {}
    tasks = {t.task_id: t for t in (TaskRow.from_lean_row(r) for r in tx.all(
        sql.LOCK_TASKS, (tuple(sorted({l.task_id for l in leases})),)))}
    return leases, tasks


@transition("lease", "lapse")
def lapse(tx: Tx, *, now: dt.datetime, limit: int = 200) -> TimerResult:
    """Offers not started before their start timeout: LAPSED; tasks READY again; permits released."""
    leases, tasks = _due(tx, sql.LAPSE_SCAN, now, limit)
    ended = [l for l in leases if not isinstance(decide("lease", "lapse", l.state, LeaseContext(lease=l, now=now)),
                                                 Refusal)]
    if not ended:
        return TimerResult(0, False)
    ids = tuple(l.lease_id for l in ended)
    move(tx, "lease", "lapse", ids, source="OFFERED", sets="ended_at = %s", args=(db_time(now),))
    task_steps.lapse(tx, tasks=[tasks[l.task_id] for l in ended], now=now)
    permits.release(tx, leases=ended, now=now)
    return TimerResult(len(ended), len(leases) == limit, tuple(
        LeaseEnd(l.lease_id, l.task_id, l.owner_session_id, "LAPSED", "READY", tasks[l.task_id].queue)
        for l in ended))


@transition("lease", "expire")
def expire(tx: Tx, *, now: dt.datetime, limit: int = 200, permit_quarantine_ms: int | None = None) -> TimerResult:
    """Started leases past expires_at: EXPIRED; safe retry decides the task; permits quarantined.

    A lease whose task has a cancel intent expires at the grace deadline
    (lease.cancel capped it): the task becomes CANCELLED (cancel_timeout) and
    the intent is escalated.
    """
    leases, tasks = _due(tx, sql.EXPIRE_SCAN, now, limit)
    ends = []
    for lease in leases:
        if isinstance(decide("lease", "expire", lease.state, LeaseContext(lease=lease, now=now)), Refusal):
            continue
        task_state = task_steps.expire(tx, task=tasks[lease.task_id], lease=lease, now=now)
        move(tx, "lease", "expire", [lease.lease_id], source=lease.state,
             sets="ended_at = %s, status = 'EXPIRED', error_code = %s",
             args=(db_time(now), task_steps.expiry_code(task_state)), where="revision = %s",
             where_args=(lease.revision,))
        quarantined = lease.concurrency_token is not None and permits.quarantine(
            tx, lease=lease, now=now, quarantine_ms=permit_quarantine_ms)
        if lease.cancel_requested_at is not None:
            cancellation.escalate(tx, task_id=lease.task_id, now=now)
        ends.append(LeaseEnd(lease.lease_id, lease.task_id, lease.owner_session_id, "EXPIRED", task_state,
                             tasks[lease.task_id].queue, quarantined))
    return TimerResult(len(ends), len(leases) == limit, tuple(ends))
