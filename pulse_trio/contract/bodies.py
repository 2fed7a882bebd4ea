"""Body value types shared by several messages (welcome, lease, receipt, ...).

Frozen, slotted, validated on creation like the messages that carry them.
Optional wire fields use their "absent" value here (``None``, ``False``,
priority ``0``); the encoder omits them.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Literal

from . import _checks as c
from . import grammar as g
from . import limits as lim
from .frozen import frozen

Status = Literal["SUCCEEDED", "FAILED", "UNKNOWN", "CANCELLED"]
LeaseState = Literal["OFFERED", "RUNNING"]
LeaseCommandName = Literal["task.start", "task.renew", "task.finish"]

STATUSES: frozenset[str] = frozenset(("SUCCEEDED", "FAILED", "UNKNOWN", "CANCELLED"))
LEASE_STATES: frozenset[str] = frozenset(("OFFERED", "RUNNING"))
LEASE_COMMANDS: frozenset[str] = frozenset(("task.start", "task.renew", "task.finish"))


@frozen
class Subscription:
    queue: str
    kinds: tuple[str, ...] | None = None  # None: every kind of the queue

    def __post_init__(self) -> None:
        c.string(self.queue, "queue", g.is_queue, "a queue name")
        if self.kinds is not None:
            kinds = c.sequence(self, "kinds")
            c.need(0 < len(kinds) <= lim.MAX_KINDS, "kinds", "must hold 1..64 kinds")
            for i, kind in enumerate(kinds):
                c.string(kind, f"kinds[{i}]", g.is_kind, "a kind name")
            c.need(len(set(kinds)) == len(kinds), "kinds", "must not repeat a kind")


@frozen
class ClientInfo:
    name: str
    version: str

    def __post_init__(self) -> None:
        c.label(self.name, "name", lim.MAX_LABEL_CHARS)
        c.label(self.version, "version", lim.MAX_LABEL_CHARS)


@frozen
class ServerLimits:
    max_frame_bytes: int = lim.MAX_FRAME_BYTES
    max_result_bytes: int = lim.MAX_RESULT_BYTES

    def __post_init__(self) -> None:
        c.integer(self.max_frame_bytes, "max_frame_bytes", 1, lim.MAX_INT32)
        c.integer(self.max_result_bytes, "max_result_bytes", 1, lim.MAX_INT32)


@frozen
class Welcome:
    """The session's registration state; ``instance_secret`` only in worker.welcome."""

    instance_id: str
    epoch: int
    capacity: int
    drain: bool
    active_leases: int
    lease_ttl_ms: int
    start_timeout_ms: int
    limits: ServerLimits
    server_time: datetime
    instance_secret: str | None = dataclasses.field(default=None, repr=False)  # no repr shows a secret
    sequence: int | None = None  # None until a capacity frame was applied

    def __post_init__(self) -> None:
        c.resource_id(self.instance_id, "instance_id", g.INSTANCE_PREFIX)
        c.counter(self.epoch, "epoch")
        c.integer(self.capacity, "capacity", 0, lim.MAX_CAPACITY)
        c.boolean(self.drain, "drain")
        c.integer(self.active_leases, "active_leases", 0, lim.MAX_INT32)
        c.integer(self.lease_ttl_ms, "lease_ttl_ms", 1, lim.MAX_INT32)
        c.integer(self.start_timeout_ms, "start_timeout_ms", 1, lim.MAX_INT32)
        c.need(isinstance(self.limits, ServerLimits), "limits", "must be ServerLimits")
        c.aware(self.server_time, "server_time")
        if self.instance_secret is not None:
            c.secret(self.instance_secret, "instance_secret")
        if self.sequence is not None:
            c.counter(self.sequence, "sequence")


@frozen
class Lease:
    """An execution right; ``lease_secret`` only in task.assign."""

    lease_id: str
    task_id: str
    revision: int
    epoch: int
    state: LeaseState
    expires_at: datetime
    lease_secret: str | None = dataclasses.field(default=None, repr=False)
    cancel_requested_at: datetime | None = None

    def __post_init__(self) -> None:
        c.resource_id(self.lease_id, "lease_id", g.LEASE_PREFIX)
        c.resource_id(self.task_id, "task_id", g.TASK_PREFIX)
        c.counter(self.revision, "revision")
        c.counter(self.epoch, "epoch")
        c.one_of(self.state, "state", LEASE_STATES)
        c.aware(self.expires_at, "expires_at")
        if self.lease_secret is not None:
            c.secret(self.lease_secret, "lease_secret")
        if self.cancel_requested_at is not None:
            c.aware(self.cancel_requested_at, "cancel_requested_at")


@frozen
class Receipt:
    """The durable record of a committed lease command (never a right to run)."""

    command: LeaseCommandName
    task_id: str
    lease_id: str
    revision: int
    committed_at: datetime
    duplicate: bool

    def __post_init__(self) -> None:
        c.one_of(self.command, "command", LEASE_COMMANDS)
        c.resource_id(self.task_id, "task_id", g.TASK_PREFIX)
        c.resource_id(self.lease_id, "lease_id", g.LEASE_PREFIX)
        c.counter(self.revision, "revision")
        c.aware(self.committed_at, "committed_at")
        c.boolean(self.duplicate, "duplicate")


@frozen
class CommandResult:
    receipt: Receipt
    lease: Lease | None = None  # None once the caller holds no execution right

    def __post_init__(self) -> None:
        c.need(isinstance(self.receipt, Receipt), "receipt", "must be a Receipt")
        if self.lease is not None:
            c.need(isinstance(self.lease, Lease), "lease", "must be a Lease")
            c.need(self.lease.lease_secret is None, "lease.lease_secret", "is only sent in task.assign")


@frozen
class AssignedTask:
    task_id: str
    queue: str
    kind: str
    payload: str  # canonical JSON text (JsonText), any value including null
    attempt: int
    max_attempts: int
    idempotency_key: str
    created_at: datetime
    due_at: datetime
    priority: int = 0  # 0 is the default and is omitted on the wire
    concurrency_key: str | None = None
    concurrency_token: int | None = None
    effect_uncertain: bool = False
    retry_of: str | None = None

    def __post_init__(self) -> None:
        c.resource_id(self.task_id, "task_id", g.TASK_PREFIX)
        c.string(self.queue, "queue", g.is_queue, "a queue name")
        c.string(self.kind, "kind", g.is_kind, "a kind name")
        c.json_text(self, "payload", lim.MAX_PAYLOAD_DEPTH)
        c.integer(self.attempt, "attempt", 1, lim.MAX_INT32)
        c.integer(self.max_attempts, "max_attempts", 1, lim.MAX_INT32)
        c.text(self.idempotency_key, "idempotency_key", lim.MAX_IDEMPOTENCY_KEY_CHARS, empty=False)
        c.aware(self.created_at, "created_at")
        c.aware(self.due_at, "due_at")
        c.integer(self.priority, "priority", lim.MIN_PRIORITY, lim.MAX_PRIORITY)
        paired = (self.concurrency_key is None) == (self.concurrency_token is None)
        c.need(paired, "concurrency_key", "concurrency_key and concurrency_token come together")
        if self.concurrency_key is not None:
            c.string(self.concurrency_key, "concurrency_key", g.is_concurrency_key, "1..128 chars of [!-~]")
            c.counter(self.concurrency_token, "concurrency_token")
        c.boolean(self.effect_uncertain, "effect_uncertain")
        if self.retry_of is not None:
            c.resource_id(self.retry_of, "retry_of", g.TASK_PREFIX)
            c.need(self.retry_of != self.task_id, "retry_of", "must not be the task's own id")
