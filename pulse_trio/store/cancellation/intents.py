"""Chart ``cancellation``: saving a cancel intent, telling the holder, and how it ends.

``request`` is the producer/operator entry. Depending on where the task is:

* SCHEDULED / READY: task.cancel at once; the intent is RESOLVED.
* OFFERED (its live lease an unstarted offer): lease.revoke + task.cancel
  (+ key_permit.release); RESOLVED; the holder is still told (notify) so it
  drops the offer.
* RUNNING (the row still OFFERED, its live lease RUNNING: a start writes the
  lease alone): intent REQUESTED, lease.cancel caps the lease at
  ``grace_expires_at``. The worker's finish resolves it (any status); if no
  finish comes, lease.expire fires at the deadline and escalates it.

The grace deadline is fixed when the intent is saved, from the cluster's
``cancel_grace`` read in the same transaction, so every instance and every
later renew agree on it, whichever process saved it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from pulse_trio.charts import CHARTS
from pulse_trio.charts.states import HELD_TASK_STATE, REVOKED_LEASE_STATES, STARTED_LEASE_STATE, public_state
from pulse_trio.store.lease import steps as lease_steps
from pulse_trio.store.cluster_setting import settings
from pulse_trio.store.task import steps as task_steps
from pulse_trio.store.engine.chart_write import create, move
from pulse_trio.store.engine.guard_context import CancellationContext
from pulse_trio.store.engine.registry import decide, guard, transition
from pulse_trio.store.engine.results import TASK_NOT_FOUND, CancelNotice, CancelResult, LeaseEnd, Refusal
from pulse_trio.store.engine.rows import LeaseRow, TaskRow
from pulse_trio.store.engine.tx import ConcurrentChange, Tx, after_ms, db_actor, db_time, py_time
from pulse_trio.store.cancellation import sql

#: The task states task.cancel leaves: what a request cancels at once.
_CANCELLABLE_AT_ONCE = frozenset(t.source for t in CHARTS["task"].transitions_for("cancel"))
#: resolve and escalate have no guard: the lease transition that runs them decided.


def _seen(task: TaskRow, lease: LeaseRow | None) -> str:
    """The task's state as readers see it: a held one is offered or running as its live lease is."""
    return public_state(task.state, lease.state if lease else None)


@guard("cancellation", "task_not_started")
def _task_not_started(c) -> bool:
    """The task is SCHEDULED, READY or offered (its lease not started): nothing has run, cancel at once."""
    return _seen(c.task, c.lease) in _CANCELLABLE_AT_ONCE


@guard("cancellation", "task_running")
def _task_running(c) -> bool:
    """The task's lease is RUNNING: the worker must stop and finish (or the grace runs out)."""
    return _seen(c.task, c.lease) == STARTED_LEASE_STATE


@guard("cancellation", "holder_opted_in")
def _holder_opted_in(c) -> bool:
    """The lease holder's session declared cancellation_notifications."""
    return c.opted_in


@guard("cancellation", "holder_not_notified")
def _holder_not_notified(c) -> bool:
    """The current holder has not been sent task.cancel yet (a resume makes a new holder)."""
    return c.notified_session_id != c.holder_session_id


@guard("cancellation", "offer_revoked")
def _offer_revoked(c) -> bool:
    """The cancelled lease was an offer, revoked before start."""
    return c.lease_state == "REVOKED"


def _result(task_id: str, task_state: str, intent: tuple | None, changed: bool,
            revoked: LeaseEnd | None = None) -> CancelResult:
    return CancelResult(task_id, task_state, intent[0] if intent else None, changed,
                        py_time(intent[1]) if intent else None, py_time(intent[2]) if intent else None, revoked)


def _as_stored(reason: str, requested_by: str) -> tuple[str, str]:
    """The reason and requester as their columns hold them (VARCHAR(255), VARCHAR(128))."""
    return reason[:255], db_actor(requested_by)


def _ours(tx: Tx, intent: tuple | None, now: dt.datetime, reason: str, requested_by: str) -> bool:
    """The intent is this call's own, saved by an earlier run whose COMMIT's answer was lost.

    The re-run gets the same ``now``, reason and requester: the intent they
    match is the one this call saved, so its answer stays ``changed``.
    """
    return (tx.recovering and intent is not None and intent[1] == db_time(now)
            and (intent[3], intent[4]) == _as_stored(reason, requested_by))


@transition("cancellation", "request")
def request(tx: Tx, *, task_id: str, now: dt.datetime, reason: str = "",
            requested_by: str = "") -> CancelResult | Refusal:
    """Save a cancel intent; cancel at once what has not started. Terminal or repeated: no-op."""
    # Lock order lease -> task, as every lease command does: the task's live
    # lease (if any) first, through the leases_task index.
    live = tx.all(sql.LOCK_LIVE_LEASES_OF_TASK, (task_id,))
    row = tx.one(sql.LOCK_TASK, (task_id,))
    if row is None:
        return Refusal(TASK_NOT_FOUND, f"no task {task_id}")
    task = TaskRow.from_lean_row(row)
    intent = tx.one(sql.LOCK_INTENT, (task_id,))
    lease = LeaseRow.from_row(live[0]) if live else None
    if intent is not None or task.terminal:
        return _result(task_id, _seen(task, lease), intent, _ours(tx, intent, now, reason, requested_by))
    dest = decide("cancellation", "request", "NONE", CancellationContext(task=task, lease=lease))
    if isinstance(dest, Refusal):
        return dest
    if task.state == HELD_TASK_STATE and lease is None:
        # An assign offered the task between our lease lock and our task lock:
        # run again (the facade retries), this time finding and locking its lease.
        raise ConcurrentChange(f"task {task.task_id} became {task.state} while being cancelled")
    seen = _seen(task, lease)  # what the intent records it found
    running = seen == STARTED_LEASE_STATE
    grace = after_ms(now, settings.value_ms(tx, "cancel_grace")) if running else now
    revoked = None
    task_state = seen
    if running:
        lease_steps.cancel(tx, lease=lease, now=now, deadline=grace)
    else:
        if task.state == HELD_TASK_STATE:
            lease_steps.revoke(tx, lease=lease, now=now)
            revoked = LeaseEnd(lease.lease_id, task.task_id, lease.owner_session_id, "REVOKED", "CANCELLED")
        task_state = task_steps.cancel(tx, task=task, now=now)
        if task.state == "READY" and task.concurrency_key is not None:
            # It may have been the key's one task brought back for a freed
            # permit in its place: bring back another there, or the key's
            # waiting tasks would wait for a release that never comes.
            waiting = task_steps.waiting_in_place(tx, task)
            if waiting:
                task_steps.key_freed(tx, task_ids=waiting)
    stamp = db_time(now)
    create(tx, "cancellation", "request", dest=dest,
           columns=sql.INTENT_COLUMNS, row=sql.INTENT_ROW,
           rows=[(task_id, stamp, db_time(grace), *_as_stored(reason, requested_by), seen,
                  lease.lease_id if lease else None, stamp if dest == "RESOLVED" else None)])
    return CancelResult(task_id, task_state, dest, True, now, grace, revoked)


@transition("cancellation", "notify")
def notify(tx: Tx, *, now: dt.datetime, session_ids: Sequence[str] | None = None,
           limit: int = 500) -> tuple[CancelNotice, ...]:
    """Mark and return the task.cancel pushes due to these (local, opted-in) sessions.

    ``session_ids``: those sessions; None: the live sessions of this
    transaction's node that opted in (``tx.node_id``), asked by node, so
    the statement does not grow with the sessions connected.

    Marked before the push: if the connection drops, the worker resumes
    elsewhere, the holder changes, and the new holder is told again. A
    revoked offer has no other holder to come, so once told it leaves the
    filing the ticks look in (``leases.hold``).

    Locks lease before intent, the store's order (docs/storage.md §3): the
    revoked offers' leases it unfiles first, then the intents. Intents
    first would wait in a circle with a lease batch that holds a revoked
    offer's lease and then wants another task's intent (a deadlock whose
    victim is the batch). Both locks skip what another transaction holds:
    an offer whose lease is held is told at a later tick.
    """
    # Non-locking look first (the common answer is "nothing"), then lock what is due.
    if session_ids is None:
        if tx.node_id is None:
            return ()
        due = tx.all(sql.PUSHES_OF_NODE, (tx.node_id, limit))
    elif not session_ids:
        return ()
    else:
        due = tx.all(sql.PUSHES_OF_SESSIONS, (tuple(session_ids), limit))
    if not due:
        return ()
    by_task = {r[0]: r for r in due}
    offers = [r[1] for r in due if r[3] in REVOKED_LEASE_STATES]
    locked = {r[0] for r in tx.all(sql.LOCK_DUE_OFFERS, (tuple(offers),))} if offers else set()
    by_task = {t: r for t, r in by_task.items() if r[3] not in REVOKED_LEASE_STATES or r[1] in locked}
    if not by_task:
        return ()
    intents = tx.all(sql.LOCK_DUE_INTENTS, (tuple(by_task),))
    opted = {r[0] for r in tx.all(sql.OPTED_IN_SESSIONS, (tuple({r[2] for r in due}),))}
    notices, revoked = [], []
    stamp = db_time(now)
    for task_id, state, requested_at, grace, reason, notified in intents:
        _, lease_id, holder, lease_state = by_task[task_id]
        ctx = CancellationContext(opted_in=holder in opted, notified_session_id=notified, holder_session_id=holder,
                              lease_state=lease_state)
        dest = decide("cancellation", "notify", state, ctx)
        if isinstance(dest, Refusal):
            continue
        move(tx, "cancellation", "notify", [task_id], source=state, dest=dest,
             sets="notified_session_id = %s, notified_at = %s", args=(holder, stamp),
             where="notified_session_id <=> %s", where_args=(notified,))
        notices.append(CancelNotice(holder, task_id, lease_id, py_time(requested_at), py_time(grace), reason))
        if lease_state in REVOKED_LEASE_STATES:
            revoked.append(lease_id)
    if revoked:
        tx.write(sql.UNFILE_TOLD_OFFERS, (tuple(revoked),))
    return tuple(notices)


@transition("cancellation", "resolve", entry=False)
def resolve(tx: Tx, *, task_ids: Sequence[str], now: dt.datetime) -> None:
    """The worker finished tasks with an open intent (part of lease.finish)."""
    for task_id in task_ids:
        _close(tx, "resolve", task_id, now)


@transition("cancellation", "escalate", entry=False)
def escalate(tx: Tx, *, task_id: str, now: dt.datetime) -> None:
    """The lease of a cancelled task ended without a finish (part of lease.expire)."""
    _close(tx, "escalate", task_id, now)


def _close(tx: Tx, trigger: str, task_id: str, now: dt.datetime) -> None:
    row = tx.one(sql.LOCK_INTENT_STATE, (task_id,))
    if row is None:
        return  # a lease cancel without an intent row cannot happen; nothing to close
    move(tx, "cancellation", trigger, [task_id], source=row[0], sets="resolved_at = %s",
         args=(db_time(now),))
