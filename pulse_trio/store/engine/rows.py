"""Rows as read under lock: column lists and frozen row objects.

Each row class knows its SELECT column list, so a query and the object it
fills cannot drift apart. Times are converted to aware UTC on the way in.
"""

from __future__ import annotations

import dataclasses
import functools
import datetime as dt
import json
from collections.abc import Callable
from typing import Any, ClassVar

from pulse_trio.charts import CHARTS
from pulse_trio.charts.states import LIVE_LEASE_STATES, STARTED_LEASE_STATE, TERMINAL_TASK_STATES, public_state
from pulse_trio.contract.frozen import frozen
from pulse_trio.contract.trusted import compile_slot_builder
from pulse_trio.schedule_timing import Timing
from pulse_trio.store.engine.tx import aware_utc, py_time, rfc3339

# What lease commands, timers and cancellation never read: the (up to
# 256 KiB) payload, the outcome and the bookkeeping times. Every column
# costs PyMySQL a field descriptor per statement and a decode per row.
_NOT_LEAN = frozenset({"payload", "idempotency_key", "retry_of", "created_at", "updated_at", "finished_at",
                       "outcome_status", "outcome_error_code", "outcome_error_message", "outcome_retryable",
                       "outcome_uncertain", "outcome_attempt", "fairness_key"})


#: ``tasks.pick_state`` of a READY unkeyed task (the task's own state name), and
#: ``tasks.key_pick`` of a READY keyed task that is not set aside.
UNKEYED_READY = "READY"
#: ``tasks.pick_state`` of a READY task set aside because its key is at its
#: limit (task.wait_for_key, migration 0011): outside the ranges claims read,
#: counted as READY everywhere else.
KEY_WAIT = "KEY_WAIT"
#: ``tasks.pick_state`` of a READY keyed task (migration 0014): the range only
#: sessions that declared concurrency_keys read; ``READY`` holds the unkeyed.
KEYED = "KEYED"
#: The pick_state values of READY tasks, and what each counts as: the task's state.
READY_PICKS: dict[str, str] = {UNKEYED_READY: "READY", KEYED: "READY", KEY_WAIT: "READY"}


def _columns(prefix: str, names: tuple[str, ...]) -> str:
    return ", ".join(f"{prefix}.{n}" for n in names)


@frozen
class TaskRow:
    task_id: str
    queue: str
    kind: str
    state: str
    payload: str
    priority: int
    priority_offset_ms: int
    due_at: dt.datetime
    effective_at: dt.datetime
    idempotency_key: str
    concurrency_key: str | None
    concurrency_limit: int
    fairness_key: str | None
    max_attempts: int
    backoff_initial_ms: int
    backoff_factor: float
    backoff_max_ms: int
    retry_uncertain: bool
    lease_ttl_ms: int | None
    attempt: int
    effect_uncertain: bool
    retry_of: str | None
    created_at: dt.datetime
    updated_at: dt.datetime
    finished_at: dt.datetime | None
    outcome_status: str | None
    outcome_error_code: str | None
    outcome_error_message: str | None
    outcome_retryable: bool | None
    outcome_uncertain: bool | None
    outcome_attempt: int | None

    NAMES: ClassVar[tuple[str, ...]] = ()
    _TIMES: ClassVar[frozenset[str]] = frozenset({"due_at", "effective_at", "created_at", "updated_at", "finished_at"})
    _BOOLS: ClassVar[frozenset[str]] = frozenset({"retry_uncertain", "effect_uncertain", "outcome_retryable",
                                                  "outcome_uncertain"})

    @classmethod
    def columns(cls, prefix: str = "t", *, lean: bool = False) -> str:
        """The SELECT list; ``lean`` only what lease commands and timers read (fill with :meth:`from_lean_row`)."""
        return (TASK_LEAN if lean else TASK_FULL).columns(prefix)

    @classmethod
    def from_row(cls, row: tuple) -> TaskRow:
        return TASK_FULL.build(row)

    @classmethod
    def from_lean_row(cls, row: tuple) -> TaskRow:
        """A row read with ``columns(lean=True)``: the columns not read are None."""
        return TASK_LEAN.build(row)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_TASK_STATES

    def seen_with(self, live_lease_state: str | None, live_lease_attempt: int | None) -> TaskRow:
        """This task as a reader sees it, given its live lease (if any).

        A start writes its lease alone: the row stays in its held state
        (OFFERED) and its attempt at the last one ended, so a task whose
        live lease is RUNNING is RUNNING at that lease's attempt.
        """
        state = public_state(self.state, live_lease_state)
        if state == self.state:
            return self
        return dataclasses.replace(self, state=state,
                                   attempt=live_lease_attempt if state == STARTED_LEASE_STATE else self.attempt)


@frozen
class LeaseRow:
    lease_id: str
    task_id: str
    secret_digest: bytes
    state: str
    revision: int
    attempt: int
    owner_instance_id: str
    owner_session_id: str
    epoch: int
    expires_at: dt.datetime
    ttl_ms: int
    effect_uncertain: bool
    concurrency_token: int | None
    cancel_requested_at: dt.datetime | None
    cancel_deadline: dt.datetime | None
    offered_at: dt.datetime
    started_at: dt.datetime | None
    ended_at: dt.datetime | None
    # The receipts of start and finish live in the row (renewals have rows of
    # their own): the revision task.start carried, and the finish's content digest.
    start_revision: int | None
    finish_digest: bytes | None

    NAMES: ClassVar[tuple[str, ...]] = ()
    _TIMES: ClassVar[frozenset[str]] = frozenset({"expires_at", "cancel_requested_at", "cancel_deadline",
                                                  "offered_at", "started_at", "ended_at"})
    _BOOLS: ClassVar[frozenset[str]] = frozenset({"effect_uncertain"})

    @classmethod
    def columns(cls, prefix: str = "l") -> str:
        return LEASE_FULL.columns(prefix)

    @classmethod
    def from_row(cls, row: tuple) -> LeaseRow:
        return LEASE_FULL.build(row)

    @property
    def live(self) -> bool:
        return self.state in LIVE_LEASE_STATES


@frozen
class InstanceRow:
    instance_id: str
    session_id: str
    epoch: int
    secret_digest: bytes
    state: str
    worker_name: str
    subscriptions: str
    cancellation_notifications: bool
    concurrency_keys: bool
    capacity: int
    sequence: int | None
    registered_at: dt.datetime
    operator_drained_at: dt.datetime | None
    node_id: str | None  # the serve process holding the session (chart node)

    NAMES: ClassVar[tuple[str, ...]] = ()
    _TIMES: ClassVar[frozenset[str]] = frozenset({"registered_at", "operator_drained_at"})
    _BOOLS: ClassVar[frozenset[str]] = frozenset({"cancellation_notifications", "concurrency_keys"})

    @classmethod
    def columns(cls, prefix: str = "i") -> str:
        return _columns(prefix, cls.NAMES)

    @classmethod
    def from_row(cls, row: tuple) -> InstanceRow:
        return INSTANCE_FULL.build(row)

    def subscription_map(self) -> dict[str, frozenset[str] | None]:
        """queue -> kinds (None: every kind)."""
        return _parse_subscriptions(self.subscriptions)

    def subscribes(self, queue: str, kind: str) -> bool:
        subs = self.subscription_map()
        if queue not in subs:
            return False
        kinds = subs[queue]
        return kinds is None or kind in kinds


@frozen
class NodeRow:
    """One serve process (chart ``node``)."""

    node_id: str
    state: str
    host: str
    pid: int
    lapse_ms: int
    started_at: dt.datetime
    heartbeat_at: dt.datetime
    expires_at: dt.datetime | None
    lost_at: dt.datetime | None
    lost_by: str | None
    stopped_at: dt.datetime | None

    NAMES: ClassVar[tuple[str, ...]] = ()
    _TIMES: ClassVar[frozenset[str]] = frozenset({"started_at", "heartbeat_at", "expires_at", "lost_at",
                                                  "stopped_at"})

    @classmethod
    def columns(cls, prefix: str = "n") -> str:
        return _columns(prefix, cls.NAMES)

    @classmethod
    def from_row(cls, row: tuple) -> NodeRow:
        return NODE_FULL.build(row)


@functools.lru_cache(maxsize=4096)
def _parse_subscriptions(text: str) -> dict[str, frozenset[str] | None]:
    return {s["queue"]: (None if s.get("kinds") is None else frozenset(s["kinds"])) for s in json.loads(text)}


class RowShape:
    """Some of a row class's columns: their SELECT list, and a row object built from them.

    A query reads only the columns its callers use (each costs PyMySQL a
    field descriptor per statement and a decode per row); the fields not
    read are None. The conversions (aware UTC times, booleans) are worked
    out once per shape, not per value.

    Row objects are built without the dataclass ``__init__``: a frozen
    dataclass sets each field through ``object.__setattr__``, and claims and
    lease commands build many rows per task. Each shape compiles one
    function that sets the slots it read through their descriptors, one
    call per column; the slots it did not read stay unset, and the row
    classes answer None for them (:func:`_unread_is_none`), so a narrow
    shape costs its own columns, not the class's. The object is as frozen
    afterwards.
    """

    def __init__(self, cls: type, names: tuple[str, ...]) -> None:
        unknown = set(names) - set(cls.NAMES)
        if unknown:
            raise ValueError(f"{cls.__name__} has no columns {sorted(unknown)}")
        self.cls = cls
        self.names = names
        self.width = len(names)
        self.build: Callable[[tuple | list], Any] = _compile_build(cls, names)

    def columns(self, prefix: str) -> str:
        return _columns(prefix, self.names)


def _compile_build(cls: type, names: tuple[str, ...]) -> Callable[[tuple | list], Any]:
    """``build(row) -> cls``: one descriptor call per column read, times made aware and flags bool."""
    values: dict[str, str] = {}
    for i, name in enumerate(names):
        value = f"row[{i}]"
        if name in cls._TIMES:
            value = f"None if {value} is None else aware_utc({value})"
        elif name in getattr(cls, "_BOOLS", ()):
            value = f"None if {value} is None else bool({value})"
        values[name] = value
    check = (f"if len(row) != {len(names)}: raise ValueError(f'{{len(row)}} values for {len(names)} columns')")
    return compile_slot_builder(cls, "row", values, label="row shape", check=check,
                                scope={"aware_utc": aware_utc, "bool": bool})


def _unread_is_none(self: Any, name: str) -> None:
    """A column the row's shape did not read: None, as if read as NULL (called only for unset slots)."""
    if name in type(self).NAMES:
        return None
    raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def _field_names(cls) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


TaskRow.NAMES = _field_names(TaskRow)
LeaseRow.NAMES = _field_names(LeaseRow)
InstanceRow.NAMES = _field_names(InstanceRow)
NodeRow.NAMES = _field_names(NodeRow)
for _row_class in (TaskRow, LeaseRow, InstanceRow, NodeRow):
    _row_class.__getattr__ = _unread_is_none

TASK_FULL = RowShape(TaskRow, TaskRow.NAMES)
TASK_LEAN = RowShape(TaskRow, tuple(n for n in TaskRow.NAMES if n not in _NOT_LEAN))
LEASE_FULL = RowShape(LeaseRow, LeaseRow.NAMES)
INSTANCE_FULL = RowShape(InstanceRow, InstanceRow.NAMES)
NODE_FULL = RowShape(NodeRow, NodeRow.NAMES)
#: What a lease command reads of its lease (a replay reads the receipt columns apart).
LEASE_COMMAND = RowShape(LeaseRow, (
    "lease_id", "task_id", "secret_digest", "state", "revision", "attempt", "owner_session_id", "epoch",
    "expires_at", "ttl_ms", "concurrency_token", "cancel_requested_at", "cancel_deadline", "started_at"))
#: What a lease command reads of its task: the state, what a finish needs for a retry, and what the
#: service's metrics label and time (queue, due_at, created_at).
TASK_COMMAND = RowShape(TaskRow, (
    "task_id", "state", "attempt", "max_attempts", "backoff_initial_ms", "backoff_factor", "backoff_max_ms",
    "priority_offset_ms", "queue", "due_at", "created_at"))
#: What a claim reads of a READY task: the assignment's fields, and the pick-up order.
TASK_PICKUP = RowShape(TaskRow, (
    "task_id", "queue", "kind", "state", "payload", "priority", "due_at", "effective_at", "idempotency_key",
    "concurrency_key", "concurrency_limit", "max_attempts", "lease_ttl_ms", "attempt", "effect_uncertain",
    "retry_of", "created_at"))
#: What the lean lease path knows of a lease without reading it (known_leases.KnownLease): enough for the
#: task and permit steps that follow its guarded UPDATE.
LEASE_KNOWN = RowShape(LeaseRow, ("lease_id", "task_id", "attempt", "concurrency_token"))
#: ... and of its task: the state the chart says it is in alongside the lease, and its attempt.
TASK_KNOWN = RowShape(TaskRow, ("task_id", "state", "attempt"))


#: The schedule states that fire (their next_fire_at is shown): ACTIVE.
_SCHEDULE_FIRING = frozenset(t.source for t in CHARTS["schedule"].transitions_for("fire"))


@frozen
class ScheduleRow:
    """A schedule row as read (``schedules`` reads and writes it)."""

    schedule_id: str
    name: str
    state: str
    queue: str
    kind: str
    payload: str
    priority: int
    max_attempts: int
    timing: Timing
    missed: str
    catch_up_limit: int
    next_fire_at: dt.datetime
    last_tick_at: dt.datetime | None
    last_task_id: str | None
    fired_ticks: int
    created_at: dt.datetime
    created_by: str
    updated_at: dt.datetime
    updated_by: str

    @classmethod
    def from_row(cls, r: tuple) -> ScheduleRow:
        return cls(r[0], r[1], r[2], r[3], r[4], r[5], int(r[6]), int(r[7]), Timing(r[8], r[9], r[10]), r[11],
                   int(r[12]), py_time(r[13]), py_time(r[14]), r[15], int(r[16]), py_time(r[17]), r[18],
                   py_time(r[19]), r[20])

    def as_json_text(self) -> str:
        """The schedule as JSON; the payload is its stored text, digit for digit."""
        stamp = lambda t: rfc3339(t) if t is not None else None  # noqa: E731
        fields: dict[str, Any] = {
            "schedule_id": self.schedule_id, "name": self.name, "state": self.state, "queue": self.queue,
            "kind": self.kind, **self.timing.as_json(), "missed": self.missed,
            "catch_up_limit": self.catch_up_limit if self.missed == "catch_up" else None,
            "priority": self.priority, "max_attempts": self.max_attempts,
            "next_fire_at": stamp(self.next_fire_at) if self.state in _SCHEDULE_FIRING else None,
            "last_tick_at": stamp(self.last_tick_at), "last_task_id": self.last_task_id,
            "fired_ticks": self.fired_ticks, "created_at": stamp(self.created_at), "created_by": self.created_by,
            "updated_at": stamp(self.updated_at), "updated_by": self.updated_by,
        }
        text = json.dumps(fields, ensure_ascii=False, separators=(",", ":"))
        return text[:-1] + ',"payload":' + self.payload + "}"

    def as_json(self) -> dict[str, Any]:
        return json.loads(self.as_json_text())
