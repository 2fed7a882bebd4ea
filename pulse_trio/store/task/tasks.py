"""Chart ``task``, producer side and timer: submit, promote, manual retry.

The steps that run inside lease transactions (offer, start, lapse, cancel,
finish, expire) are in :mod:`pulse_trio.store.task.steps`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence

import pymysql

from pulse_trio.charts.states import public_state
from pulse_trio.contract import limits as lim
from pulse_trio.contract.grammar import NAME_PATTERN, is_concurrency_key, is_fairness_key, is_kind, is_queue
from pulse_trio.store.engine import chart_write
from pulse_trio.store.queue import fairness
from pulse_trio.store.engine import ids
from pulse_trio.store.cluster_setting import settings
from pulse_trio.store.engine.chart_write import move
from pulse_trio.store.engine.guard_context import TaskContext
from pulse_trio.store.engine.registry import decide, guard, require, transition
from pulse_trio.store.engine.results import (
    INVALID_TRANSITION, TASK_NOT_FOUND, Refusal, RetryCreated, Submitted, TimerResult,
)
from pulse_trio.store.engine.rows import TaskRow
from pulse_trio.store.engine.timer_scan import claim
from pulse_trio.store.engine.tx import Tx, db_time, py_time
from pulse_trio.store.task import sql

#: The longest retry backoff step: 24.8 days, so every value fits the INT columns.
MAX_BACKOFF_MS = lim.MAX_INT32
MAX_BACKOFF_FACTOR = 100.0
DEFAULT_BACKOFF_MAX_MS = 300_000
RECOVERABLE_STATES = frozenset({"FAILED", "UNKNOWN", "CANCELLED"})
DUPLICATE_KEY = 1062


@dataclasses.dataclass(frozen=True, slots=True)
class NewTask:
    """A task to submit, validated on construction; its id is made once, before any retry.

    ``payload_json`` is the exact JSON text (checked by the caller's strict
    scanner); it is stored and delivered byte for byte.
    """

    queue: str
    kind: str
    payload_json: str = "{}"
    priority: int = 0
    due_at: dt.datetime | None = None  # None: due now
    idempotency_key: str | None = None  # None: the task id
    concurrency_key: str | None = None
    concurrency_limit: int = 1
    fairness_key: str | None = None  # a tenant, say: shares the queue with other keys by weight
    max_attempts: int = 3
    backoff_initial_ms: int = 1000
    backoff_factor: float = 2.0
    backoff_max_ms: int = DEFAULT_BACKOFF_MAX_MS
    retry_uncertain: bool = False
    lease_ttl_ms: int | None = None  # None: the cluster's lease_ttl when it is offered
    task_id: str = dataclasses.field(default_factory=lambda: ids.new_id("tsk"))

    def __post_init__(self) -> None:
        problems = []
        if not is_queue(self.queue):
            problems.append(f"queue {self.queue!r} does not match {NAME_PATTERN}")
        if not is_kind(self.kind):
            problems.append(f"kind {self.kind!r} does not match {NAME_PATTERN}")
        if len(self.payload_json.encode("utf-8")) > lim.MAX_PAYLOAD_BYTES:
            problems.append(f"payload is larger than {lim.MAX_PAYLOAD_BYTES // 1024} KiB")
        if type(self.priority) is not int or not lim.MIN_PRIORITY <= self.priority <= lim.MAX_PRIORITY:
            problems.append(f"priority must be an integer {lim.MIN_PRIORITY}-{lim.MAX_PRIORITY}")
        if self.idempotency_key is not None and not 1 <= len(self.idempotency_key) <= lim.MAX_IDEMPOTENCY_KEY_CHARS:
            problems.append(f"idempotency_key must be 1-{lim.MAX_IDEMPOTENCY_KEY_CHARS} characters")
        if self.concurrency_key is not None and not is_concurrency_key(self.concurrency_key):
            problems.append(f"concurrency_key must be 1-{lim.MAX_CONCURRENCY_KEY_CHARS} printable ASCII characters")
        if self.fairness_key is not None and not is_fairness_key(self.fairness_key):
            problems.append(f"fairness_key must be 1-{lim.MAX_FAIRNESS_KEY_CHARS} printable ASCII characters")
        if self.concurrency_limit < 1 or self.max_attempts < 1:
            problems.append("concurrency_limit and max_attempts must be at least 1")
        if not (1 <= self.backoff_initial_ms <= self.backoff_max_ms <= MAX_BACKOFF_MS
                and 1 <= self.backoff_factor <= MAX_BACKOFF_FACTOR):
            problems.append(f"backoff must be 1 ms <= initial <= max <= {MAX_BACKOFF_MS} ms and factor 1-"
                            f"{MAX_BACKOFF_FACTOR:g}")
        if self.lease_ttl_ms is not None and self.lease_ttl_ms < 1:
            problems.append("lease_ttl_ms must be positive")
        if problems:
            raise ValueError("; ".join(problems))


@guard("task", "due")
def _due(c) -> bool:
    """due_at is not after now."""
    return db_time(c.due_at) <= db_time(c.now)


@guard("task", "source_found", code=TASK_NOT_FOUND)
def _source_found(c) -> bool:
    """The task to retry exists."""
    return c.source is not None


@guard("task", "source_recoverable", code=INVALID_TRANSITION)
def _source_recoverable(c) -> bool:
    """Only terminal FAILED, UNKNOWN or CANCELLED tasks are retried by hand (docs/task-recovery.md §2)."""
    return c.source.state in RECOVERABLE_STATES


def _row_for(task: NewTask, now: dt.datetime, step_ms: int, placed: dt.datetime | None) -> tuple:
    """The row to insert, but its state; ``placed``: the fair effective_at of a due task with a fairness key."""
    due = db_time(task.due_at or now)
    offset = task.priority * step_ms
    stamp = db_time(now)
    key = task.idempotency_key or task.task_id
    effective = db_time(placed) if placed is not None else due - dt.timedelta(milliseconds=offset)
    return (task.task_id, task.queue, task.kind, task.payload_json, task.priority, offset, due,
            effective, key, key, task.concurrency_key, task.concurrency_limit,
            task.max_attempts, task.backoff_initial_ms, task.backoff_factor, task.backoff_max_ms,
            task.retry_uncertain, task.lease_ttl_ms, 0, False, None, stamp, stamp, task.fairness_key)


def ensure_key_counters(tx: Tx, keys: set[str]) -> None:
    """Make sure each concurrency key has its counter row (token 0, nothing held).

    Read first without locking, so submits of a busy key never queue behind
    the assigners holding its row. A zero counter is data, not a permit: no
    key_permit changes state here.
    """
    if not keys:
        return
    have = {r[0] for r in tx.all(sql.KEY_COUNTERS_OF, (tuple(keys),))}
    for key in sorted(keys - have):
        try:
            tx.write(sql.INSERT_KEY_COUNTER, (key,))
        except pymysql.err.IntegrityError as exc:
            if exc.args[0] != DUPLICATE_KEY:
                raise


@transition("task", "submit")
def submit(tx: Tx, *, tasks: Sequence[NewTask], now: dt.datetime) -> tuple[Submitted, ...]:
    """Create tasks (READY if due, else SCHEDULED); a known idempotency key returns the existing task.

    Runs on the caller's transaction too (transactional enqueue): pass a Tx
    over the producer's own cursor and commit with the producer's work.
    ``effective_at`` uses the cluster's priority step, read in this
    transaction, whichever process submits.
    """
    if not tasks:
        return ()
    states = []
    for task in tasks:
        state = decide("task", "submit", "NONE", TaskContext(due_at=task.due_at or now, now=now))
        assert isinstance(state, str)
        states.append(state)
    # A due task of a fairness key is placed on its key's clock now; a
    # scheduled one when the promote timer makes it READY.
    fair = [i for i, (t, state) in enumerate(zip(tasks, states)) if t.fairness_key is not None and state == "READY"]
    values = settings.values_ms(tx, "priority_step", *(("fairness_quantum",) if fair else ()))
    priority_step_ms = values["priority_step"]
    assert priority_step_ms is not None
    placed: dict[int, dt.datetime] = dict(zip(fair, fairness.place(tx, [
        fairness.Arrival(tasks[i].queue, tasks[i].fairness_key, tasks[i].due_at or now,  # type: ignore[arg-type]
                         tasks[i].priority * priority_step_ms) for i in fair], now=now,
        quantum_ms=values["fairness_quantum"]))) if fair else {}
    prepared = [(task, state, _row_for(task, now, priority_step_ms, placed.get(i)))
                for i, (task, state) in enumerate(zip(tasks, states))]
    ensure_key_counters(tx, {t.concurrency_key for t in tasks if t.concurrency_key})
    try:
        chart_write.create(tx, "task", "submit", columns=sql.NEW_TASK_COLUMNS, row=sql.NEW_TASK_ROW, rows=[row for _, _, row in prepared],
                           dest=states)
        return tuple(Submitted(t.task_id, state, True) for t, state, _ in prepared)
    except pymysql.err.IntegrityError as exc:
        if exc.args[0] != DUPLICATE_KEY:
            raise
    # Some key exists already (or this is a re-run after a lost COMMIT): one at a time.
    results = []
    for task, state, row in prepared:
        try:
            chart_write.create(tx, "task", "submit", columns=sql.NEW_TASK_COLUMNS, row=sql.NEW_TASK_ROW, rows=[row], dest=[state])
            results.append(Submitted(task.task_id, state, True))
        except pymysql.err.IntegrityError as exc:
            if exc.args[0] != DUPLICATE_KEY:
                raise
            key = (task.task_id, task.queue, task.idempotency_key or task.task_id)
            # A plain read is enough under the service's READ COMMITTED; a caller's own transaction
            # (DatabaseClient, connection=) may read a snapshot older than the row it met.
            found = tx.one(sql.SUBMITTED_BEFORE, key) or tx.one(sql.SUBMITTED_BEFORE_LOCKED, key)
            if found is None:
                raise
            results.append(Submitted(found[0], public_state(found[1], found[2]), found[0] == task.task_id))
    return tuple(results)


@transition("task", "promote")
def promote(tx: Tx, *, now: dt.datetime, limit: int = 500) -> TimerResult:
    """Timer: SCHEDULED tasks whose due_at has come become READY (SKIP LOCKED: instances share it)."""
    rows = claim(tx, sql.PROMOTE_SCAN, now=now, limit=limit)
    if not rows:
        return TimerResult(0, False)
    for _, due_at, *_ in rows:
        require("task", "promote", "SCHEDULED", TaskContext(due_at=due_at, now=now))
    task_ids = tuple(r[0] for r in rows)
    fair = [r for r in rows if r[3] is not None]  # placed on their key's clock, in due order
    if not fair:
        move(tx, "task", "promote", task_ids, source="SCHEDULED", sets="updated_at = %s", args=(db_time(now),))
        return TimerResult(len(task_ids), len(rows) == limit, task_ids=task_ids)
    placed = fairness.place(tx, [fairness.Arrival(queue, key, py_time(due), int(offset))
                                 for _, due, queue, key, offset in fair], now=now)
    cases = " ".join(["WHEN %s THEN %s"] * len(fair))
    move(tx, "task", "promote", task_ids, source="SCHEDULED",
         sets=f"updated_at = %s, effective_at = CASE task_id {cases} ELSE effective_at END",
         args=(db_time(now), *[v for r, at in zip(fair, placed) for v in (r[0], db_time(at))]))
    return TimerResult(len(task_ids), len(rows) == limit, task_ids=task_ids)


@transition("task", "retry")
def retry(tx: Tx, *, source_task_id: str, now: dt.datetime, new_task_id: str | None = None) -> RetryCreated | Refusal:
    """Manual recovery: a new READY task copying a terminal FAILED/UNKNOWN/CANCELLED source.

    Idempotent per source (unique ``retry_of``): retrying the same source
    again returns the retry that exists.
    """
    row = tx.one(sql.LOCK_RETRY_SOURCE, (source_task_id,))
    source = TaskRow.from_row(row) if row else None
    # The source's retry, if one was made. Without the source only a re-run reads it, and answers it only as
    # its own: the lost COMMIT landed and the purge took the source since.
    existing = tx.one(sql.RETRY_OF, (source_task_id,)) if source is not None or tx.recovering else None
    if existing:
        mine = tx.recovering and existing[0] == new_task_id
        if source is not None or mine:
            return RetryCreated(existing[0], source_task_id, mine, bool(existing[1]))
    dest = decide("task", "retry", "NONE", TaskContext(source=source))
    if isinstance(dest, Refusal):
        return dest
    assert source is not None
    task_id = new_task_id or ids.new_id("tsk")
    uncertain = bool(source.outcome_uncertain)
    stamp = db_time(now)
    # A new task: weighed by the priority_step in force now, as a fresh submit is (not the source's).
    priority_step_ms = settings.value_ms(tx, "priority_step")
    assert priority_step_ms is not None
    offset_ms = source.priority * priority_step_ms
    effective = stamp - dt.timedelta(milliseconds=offset_ms)
    if source.fairness_key is not None:
        (placed,) = fairness.place(tx, [fairness.Arrival(source.queue, source.fairness_key, now, offset_ms)],
                                   now=now)
        effective = db_time(placed)
    chart_write.create(tx, "task", "retry", columns=sql.NEW_TASK_COLUMNS, row=sql.NEW_TASK_ROW, dest=dest, rows=[(
        task_id, source.queue, source.kind, source.payload, source.priority, offset_ms,
        stamp, effective, source.idempotency_key, None,
        source.concurrency_key, source.concurrency_limit, source.max_attempts, source.backoff_initial_ms,
        source.backoff_factor, source.backoff_max_ms, source.retry_uncertain, source.lease_ttl_ms, 0, uncertain,
        source.task_id, stamp, stamp, source.fairness_key,
    )])
    if source.concurrency_key:
        ensure_key_counters(tx, {source.concurrency_key})
    return RetryCreated(task_id, source.task_id, True, uncertain)
