"""The producer client: the one place submit/get/cancel/retry/list are spelled.

The CLI and the HTTP API are thin faces over this. Every method is one
store transaction; ``submit(..., connection=conn)`` instead runs inside the
caller's own open PyMySQL transaction (transactional enqueue): the task
exists if and only if the caller commits.

Cluster-wide timing that a producer writes into rows (the priority step in
a submit's ``effective_at``, the grace of a cancel) is not the client's to
choose: the store reads the cluster's value (``pulse-trio settings``) inside
the submit's or the cancel's own transaction. :meth:`Client.settings` and
:meth:`Client.set_settings` read and change those values.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pymysql.cursors

from pulse_trio import cluster_settings
from pulse_trio.client import ranges
from pulse_trio.contract.grammar import (
    INSTANCE_PREFIX, TASK_PREFIX, is_concurrency_key, is_fairness_key, is_queue, is_resource_id, is_text,
)
from pulse_trio.contract.jsontext import JsonText, NumberOutOfRange
from pulse_trio.contract.limits import (
    MAX_CONCURRENCY_KEY_CHARS, MAX_FAIRNESS_KEY_CHARS, MAX_IDEMPOTENCY_KEY_CHARS, MAX_PAYLOAD_BYTES, MAX_PAYLOAD_DEPTH,
)
from pulse_trio.contract.scanner import ScanError
from pulse_trio.dburl import DatabaseConfig
from pulse_trio.picklable import ByFields
from pulse_trio.store.queue import fairness
from pulse_trio.store.views import queries
from pulse_trio.store.task import retention
from pulse_trio.store.cluster_setting import settings as stored_settings
from pulse_trio.store.cancellation.intents import request as request_cancel
from pulse_trio.store.engine import ids
from pulse_trio.store.engine.codes import INSTANCE_NOT_FOUND, TASK_NOT_FOUND
from pulse_trio.store.engine.facade import SyncStore
from pulse_trio.store.instance.instances import operator_drain
from pulse_trio.store.queue.queues import QueueControl, queue_controls
from pulse_trio.store.queue.queues import pause as pause_queue
from pulse_trio.store.queue.queues import resume as resume_queue
from pulse_trio.store.queue.queues import set_retention as set_queue_retention
from pulse_trio.store.engine.results import CancelResult, Refusal
from pulse_trio.store.task.tasks import DEFAULT_BACKOFF_MAX_MS, NewTask, retry as retry_task, submit as submit_tasks
from pulse_trio.store.engine.tx import Tx, rfc3339
from pulse_trio.store.views.task import TaskView, get_task

UTC = dt.timezone.utc
#: NewTask's default first backoff step, in milliseconds.
DEFAULT_BACKOFF_INITIAL_MS = next(f.default for f in dataclasses.fields(NewTask) if f.name == "backoff_initial_ms")


class ClientError(ByFields, Exception):
    """A request the platform refused; ``code`` is stable, ``message`` is for people.

    ``field`` names the input at fault when one is (``priority``, ``payload``), for a batch's per-task errors.
    """

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field


class TaskNotFound(ClientError):
    def __init__(self, task_id: str) -> None:
        super().__init__(TASK_NOT_FOUND, f"no task {task_id}")


#: The code of a request refused for its own input, before anything is written.
INVALID_REQUEST = "invalid_request"


class InvalidRequest(ClientError):
    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(INVALID_REQUEST, message, field)


#: The rule of queue and kind names, for messages (the grammar itself is pulse_trio.contract.grammar).
NAME_RULE = "1-64 of a-z 0-9 _ . -, starting with a letter or digit"


def check_name(what: str, value: Any) -> str:
    """A queue or kind name by the protocol's grammar; InvalidRequest before any SQL sees it."""
    if type(value) is not str or not is_queue(value):
        shown = repr(value[:80]) if isinstance(value, str) else type(value).__name__
        raise InvalidRequest(f"{what} {shown} is not a {what} name ({NAME_RULE})", what)
    return value


def _is_idempotency_key(text: str) -> bool:
    return text != "" and is_text(text, MAX_IDEMPOTENCY_KEY_CHARS)


#: The keys a task may carry, each with its test and its rule for messages: what ``build_task`` (under the
#: HTTP API, the CLI and the direct client alike) and a listing's filter hold them to.
KEY_RULES: dict[str, tuple[Callable[[str], bool], str]] = {
    "idempotency_key": (_is_idempotency_key, f"text of 1-{MAX_IDEMPOTENCY_KEY_CHARS} characters (no lone surrogates)"),
    "concurrency_key": (is_concurrency_key, f"1-{MAX_CONCURRENCY_KEY_CHARS} printable ASCII characters"),
    "fairness_key": (is_fairness_key, f"1-{MAX_FAIRNESS_KEY_CHARS} printable ASCII characters"),
}


def check_key(name: str, value: Any) -> str | None:
    """An optional key by its rule in ``KEY_RULES``; InvalidRequest naming it before any SQL sees it."""
    valid, rule = KEY_RULES[name]
    if value is not None and (type(value) is not str or not valid(value)):
        raise InvalidRequest(f"{name} must be {rule}", name)
    return value


def check_by(name: str, value: Any) -> str:
    """Who asks for a change, as text the store can keep (it cuts it to its column); InvalidRequest naming
    ``name`` for anything else, lone surrogates included, before any SQL sees it."""
    if type(value) is not str or not is_text(value, len(value)):  # any length: only the kept part is stored
        raise InvalidRequest(f"{name} must be text without lone surrogates", name)
    return value


def check_time(name: str, value: dt.datetime) -> dt.datetime:
    """An aware datetime as UTC; InvalidRequest naming ``name`` for a naive one, or one whose UTC moment
    lies outside the years a datetime holds (the last evening of the last year, west of Greenwich)."""
    if value.tzinfo is None:
        raise InvalidRequest(f"{name} must carry a time zone (UTC)", name)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise InvalidRequest(f"{name} must lie within the years {dt.MINYEAR}-{dt.MAXYEAR} in UTC", name) from None


def _task_id(task_id: Any) -> None:
    """A string that cannot be a task id names no task (TaskNotFound), and never reaches SQL."""
    if type(task_id) is not str or not is_resource_id(task_id, TASK_PREFIX):
        raise TaskNotFound(str(task_id)[:80])


def check_list_filters(*, queue: str | None, state: str | None, kind: str | None, idempotency_key: str | None,
                       cursor: str | None, limit: int, order: str) -> None:
    """The filters of a task listing, each by its rule (InvalidRequest): what the HTTP query and ``list`` share."""
    if queue is not None:
        check_name("queue", queue)
    if kind is not None:
        check_name("kind", kind)
    if state is not None and state not in queries.TASK_STATES:
        raise InvalidRequest(f"state must be one of {', '.join(queries.TASK_STATES)}")
    check_key("idempotency_key", idempotency_key)
    if cursor is not None and (type(cursor) is not str or not is_resource_id(cursor, TASK_PREFIX)):
        raise InvalidRequest("cursor must be the `next` value of a previous page")
    if order not in queries.LIST_ORDERS:
        raise InvalidRequest(f"order must be one of {', '.join(queries.LIST_ORDERS)}")
    _in_range(ranges.LIST_LIMIT, limit)


def _in_range(field: ranges.Range, value: Any) -> Any:
    try:
        return field.check(value)
    except ranges.OutOfRange as exc:
        raise InvalidRequest(str(exc), field.name) from None


def canonical_payload(payload: Any = None, *, payload_json: str | None = None) -> str:
    """Strict JSON text of the payload (the same rules as frames), ≤ 256 KiB."""
    try:
        text = (JsonText.parse(payload_json, max_depth=MAX_PAYLOAD_DEPTH, check_numbers=True)
                if payload_json is not None
                else JsonText.from_value({} if payload is None else payload, max_depth=MAX_PAYLOAD_DEPTH,
                                         check_numbers=True))
    except NumberOutOfRange as exc:  # valid JSON, but the task would be offered to workers that cannot read it
        raise InvalidRequest(f"payload: {exc}", "payload") from None
    except (ScanError, ValueError, TypeError) as exc:
        raise InvalidRequest(f"payload is not valid JSON: {exc}", "payload") from None
    if len(text.encode("utf-8")) > MAX_PAYLOAD_BYTES:
        raise ClientError("payload_too_large", f"payload is larger than {MAX_PAYLOAD_BYTES} bytes", "payload")
    return str(text)


def build_task(queue: str, kind: str, payload: Any = None, *, payload_json: str | None = None,
             priority: int = 0, delay: float | None = None, due_at: dt.datetime | None = None,
             idempotency_key: str | None = None, concurrency_key: str | None = None,
             concurrency_limit: int = 1, fairness_key: str | None = None, max_attempts: int = 3,
             retry_uncertain: bool = False,
             lease_ttl: float | None = None, backoff_initial: float | None = None,
             backoff_factor: float | None = None, backoff_max: float | None = None,
             now: dt.datetime | None = None) -> NewTask:
    """A validated task to submit; raises InvalidRequest before anything is written.

    Every number is held to its range in :mod:`pulse_trio.client.ranges`
    (the same the HTTP API and its OpenAPI document use). The retry backoff
    (``backoff_initial`` and ``backoff_max`` in seconds, ``backoff_factor`` a
    multiplier; defaults 1 s, ×2, 300 s) spaces the attempts of a task whose
    handler fails with ``retryable: true``. ``fairness_key`` (a tenant, say)
    shares the queue with other keys by their weights (docs/priority-and-fairness.md §5).
    """
    now = now or dt.datetime.now(UTC)
    check_name("queue", queue)
    check_name("kind", kind)
    for name, key in (("idempotency_key", idempotency_key), ("concurrency_key", concurrency_key),
                      ("fairness_key", fairness_key)):
        check_key(name, key)
    if type(retry_uncertain) is not bool:
        raise InvalidRequest("retry_uncertain must be True or False", "retry_uncertain")
    if due_at is not None and not isinstance(due_at, dt.datetime):
        raise InvalidRequest("due_at must be a datetime with a time zone (UTC)", "due_at")
    if delay is not None and due_at is not None:
        raise InvalidRequest("give delay or due_at, not both", "delay")
    if delay is not None:
        due_at = now + dt.timedelta(seconds=_in_range(ranges.DELAY, delay))
    if due_at is not None:
        due_at = check_time("due_at", due_at)
        if due_at < ranges.EARLIEST_DUE_AT:
            raise InvalidRequest(f"due_at must not be before {ranges.EARLIEST_DUE_AT:%Y-%m-%d} (UTC)", "due_at")
    try:
        return NewTask(
            queue=queue, kind=kind, payload_json=canonical_payload(payload, payload_json=payload_json),
            priority=_in_range(ranges.PRIORITY, priority), due_at=due_at, idempotency_key=idempotency_key,
            concurrency_key=concurrency_key, concurrency_limit=_in_range(ranges.CONCURRENCY_LIMIT, concurrency_limit),
            fairness_key=fairness_key,
            max_attempts=_in_range(ranges.MAX_ATTEMPTS, max_attempts), retry_uncertain=retry_uncertain,
            lease_ttl_ms=None if lease_ttl is None else _milliseconds(ranges.LEASE_TTL, lease_ttl),
            **_backoff(backoff_initial, backoff_factor, backoff_max),
        )
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None


def _milliseconds(field: ranges.Range, seconds: Any) -> int:
    try:
        return field.milliseconds(seconds)
    except ranges.OutOfRange as exc:
        raise InvalidRequest(str(exc), field.name) from None


def _backoff(initial: float | None, factor: float | None, maximum: float | None) -> dict[str, Any]:
    """The given backoff settings as NewTask fields (milliseconds); the rest keep NewTask's defaults."""
    fields: dict[str, Any] = {}
    for name, field, seconds in (("backoff_initial_ms", ranges.BACKOFF_INITIAL, initial),
                                 ("backoff_max_ms", ranges.BACKOFF_MAX, maximum)):
        if seconds is not None:
            fields[name] = _milliseconds(field, seconds)
    if factor is not None:
        fields["backoff_factor"] = float(_in_range(ranges.BACKOFF_FACTOR, factor))
    if "backoff_max_ms" not in fields and fields.get("backoff_initial_ms", 0) > DEFAULT_BACKOFF_MAX_MS:
        fields["backoff_max_ms"] = fields["backoff_initial_ms"]  # a long first step raises the default cap
    if "backoff_initial_ms" not in fields and fields.get("backoff_max_ms", DEFAULT_BACKOFF_INITIAL_MS) < \
            DEFAULT_BACKOFF_INITIAL_MS:
        fields["backoff_initial_ms"] = fields["backoff_max_ms"]  # a short cap shortens the default first step
    return fields


@dataclasses.dataclass
class DatabaseClient:
    """Producer and operator operations on one database (thread-safe, blocking).

    The direct path: it holds database credentials, and ``submit(...,
    connection=conn)`` joins the caller's own transaction (transactional
    enqueue). Applications that only submit and await outcomes use the HTTP
    clients instead (:mod:`pulse_trio.producer`), with a producer token.
    """

    database: DatabaseConfig
    #: Deprecated and ignored (a warning says so): the cluster's priority_step applies.
    priority_step: float | None = None
    #: Deprecated and ignored (a warning says so): the cluster's cancel_grace applies.
    cancel_grace: float | None = None
    pool_size: int = 2
    #: An existing store to share (the service's, for the HTTP API); None: the client opens its own.
    store: SyncStore | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        for name in ("priority_step", "cancel_grace"):
            if getattr(self, name) is not None:
                warnings.warn(f"Client({name}=...) is ignored: every writer uses the cluster's {name} "
                              f"(pulse-trio settings set {name} SECONDS)", DeprecationWarning, stacklevel=3)
        if type(self.pool_size) is not int or self.pool_size < 1:
            raise ValueError(f"pool_size must be a whole number of connections, at least 1, got {self.pool_size!r:.40}")
        self._owns_store = self.store is None
        if self.store is None:
            self.store = SyncStore(self.database, pool_size=self.pool_size)

    def close(self) -> None:
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> DatabaseClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def now() -> dt.datetime:
        return dt.datetime.now(UTC)

    # -- producing ---------------------------------------------------------------
    def new_task(self, queue: str, kind: str, payload: Any = None, **options: Any) -> NewTask:
        """Validate a submission without writing anything (see :func:`build_task`)."""
        return build_task(queue, kind, payload, **options)

    def submit(self, queue: str, kind: str, payload: Any = None, *, connection: Any = None,
               **options: Any) -> dict[str, Any]:
        """Create a task (or find the one with this idempotency key); returns the task view.

        With ``connection`` (an open PyMySQL connection in the caller's
        transaction) the insert joins that transaction and nothing is
        committed here; the returned dict is then just ``task_id``/``state``.
        """
        now = self.now()
        task = self.new_task(queue, kind, payload, now=now, **options)
        if connection is not None:
            return self.submit_many([task], connection=connection, now=now)[0]
        _, text, created = self.submit_json_text(task, now=now)
        return dict(json.loads(text), created=created)

    def submit_json_text(self, task: NewTask, *, now: dt.datetime | None = None) -> tuple[str, str, bool]:
        """One task submitted: its id, its view's JSON text, and whether this call created it.

        The view is read in the submit's own transaction, so a known key
        answers the task the submit found even if the purge deletes it just
        after: never "task not found" (docs/tasks.md §8).
        """
        result, text = self._run_and_view(submit_tasks, {"tasks": [task], "now": now or self.now()},
                                          lambda done: done[0].task_id)
        (done,) = result
        assert text is not None  # a submit never refuses
        return done.task_id, text, done.created

    def submit_many(self, tasks: Sequence[NewTask], *, connection: Any = None,
                    now: dt.datetime | None = None) -> list[dict[str, Any]]:
        """Submit a batch in one transaction; returns ``task_id``/``state``/``created`` per task.

        On the caller's ``connection`` the store reads through a plain cursor
        of its own: the rows it reads are tuples whatever cursor class the
        caller's connection makes by default (a ``DictCursor``, say).
        """
        now = now or self.now()
        if connection is not None:
            with connection.cursor(pymysql.cursors.Cursor) as cursor:
                tx = Tx(cursor)
                done = submit_tasks(tx, tasks=list(tasks), now=now)
            return [{"task_id": s.task_id, "state": s.state, "created": s.created} for s in done]
        done = self.store.run_sync(submit_tasks, tasks=list(tasks), now=now)
        return [{"task_id": s.task_id, "state": s.state, "created": s.created} for s in done]

    # -- reading -----------------------------------------------------------------
    def get_json_text(self, task_id: str) -> str:
        """The task view as JSON text (payload and result embedded verbatim)."""
        _task_id(task_id)
        view = self.store.run_sync(get_task, task_id=task_id)
        if view is None:
            raise TaskNotFound(task_id)
        return view.as_json_text()

    def get(self, task_id: str) -> dict[str, Any]:
        return json.loads(self.get_json_text(task_id))

    def list(self, *, queue: str | None = None, state: str | None = None, kind: str | None = None,
             idempotency_key: str | None = None, cursor: str | None = None, limit: int = ranges.DEFAULT_PAGE,
             queues: Sequence[str] | None = None, order: str = "oldest", after: str | None = None) -> dict[str, Any]:
        """A page of tasks, oldest first (``order="newest"``: newest first); ``next`` is the following page's ``cursor``.

        ``queues`` narrows the listing to those queues (a queue-scoped token's).
        ``after`` is the old name of ``cursor``: deprecated, still accepted.
        """
        if after is not None:
            warnings.warn("Client.list(after=...) is deprecated: pass cursor=, the name the HTTP API uses",
                          DeprecationWarning, stacklevel=2)
            if cursor is not None and cursor != after:
                raise InvalidRequest("give cursor or after (its deprecated name), not both")
            cursor = after
        check_list_filters(queue=queue, state=state, kind=kind, idempotency_key=idempotency_key, cursor=cursor,
                           limit=limit, order=order)
        for name in queues or ():
            if not is_queue(name):
                raise InvalidRequest(f"queue {name[:80]!r} is not a queue name ({NAME_RULE})")
        rows = self.store.run_sync(queries.list_tasks, queue=queue, state=state, kind=kind,
                                   idempotency_key=idempotency_key, after=cursor, limit=limit + 1, queues=queues,
                                   order=order)
        page = rows[:limit]
        return {
            "tasks": [{"task_id": r.task_id, "queue": r.queue, "kind": r.kind, "state": r.state,
                       "priority": r.priority, "attempt": r.attempt,
                       "created_at": r.created_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")} for r in page],
            "next": page[-1].task_id if len(rows) > limit else None,
        }

    def queues(self, *, now: dt.datetime | None = None) -> dict[str, Any]:
        """Per queue: tasks per state, the oldest ready age, and whether it is paused (chart ``queue``).

        A queue an operator paused or gave a retention of its own is listed
        even while it holds no task.
        """
        depths = self.store.run_sync(queries.queue_depths, now=now or self.now())
        controls = self.store.run_sync(queue_controls)
        out: dict[str, Any] = {}
        for queue in sorted(depths.keys() | controls.keys()):
            entry = depths.get(queue) or {"states": {}, "oldest_ready_age_s": None}
            out[queue] = {**entry, **(controls.get(queue) or QueueControl.absent(queue)).as_json()}
        return out

    def workers(self, *, include_disconnected: bool = False) -> list[dict[str, Any]]:
        return self.store.run_sync(queries.list_workers, include_disconnected=include_disconnected)

    def nodes(self, *, include_stopped: bool = False) -> list[dict[str, Any]]:
        """The serve processes and their liveness (``server_nodes``); STOPPED ones only when asked."""
        return self.store.run_sync(queries.list_nodes, include_stopped=include_stopped)

    def drain(self, instance_id: str, *, now: dt.datetime | None = None) -> dict[str, Any]:
        """Operator drain: no new tasks for this instance (its leases continue) until its session ends."""
        if type(instance_id) is not str or not is_resource_id(instance_id, INSTANCE_PREFIX):
            raise ClientError(INSTANCE_NOT_FOUND, f"no worker instance {str(instance_id)[:80]}")
        result = self.store.run_sync(operator_drain, instance_id=instance_id, now=now or self.now())
        if isinstance(result, Refusal):
            if result.code == INSTANCE_NOT_FOUND:
                raise ClientError(INSTANCE_NOT_FOUND, f"no worker instance {instance_id}")
            raise ClientError("instance_disconnected", f"worker instance {instance_id} is disconnected")
        worker = self.store.run_sync(queries.get_worker, instance_id=instance_id)
        assert worker is not None  # the drain found it, and an instance's row is never deleted
        return worker

    # -- operating ---------------------------------------------------------------
    def pause_queue(self, queue: str, *, paused_by: str, now: dt.datetime | None = None) -> dict[str, Any]:
        """Offer none of the queue's tasks on any serve process (leases out continue); idempotent.

        Every instance stops within its paused-queue interval; submissions
        are still accepted. ``changed`` is False when it was paused already.
        """
        check_name("queue", queue)
        check_by("paused_by", paused_by)
        change = self.store.run_sync(pause_queue, queue=queue, now=now or self.now(), paused_by=paused_by)
        return {"queue": queue, **change.control.as_json(), "changed": change.changed}

    def resume_queue(self, queue: str, *, resumed_by: str, now: dt.datetime | None = None) -> dict[str, Any]:
        """Offer the queue's tasks again; idempotent (``changed`` False when it was not paused)."""
        check_name("queue", queue)
        check_by("resumed_by", resumed_by)
        change = self.store.run_sync(resume_queue, queue=queue, now=now or self.now(), resumed_by=resumed_by)
        return {"queue": queue, **change.control.as_json(), "changed": change.changed}

    def cancel(self, task_id: str, *, reason: str = "", requested_by: str = "") -> dict[str, Any]:
        """Save a cancel intent (or report the final state of a terminal task)."""
        text, changed = self.cancel_json_text(task_id, reason=reason, requested_by=requested_by)
        return dict(json.loads(text), cancel_changed=changed)

    def cancel_json_text(self, task_id: str, *, reason: str = "", requested_by: str = "",
                         now: dt.datetime | None = None) -> tuple[str, bool]:
        """:meth:`cancel` as the task view's JSON text, and whether this call saved the intent.

        The view is read in the cancel's own transaction, so it shows the
        state the cancel decided on: a finish that commits just after the
        intent never shows up as a terminal task beside ``changed`` True.
        """
        result, text = self.cancel_result_text(task_id, reason=reason, requested_by=requested_by, now=now)
        return text, result.changed

    def cancel_result_text(self, task_id: str, *, reason: str = "", requested_by: str = "",
                           now: dt.datetime | None = None) -> tuple[CancelResult, str]:
        """:meth:`cancel_json_text` with the store's whole result: a serve process's HTTP API frees the slot
        of the offer it revoked (``revoked_lease``) in its own session at once, not at the next reconciliation."""
        _task_id(task_id)
        if type(reason) is not str or len(reason) > ranges.MAX_CANCEL_REASON_CHARS:
            raise InvalidRequest(f"reason must be text of at most {ranges.MAX_CANCEL_REASON_CHARS} characters")
        if not is_text(reason, ranges.MAX_CANCEL_REASON_CHARS):
            raise InvalidRequest("reason must not hold lone surrogates")
        check_by("requested_by", requested_by)

        result, text = self._run_and_view(request_cancel, {"task_id": task_id, "now": now or self.now(),
                                                           "reason": reason, "requested_by": requested_by},
                                          lambda _: task_id)
        if isinstance(result, Refusal):
            raise TaskNotFound(task_id) if result.code == TASK_NOT_FOUND else ClientError(result.code, result.message)
        assert text is not None
        return result, text

    def retry(self, task_id: str) -> dict[str, Any]:
        """Manual recovery of a terminal FAILED/UNKNOWN/CANCELLED task; idempotent per source."""
        text, created = self.retry_json_text(task_id)
        return dict(json.loads(text), created=created)

    def retry_json_text(self, task_id: str, *, now: dt.datetime | None = None) -> tuple[str, bool]:
        """:meth:`retry` as the new task's view JSON text, and whether this call made it.

        The view is read in the retry's own transaction: a retry made
        before is answered as the transaction found it. The new task's id
        is made once, before the transaction, so a re-run after a lost
        COMMIT knows the retry it finds as its own (``created`` stays true).
        """
        _task_id(task_id)
        result, text = self._run_and_view(retry_task, {"source_task_id": task_id, "now": now or self.now(),
                                                       "new_task_id": ids.new_id("tsk")},
                                          lambda retried: retried.task_id)
        if isinstance(result, Refusal):
            if result.code == TASK_NOT_FOUND:
                raise TaskNotFound(task_id)
            state = self.get(task_id)["state"]
            raise ClientError("not_retryable", f"task {task_id} is {state}: only a terminal FAILED, UNKNOWN "
                              "or CANCELLED task can be retried")
        assert text is not None
        return text, result.created

    def _run_and_view(self, fn: Callable[..., Any], kwargs: dict[str, Any],
                      task_of: Callable[[Any], str]) -> tuple[Any, str | None]:
        """``fn``'s result and, unless it refused, the view of the task ``task_of(result)`` names.

        The view is read in ``fn``'s own transaction, so the answer is the
        task as that transaction left it, whatever commits just after (a
        finish, the purge). Only if the transaction fell back to running
        ``fn`` alone is the view read apart.
        """
        def view(tx: Tx, results: list[Any]) -> TaskView | None:
            return None if isinstance(results[0], Refusal) else get_task(tx, task_id=task_of(results[0]))

        results = self.store.run_batch_sync([(fn, kwargs)], then=view)
        result = results[0]
        if isinstance(result, BaseException):
            raise result
        if isinstance(result, Refusal):
            return result, None
        if len(results) == 2 and results[1] is not None:
            return result, results[1].as_json_text()
        return result, self.get_json_text(task_of(result))  # the shared transaction fell back: read apart

    # -- retention ---------------------------------------------------------------
    def set_queue_retention(self, queue: str, value: str | float | int | None, *, updated_by: str,
                            now: dt.datetime | None = None) -> dict[str, Any]:
        """Give ``queue`` its own task_retention (seconds, checked like the cluster's), or None: the cluster's."""
        check_name("queue", queue)
        check_by("updated_by", updated_by)
        ms = None if value is None else parse_settings({"task_retention": value})["task_retention"]
        change = self.store.run_sync(set_queue_retention, queue=queue, retention_ms=ms, now=now or self.now(),
                                     updated_by=updated_by)
        return {"queue": queue, **change.control.as_json(), "changed": change.changed}

    def purge(self, *, older_than: float | None = None, queue: str | None = None, dry_run: bool = False,
              batch: int = retention.BATCH_TASKS, now: dt.datetime | None = None) -> dict[str, Any]:
        """Delete terminal tasks past their retention (or ended over ``older_than`` seconds ago), in batches.

        What ``serve`` does every minute, by hand: per queue (or just
        ``queue``) one short transaction per ``batch`` tasks, each taking its
        tasks FOR UPDATE SKIP LOCKED, so it runs safely beside ``serve``.
        ``dry_run`` counts what a purge would delete now, and apart what it would hold; it deletes nothing.
        """
        if queue is not None:
            check_name("queue", queue)
        older_than_ms = None
        if older_than is not None:
            if isinstance(older_than, bool) or not 0 <= older_than <= cluster_settings.RETENTION_MAX_MS / 1000:
                raise InvalidRequest(f"older_than must be 0 to {cluster_settings.RETENTION_MAX_MS // 1000} seconds")
            older_than_ms = round(older_than * 1000)
        if not 1 <= batch <= 10_000:
            raise InvalidRequest("batch must be 1 to 10000 tasks")
        now = now or self.now()
        plan = self.store.run_sync(retention.retention_plan, now=now, queue=queue, older_than_ms=older_than_ms)
        totals = dict.fromkeys(retention.TABLES, 0)
        queues: dict[str, Any] = {}
        for cut in plan:
            entry: dict[str, Any] = {"before": rfc3339(cut.before), "retention": cluster_settings.json_seconds(
                cut.retention_ms), "own_retention": cut.own}
            if dry_run:
                due = self.store.run_sync(retention.count_due, queue=cut.queue, before=cut.before)
                entry.update(due=due.tasks, held=due.held)
                totals["tasks"] += due.tasks
            else:
                entry.update(tasks=0, batches=0, held=0)
                after = None
                while True:
                    done = self.store.run_sync(retention.purge, queue=cut.queue, before=cut.before, limit=batch,
                                               after=after)
                    for table, count in done.deleted.items():
                        totals[table] += count
                    entry["tasks"] += done.tasks
                    entry["batches"] += 1 if done.tasks else 0
                    entry["held"] += done.held
                    if done.selected < batch:
                        break
                    after = done.last
            queues[cut.queue] = entry
        key = "due" if dry_run else "purged"
        return {"dry_run": dry_run, key: {"tasks": totals["tasks"]} if dry_run else totals, "queues": queues}

    # -- cluster settings ------------------------------------------------------------
    def settings(self) -> dict[str, dict[str, Any]]:
        """Every cluster setting by name: value (seconds), default, state, who set it and when."""
        return {name: row.as_json() for name, row in self.store.run_sync(stored_settings.read_all).items()}

    def fairness_weights(self) -> dict[str, dict[str, Any]]:
        """Every fairness key given a weight: weight, who set it and when (any other key weighs 1)."""
        return {key: {"fairness_key": key, "weight": row["weight"], "updated_by": row["updated_by"],
                      "updated_at": row["updated_at"].strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
                for key, row in self.store.run_sync(fairness.list_weights).items()}

    def set_fairness_weight(self, fairness_key: str, weight: int | str, *, updated_by: str,
                            now: dt.datetime | None = None) -> dict[str, Any]:
        """Give a fairness key a weight (1-10000; default 1), cluster-wide; tasks placed after it use it.

        Raises ``invalid_request`` for a malformed key or weight (nothing is written).
        """
        key, value = check_weight(fairness_key, weight)
        check_by("updated_by", updated_by)
        self.store.run_sync(fairness.set_weight, fairness_key=key, weight=value, now=now or self.now(),
                            updated_by=updated_by)
        return self.fairness_weights()[key]

    def set_settings(self, values: Mapping[str, str | float | int | None], *, updated_by: str,
                     now: dt.datetime | None = None) -> dict[str, dict[str, Any]]:
        """Change cluster settings in one transaction; values are seconds (text as on the command line).

        Raises ClientError: ``setting_not_found``, ``invalid_request`` (out of
        bounds) or ``setting_conflict`` (node_lapse under twice node_heartbeat).
        Running instances pick the change up within their refresh interval.
        """
        ms = parse_settings(values)
        check_by("updated_by", updated_by)
        result = self.store.run_sync(stored_settings.set_values, values=ms, now=now or self.now(),
                                     updated_by=updated_by)
        if isinstance(result, Refusal):
            raise ClientError(result.code, result.message)
        return {name: row.as_json() for name, row in result.after.items()}


def check_weight(fairness_key: str, weight: Any) -> tuple[str, int]:
    """A fairness key and its weight, checked: ``invalid_request`` otherwise, before anything is written."""
    if not isinstance(fairness_key, str) or not is_fairness_key(fairness_key):
        raise InvalidRequest("a fairness key is 1-128 printable ASCII characters")
    try:
        value = (ranges.FAIRNESS_WEIGHT.check_text(weight) if isinstance(weight, str)
                 else ranges.FAIRNESS_WEIGHT.check(weight))
    except ranges.OutOfRange as exc:
        raise InvalidRequest(str(exc)) from None
    return fairness_key, int(value)


#: The direct client's name from before the HTTP clients; kept, so existing code keeps working.
Client = DatabaseClient


def parse_settings(values: Mapping[str, str | float | int | None]) -> dict[str, int | None]:
    """Names and values (seconds; text is parsed as on the command line) as checked milliseconds."""
    if not values:
        raise InvalidRequest("name at least one setting to change")
    parsed: dict[str, int | None] = {}
    for name, value in values.items():
        try:
            setting = cluster_settings.lookup(name)
            parsed[name] = setting.from_text(value) if isinstance(value, str) else setting.from_seconds(value)
        except cluster_settings.InvalidSetting as exc:
            raise ClientError(exc.code, exc.message) from None
    return parsed
