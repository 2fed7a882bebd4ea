"""Read-only views for the producer client, the CLI and the HTTP API.

Not transitions: nothing here writes. The task view carries what
``pulse-trio task show`` prints: the task, its attempts, its outcome once
terminal, lineage both ways and the cancel intent with its grace deadline.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from pulse_trio.store.engine.registry import read_only
from pulse_trio.charts.states import TERMINAL_TASK_STATES
from pulse_trio.contract.jsontext import dumps
from pulse_trio.contract.scanner import RawJson
from pulse_trio.store.engine.rows import LeaseRow, TaskRow
from pulse_trio.store.engine.tx import Tx, py_time, rfc3339
from pulse_trio.store.views import sql


@dataclasses.dataclass(frozen=True, slots=True)
class AttemptView:
    attempt: int
    lease_id: str
    session_id: str
    status: str
    started_at: dt.datetime
    ended_at: dt.datetime | None
    error_code: str | None
    error_message: str | None
    retryable: bool | None
    effect_uncertain: bool
    concurrency_token: int | None
    result_json: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class OutcomeView:
    """How a terminal task ended: the outcome of its deciding attempt."""

    status: str
    error_code: str | None
    error_message: str | None
    result_json: str | None
    retryable: bool
    effect_uncertain: bool


@dataclasses.dataclass(frozen=True, slots=True)
class CancelIntent:
    """The task's cancel request (chart ``cancellation``), as operators see it."""

    state: str
    requested_at: dt.datetime
    grace_expires_at: dt.datetime | None
    reason: str
    requested_by: str
    resolved_at: dt.datetime | None

    def as_json(self) -> dict[str, object]:
        return {"state": self.state, "requested_at": rfc3339(self.requested_at),
                "grace_expires_at": rfc3339(self.grace_expires_at) if self.grace_expires_at else None,
                "reason": self.reason, "requested_by": self.requested_by,
                "resolved_at": rfc3339(self.resolved_at) if self.resolved_at else None}


@dataclasses.dataclass(frozen=True, slots=True)
class TaskView:
    task: TaskRow
    attempts: tuple[AttemptView, ...]
    outcome: OutcomeView | None
    retried_by: str | None
    cancel: CancelIntent | None
    lease: LeaseRow | None  # the live lease, if any

    @property
    def cancel_requested_at(self) -> dt.datetime | None:
        return self.cancel.requested_at if self.cancel else None

    @property
    def cancel_state(self) -> str | None:
        return self.cancel.state if self.cancel else None

    def as_json_text(self) -> str:
        """One JSON object; payload and result are embedded as their exact stored text.

        Spliced by ``dumps``, whose placeholder no stored text can contain: a payload holding any
        string of its own stays the payload, and the result stays the result.
        """
        t = self.task
        doc: dict[str, object] = {
            "task_id": t.task_id, "queue": t.queue, "kind": t.kind, "state": t.state, "priority": t.priority,
            "attempt": t.attempt, "max_attempts": t.max_attempts, "idempotency_key": t.idempotency_key,
            "concurrency_key": t.concurrency_key, "concurrency_limit": t.concurrency_limit,
            "fairness_key": t.fairness_key,
            "effect_uncertain": t.effect_uncertain, "retry_uncertain": t.retry_uncertain,
            "backoff_initial": t.backoff_initial_ms / 1000, "backoff_factor": t.backoff_factor,
            "backoff_max": t.backoff_max_ms / 1000,
            "retry_of": t.retry_of, "retried_by": self.retried_by,
            "created_at": rfc3339(t.created_at), "due_at": rfc3339(t.due_at),
            "cancel_requested_at": rfc3339(self.cancel_requested_at) if self.cancel_requested_at else None,
            "cancel": self.cancel.as_json() if self.cancel else None,
            "payload": RawJson(t.payload),
            "attempts": [{
                "attempt": a.attempt, "lease_id": a.lease_id, "status": a.status,
                "started_at": rfc3339(a.started_at), "ended_at": rfc3339(a.ended_at) if a.ended_at else None,
                "error_code": a.error_code, "error_message": a.error_message, "retryable": a.retryable,
                "effect_uncertain": a.effect_uncertain,
                "concurrency_token": str(a.concurrency_token) if a.concurrency_token else None,
            } for a in self.attempts],
            "outcome": None,
        }
        if self.outcome is not None:
            o = self.outcome
            result = o.result_json
            if result is None and o.status == "CANCELLED":
                # No handler finished it (cancelled before start, or the grace ran out): the same
                # "no result" a handler that stops on request reports, whoever cancelled.
                result = "{}"
            doc["outcome"] = {
                "status": o.status, "error_code": o.error_code, "error_message": o.error_message,
                "result": RawJson(result) if result is not None else None,
                "retryable": o.retryable, "effect_uncertain": o.effect_uncertain,
            }
        return dumps(doc)[0]


def seen(row: tuple) -> TaskRow:
    """A row read with ``sql.TASK_AS_SEEN``: the task as readers see it, OFFERED or RUNNING (at its
    attempt) as its live lease is, both read by one statement."""
    return TaskRow.from_row(row[:-2]).seen_with(row[-2], row[-1])


@read_only(takes_locks=False)
def get_task(tx: Tx, *, task_id: str) -> TaskView | None:
    """The task with attempts, outcome, lineage and cancel intent; None if unknown.

    Each statement sees the latest commits (READ COMMITTED), and the purge
    deletes an ended task with its leases in one commit: one that lands
    between the task's read and its attempts' would show the task ended
    without its attempts or result. So an ended task is looked up once more
    after the last read: gone by then, it was purged, and it is unknown.
    """
    row = tx.one(sql.TASK, (task_id,))
    if row is None:
        return None
    split = len(TaskRow.NAMES)
    live = LeaseRow.from_row(row[split:]) if row[split] is not None else None
    task = TaskRow.from_row(row[:split]).seen_with(live.state if live else None, live.attempt if live else None)
    # An attempt is a started lease; one not ended yet (no outcome) is the running attempt.
    attempts = tuple(
        AttemptView(a[0], a[1], a[2], a[3] or "RUNNING", py_time(a[4]), py_time(a[5]), a[6], a[7],
                    None if a[8] is None else bool(a[8]), bool(a[9]), a[10], a[11])
        for a in tx.all(sql.ATTEMPTS, (task_id,)))
    outcome = None
    if task.state in TERMINAL_TASK_STATES and task.outcome_status:
        result = next((a.result_json for a in attempts if a.attempt == task.outcome_attempt), None)
        outcome = OutcomeView(task.outcome_status, task.outcome_error_code, task.outcome_error_message, result,
                              bool(task.outcome_retryable), bool(task.outcome_uncertain))
    retried = tx.one(sql.RETRIED_BY, (task_id,))
    intent = tx.one(sql.CANCEL_INTENT, (task_id,))
    cancel = None
    if intent is not None:
        state, requested_at, grace_expires_at, reason, requested_by, resolved_at = intent
        cancel = CancelIntent(state, py_time(requested_at), py_time(grace_expires_at), reason, requested_by,
                              py_time(resolved_at))
    if task.state in TERMINAL_TASK_STATES and tx.one(sql.STILL_THERE, (task_id,)) is None:
        return None
    return TaskView(task, attempts, outcome, retried[0] if retried else None, cancel, live)
