"""Chart ``task``: the steps that run inside lease and cancellation transactions.

Each step is the one function of its (task, trigger) and is called with the
caller's open ``Tx`` on rows the caller has already locked (lease first, then
task). :func:`~pulse_trio.store.engine.chart_write.move` checks the move against the
chart (:func:`~pulse_trio.store.engine.registry.require` first, for a step whose
guards choose its destination); a refusal there means the two charts
disagree, which is a bug and rolls the whole transaction back.
"""

from __future__ import annotations

import collections
import datetime as dt
import hashlib
import math
from collections.abc import Iterable, Sequence

from pulse_trio.store.engine.chart_write import move
from pulse_trio.store.engine.guard_context import TaskContext
from pulse_trio.store.engine.inputs import FinishReport
from pulse_trio.store.engine.registry import guard, require, transition
from pulse_trio.store.engine.rows import LeaseRow, TaskRow
from pulse_trio.store.engine.tx import InvariantViolation, Tx, after_ms, db_time
from pulse_trio.store.task import sql

#: For the steps whose transitions have no guard (offer, start, lapse, cancel): nothing to read.


def backoff_ms(task: TaskRow, attempt: int) -> int:
    """Exponential backoff with deterministic jitter in [50 %, 100 %] of the step.

    Jitter comes from a hash of (task id, attempt) rather than a random
    generator, so a re-run of the transaction computes the same due time and
    tests can predict it, while different tasks still spread out.
    """
    try:
        grown = task.backoff_initial_ms * task.backoff_factor ** max(0, attempt - 1)
    except OverflowError:  # past what a float holds, so far past the cap (a thousand attempts at ×2)
        grown = math.inf
    base = min(grown, task.backoff_max_ms)
    fraction = int.from_bytes(hashlib.sha256(f"{task.task_id}:{attempt}".encode()).digest()[:8], "big") / 2**64
    return max(1, int(base * (0.5 + 0.5 * fraction)))


# -- guards -----------------------------------------------------------------------
@guard("task", "status_succeeded")
def _status_succeeded(c) -> bool:
    """The finish reports SUCCEEDED."""
    return c.report.status == "SUCCEEDED"


@guard("task", "status_failed")
def _status_failed(c) -> bool:
    """The finish reports FAILED."""
    return c.report.status == "FAILED"


@guard("task", "status_unknown")
def _status_unknown(c) -> bool:
    """The finish reports UNKNOWN."""
    return c.report.status == "UNKNOWN"


@guard("task", "status_cancelled")
def _status_cancelled(c) -> bool:
    """The finish reports CANCELLED."""
    return c.report.status == "CANCELLED"


@guard("task", "retry_allowed")
def _retry_allowed(c) -> bool:
    """retryable=true, attempts left (this attempt < max_attempts) and no cancel intent."""
    return c.report.retryable and c.lease.attempt < c.task.max_attempts and c.lease.cancel_requested_at is None


@guard("task", "cancel_requested")
def _cancel_requested(c) -> bool:
    """A cancel intent was saved for the running lease."""
    return c.lease.cancel_requested_at is not None


@guard("task", "retry_uncertain_allowed")
def _retry_uncertain_allowed(c) -> bool:
    """The task opted into retry_uncertain and has attempts left."""
    return c.task.retry_uncertain and c.lease.attempt < c.task.max_attempts


def _states(tasks: Iterable[TaskRow]) -> list[str]:
    """The states a batch's locked tasks are in: :func:`move` refuses any its trigger does not leave."""
    return sorted({task.state for task in tasks})


# -- steps ------------------------------------------------------------------------
@transition("task", "offer", entry=False)
def offer(tx: Tx, *, tasks: Sequence[TaskRow], now: dt.datetime) -> None:
    """READY -> OFFERED for a batch picked by lease.assign, in one guarded UPDATE."""
    move(tx, "task", "offer", [t.task_id for t in tasks], source=_states(tasks), sets="updated_at = %s",
         args=(db_time(now),))


#: How many READY tasks of a key at its limit one claim sets aside; a larger
#: backlog is set aside by the next claims that meet it, a chunk each.
WAIT_CHUNK = 500


def ready_of_key(tx: Tx, key: str) -> list[str]:
    """Up to WAIT_CHUNK READY tasks of ``key`` in the pick-up range that no other claim holds (locked, SKIP LOCKED)."""
    return [r[0] for r in tx.all(sql.READY_OF_KEY, (key, WAIT_CHUNK))]


#: How many places (a queue and a kind) one release brings a key's waiting
#: tasks back in; a key that waits in more gets them back in the first, by name.
FREED_PLACES = 64


def waiting_of_key(tx: Tx, key: str, count: int) -> list[str]:
    """The first ``count`` set-aside tasks of ``key`` in each place (queue and kind) where it waits, locked.

    Each place gets its own: the first in pick-up order may be where no
    session takes them (a paused queue, a kind no one names), and the freed
    permit would go unused while the key's other tasks wait. One read per
    place, up to FREED_PLACES, and one that finds no more. A permit release
    waits for their locks (a freed permit must bring one back).
    """
    found: list[str] = []
    rows = tx.all(sql.WAITING_OF_KEY, (key, count))
    for _ in range(FREED_PLACES):
        if not rows:
            break
        queue, kind = rows[0][1], rows[0][2]
        found += [r[0] for r in rows if (r[1], r[2]) == (queue, kind)]
        rows = tx.all(sql.WAITING_AFTER_PLACE, (key, key, queue, kind, count, key, key, queue, count, count))
    return found


def waiting_in_place(tx: Tx, task: TaskRow) -> list[str]:
    """The first set-aside task of ``task``'s key in its place (queue and kind), locked, skipping locked ones.

    A cancel's top-up for a READY task of the key, which may have been the
    one brought back there: it never waits.
    """
    return [r[0] for r in tx.all(sql.WAITING_IN_PLACE + sql.SKIP_LOCKED, (task.concurrency_key, task.queue, task.kind, 1))]


@transition("task", "wait_for_key", entry=False)
def wait_for_key(tx: Tx, *, task_ids: Sequence[str]) -> None:
    """READY -> READY, set aside (:func:`ready_of_key`): their key is at its limit.

    Part of lease.assign, which holds the key's counter row (locked by
    key_permit.acquire), so no release of the key can commit in between and
    miss what is set aside here. Tasks another claim has locked are left for
    a later claim to meet (a claim never waits).
    """
    move(tx, "task", "wait_for_key", task_ids, source="READY", sets="waits_for_key = TRUE")


@transition("task", "key_freed", entry=False)
def key_freed(tx: Tx, *, task_ids: Sequence[str]) -> None:
    """READY (set aside) -> READY: these waiting tasks (:func:`waiting_of_key`) compete again.

    A permit release runs it after the key's counter: lock order lease,
    task, permit, counter, then the key's waiting tasks.
    """
    move(tx, "task", "key_freed", task_ids, source="READY", sets="waits_for_key = FALSE")


@transition("task", "lapse", entry=False)
def lapse(tx: Tx, *, tasks: Sequence[TaskRow], now: dt.datetime) -> None:
    """OFFERED -> READY: the offer was never started; no attempt consumed."""
    move(tx, "task", "lapse", [t.task_id for t in tasks], source=_states(tasks), sets="updated_at = %s",
         args=(db_time(now),))


@transition("task", "cancel", entry=False)
def cancel(tx: Tx, *, task: TaskRow, now: dt.datetime) -> str:
    """SCHEDULED/READY/OFFERED -> CANCELLED at once (cancellation.request).

    The outcome is uncertain only if an earlier attempt was lost after start
    (the task carries effect_uncertain), since this cancel ran nothing.
    """
    stamp = db_time(now)
    return move(tx, "task", "cancel", [task.task_id], source=task.state,
                sets="updated_at = %s, finished_at = %s, outcome_status = 'CANCELLED',"
                     " outcome_error_code = 'cancelled', outcome_error_message = NULL, outcome_retryable = FALSE,"
                     " outcome_uncertain = %s, outcome_attempt = NULL",
                args=(stamp, stamp, task.effect_uncertain))


@transition("task", "finish", entry=False)
def finish(tx: Tx, *, items: Sequence[tuple[TaskRow, LeaseRow, FinishReport]], now: dt.datetime) -> list[str]:
    """Held (its lease RUNNING) -> the reported outcome, or SCHEDULED after backoff for a retryable failure (a batch).

    Tasks that end the same way share one guarded UPDATE; each attempt's
    outcome is on its lease (lease.finish wrote it). The task takes its
    lease's attempt number here: the start wrote the lease alone.
    """
    stamp = db_time(now)
    dests = []
    groups: dict[tuple, list[str]] = collections.defaultdict(list)
    for task, lease, report in items:
        dest = require("task", "finish", task.state, TaskContext(task=task, lease=lease, report=report))
        _check_attempt(task, lease)
        dests.append(dest)
        if dest == "SCHEDULED":
            due = db_time(after_ms(now, backoff_ms(task, lease.attempt)))
            move(tx, "task", "finish", [task.task_id], source=task.state, dest=dest,
                 sets=f"{_ATTEMPT_OF_LEASE}, due_at = %s, effective_at = %s, updated_at = %s",
                 args=(due, due - dt.timedelta(milliseconds=task.priority_offset_ms), stamp))
        else:
            key = (task.state, dest, report.status, report.error_code or None, report.error_message,
                   report.retryable)
            groups[key].append(task.task_id)
    for (source, dest, status, code, message, retryable), ids in groups.items():
        move(tx, "task", "finish", ids, source=source, dest=dest,
             sets=f"{_ATTEMPT_OF_LEASE}, updated_at = %s, finished_at = %s, outcome_status = %s, outcome_error_code = %s,"
                  f" outcome_error_message = %s, outcome_retryable = %s, {_outcome_uncertain(status)},"
                  " outcome_attempt = attempt",
             args=(stamp, stamp, status, code, message, retryable))
    return dests


def _outcome_uncertain(status: str) -> str:
    """The SET term of a reported outcome's effect_uncertain.

    UNKNOWN says so itself; SUCCEEDED is the effect, done. FAILED and
    CANCELLED speak for their own attempt alone: an earlier attempt lost
    after start (the row's ``effect_uncertain``) may still have had its
    effect, so the outcome stays uncertain, as a cancel before a new start
    leaves it (:func:`cancel`), and a manual retry's handler checks first.
    Read from the row in the UPDATE, so the lean finish needs no read.
    """
    if status == "UNKNOWN":
        return "outcome_uncertain = TRUE"
    if status == "SUCCEEDED":
        return "outcome_uncertain = FALSE"
    return "outcome_uncertain = effect_uncertain"


#: The task's attempt becomes its lease's, which the offer numbered one past the task's (the start wrote
#: the lease alone); ``outcome_attempt = attempt`` later in the same SET reads the new value (SET runs left
#: to right).
_ATTEMPT_OF_LEASE = "attempt = attempt + 1"


def _check_attempt(task: TaskRow, lease: LeaseRow) -> None:
    """The lease ending here is the attempt after the task's last: what :data:`_ATTEMPT_OF_LEASE` writes."""
    if lease.attempt != task.attempt + 1:
        raise InvariantViolation(f"lease {lease.lease_id} is attempt {lease.attempt}, task is at {task.attempt}")


def expiry_code(task_state: str) -> str:
    """The error code an expired attempt records, by where its task went."""
    return "cancel_timeout" if task_state == "CANCELLED" else "lease_expired"


@transition("task", "expire", entry=False)
def expire(tx: Tx, *, task: TaskRow, lease: LeaseRow, now: dt.datetime) -> str:
    """Held, its lease lost after start: CANCELLED (cancel_timeout), READY again (uncertain) or UNKNOWN.

    The lost attempt counts: the task takes its lease's attempt number.
    """
    dest = require("task", "expire", task.state, TaskContext(task=task, lease=lease))
    _check_attempt(task, lease)
    code = expiry_code(dest)
    stamp = db_time(now)
    if dest == "READY":
        return move(tx, "task", "expire", [task.task_id], source=task.state, dest=dest,
                    sets=f"{_ATTEMPT_OF_LEASE}, effect_uncertain = TRUE, updated_at = %s", args=(stamp,))
    return move(tx, "task", "expire", [task.task_id], source=task.state, dest=dest,
                sets=f"{_ATTEMPT_OF_LEASE}, updated_at = %s, finished_at = %s, outcome_status = %s, outcome_error_code = %s,"
                     " outcome_error_message = NULL, outcome_retryable = FALSE, outcome_uncertain = TRUE,"
                     " outcome_attempt = NULL",
                args=(stamp, stamp, dest, code))
