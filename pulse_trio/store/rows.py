"""Rows as read under lock: column lists and frozen row objects.

Each row class knows its SELECT column list, so a query and the object it
fills cannot drift apart. Times are converted to aware UTC on the way in.
"""

from __future__ import annotations

import dataclasses
import functools
import datetime as dt
import json
from typing import ClassVar

from pulse_trio.store.tx import py_time

# What lease commands, timers and cancellation never read: the (up to
# 256 KiB) payload, the outcome and the bookkeeping times. Every column
# costs PyMySQL a field descriptor per statement and a decode per row.
_NOT_LEAN = frozenset({"payload", "idempotency_key", "retry_of", "created_at", "updated_at", "finished_at",
                       "outcome_status", "outcome_error_code", "outcome_error_message", "outcome_retryable",
                       "outcome_uncertain", "outcome_attempt"})
TERMINAL_TASK_STATES = frozenset({"SUCCEEDED", "FAILED", "UNKNOWN", "CANCELLED"})
LIVE_LEASE_STATES = ("OFFERED", "RUNNING")


def _columns(prefix: str, names: tuple[str, ...]) -> str:
    return ", ".join(f"{prefix}.{n}" for n in names)


@dataclasses.dataclass(frozen=True, slots=True)
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
    LEAN_NAMES: ClassVar[tuple[str, ...]] = ()
    _TIMES: ClassVar[frozenset[str]] = frozenset({"due_at", "effective_at", "created_at", "updated_at", "finished_at"})
    _BOOLS: ClassVar[frozenset[str]] = frozenset({"retry_uncertain", "effect_uncertain", "outcome_retryable",
                                                  "outcome_uncertain"})

    @classmethod
    def columns(cls, prefix: str = "t", *, lean: bool = False) -> str:
        """The SELECT list; ``lean`` only what lease commands and timers read (fill with :meth:`from_lean_row`)."""
        return _columns(prefix, cls.LEAN_NAMES if lean else cls.NAMES)

    @classmethod
    def from_row(cls, row: tuple) -> TaskRow:
        return cls(*_convert(cls.NAMES, row, cls._TIMES, cls._BOOLS))

    @classmethod
    def from_lean_row(cls, row: tuple) -> TaskRow:
        """A row read with ``columns(lean=True)``: the columns not read are None."""
        values = _convert(cls.LEAN_NAMES, row, cls._TIMES, cls._BOOLS)
        return cls(*[None if i is None else values[i] for i in _LEAN_POSITIONS])

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_TASK_STATES


@dataclasses.dataclass(frozen=True, slots=True)
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

    NAMES: ClassVar[tuple[str, ...]] = ()
    _TIMES: ClassVar[frozenset[str]] = frozenset({"expires_at", "cancel_requested_at", "cancel_deadline",
                                                  "offered_at", "started_at", "ended_at"})
    _BOOLS: ClassVar[frozenset[str]] = frozenset({"effect_uncertain"})

    @classmethod
    def columns(cls, prefix: str = "l") -> str:
        return _columns(prefix, cls.NAMES)

    @classmethod
    def from_row(cls, row: tuple) -> LeaseRow:
        return cls(*_convert(cls.NAMES, row, cls._TIMES, cls._BOOLS))

    @property
    def live(self) -> bool:
        return self.state in LIVE_LEASE_STATES


@dataclasses.dataclass(frozen=True, slots=True)
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
        return cls(*_convert(cls.NAMES, row, cls._TIMES, cls._BOOLS))

    def subscription_map(self) -> dict[str, frozenset[str] | None]:
        """queue -> kinds (None: every kind)."""
        return _parse_subscriptions(self.subscriptions)

    def subscribes(self, queue: str, kind: str) -> bool:
        subs = self.subscription_map()
        if queue not in subs:
            return False
        kinds = subs[queue]
        return kinds is None or kind in kinds


@dataclasses.dataclass(frozen=True, slots=True)
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
        return cls(*_convert(cls.NAMES, row, cls._TIMES, frozenset()))


@functools.lru_cache(maxsize=4096)
def _parse_subscriptions(text: str) -> dict[str, frozenset[str] | None]:
    return {s["queue"]: (None if s.get("kinds") is None else frozenset(s["kinds"])) for s in json.loads(text)}


def _convert(names, row, times, bools):
    out = []
    for name, value in zip(names, row, strict=True):
        if name in times:
            value = py_time(value)
        elif name in bools and value is not None:
            value = bool(value)
        out.append(value)
    return out


def _field_names(cls) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


TaskRow.NAMES = _field_names(TaskRow)
TaskRow.LEAN_NAMES = tuple(n for n in TaskRow.NAMES if n not in _NOT_LEAN)
_LEAN_POSITIONS = tuple(TaskRow.LEAN_NAMES.index(n) if n in TaskRow.LEAN_NAMES else None for n in TaskRow.NAMES)
LeaseRow.NAMES = _field_names(LeaseRow)
InstanceRow.NAMES = _field_names(InstanceRow)
NodeRow.NAMES = _field_names(NodeRow)
