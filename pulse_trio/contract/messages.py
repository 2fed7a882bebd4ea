"""Typed messages of pulse.worker.v1: frozen, slotted, validated on creation.

One class per message type, plus the body value types they share. Values
are Python-native: counters are ``int`` (1..2**64-1), times are aware
``datetime``, results and payloads are canonical JSON text (``JsonText``,
a ``str``) so they are stored exactly. Construction enforces every rule of
the contract that a single message can show, so a message that exists can
be encoded, and ``InvalidMessage`` means a bug on the sending side.

Optional wire fields use their "absent" value here (``None``, ``False``,
``""``, priority ``0``); the encoder omits them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Literal, Union

from . import grammar as g
from . import limits as lim
from .errors import InvalidMessage
from .jsontext import JsonText, utf8_size
from .scanner import ScanError

Status = Literal["SUCCEEDED", "FAILED", "UNKNOWN", "CANCELLED"]
LeaseState = Literal["OFFERED", "RUNNING"]
LeaseCommand = Literal["task.start", "task.renew", "task.finish"]

STATUSES: frozenset[str] = frozenset(("SUCCEEDED", "FAILED", "UNKNOWN", "CANCELLED"))
LEASE_STATES: frozenset[str] = frozenset(("OFFERED", "RUNNING"))
LEASE_COMMANDS: frozenset[str] = frozenset(("task.start", "task.renew", "task.finish"))


# -- field checks: each raises InvalidMessage naming the field ---------------


def _need(ok: bool, field: str, reason: str) -> None:
    if not ok:
        raise InvalidMessage(field, reason)


def _str(value: object, field: str, rule, what: str) -> None:
    _need(isinstance(value, str) and rule(value), field, f"must be {what}, got {value!r:.80}")


def _id(value: object, field: str, prefix: str) -> None:
    _str(value, field, lambda v: g.is_resource_id(v, prefix), f"a {prefix}<ULID> id")


def _message_id(value: object, field: str) -> None:
    _str(value, field, g.is_message_id, "a message id")


def _secret(value: object, field: str) -> None:
    # Never echo a secret-like value into an error message.
    _need(isinstance(value, str) and g.is_secret(value), field, "must be a canonical 43-char secret")


def _counter(value: object, field: str) -> None:
    _need(g.is_counter(value), field, f"must be an int in 1..2**64-1, got {value!r:.40}")


def _int(value: object, field: str, low: int, high: int) -> None:
    ok = type(value) is int and low <= value <= high
    _need(ok, field, f"must be an int in {low}..{high}, got {value!r:.40}")


def _bool(value: object, field: str) -> None:
    _need(type(value) is bool, field, f"must be a bool, got {value!r:.40}")


def _time(value: object, field: str) -> None:
    ok = isinstance(value, datetime) and value.utcoffset() is not None
    _need(ok, field, f"must be a timezone-aware datetime, got {value!r:.60}")


def _json(obj: object, field: str, max_depth: int) -> None:
    value = getattr(obj, field)
    if type(value) is JsonText:
        return
    if not isinstance(value, str):
        raise InvalidMessage(field, "must be JSON text (str); see JsonText.from_value")
    try:
        object.__setattr__(obj, field, JsonText.parse(value, max_depth=max_depth))
    except ScanError as exc:
        raise InvalidMessage(field, f"not strict JSON: {exc}") from None


def _tuple(obj: object, field: str) -> tuple:
    value = getattr(obj, field)
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise InvalidMessage(field, "must be a sequence")
    value = tuple(value)
    object.__setattr__(obj, field, value)
    return value


# -- body value types --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Subscription:
    queue: str
    kinds: tuple[str, ...] | None = None  # None: every kind of the queue

    def __post_init__(self) -> None:
        _str(self.queue, "queue", g.is_queue, "a queue name")
        if self.kinds is not None:
            kinds = _tuple(self, "kinds")
            _need(0 < len(kinds) <= lim.MAX_KINDS, "kinds", f"must hold 1..{lim.MAX_KINDS} kinds")
            for i, kind in enumerate(kinds):
                _str(kind, f"kinds[{i}]", g.is_kind, "a kind name")
            _need(len(set(kinds)) == len(kinds), "kinds", "must not repeat a kind")


@dataclass(frozen=True, slots=True)
class ClientInfo:
    name: str
    version: str

    def __post_init__(self) -> None:
        for field in ("name", "version"):
            _str(getattr(self, field), field, lambda v: g.is_label(v, lim.MAX_LABEL_CHARS), "1..128 printable chars")


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_frame_bytes: int = lim.MAX_FRAME_BYTES
    max_result_bytes: int = lim.MAX_RESULT_BYTES

    def __post_init__(self) -> None:
        _int(self.max_frame_bytes, "max_frame_bytes", 1, lim.MAX_INT32)
        _int(self.max_result_bytes, "max_result_bytes", 1, lim.MAX_INT32)


@dataclass(frozen=True, slots=True)
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
    instance_secret: str | None = None
    sequence: int | None = None  # None until a capacity frame was applied

    def __post_init__(self) -> None:
        _id(self.instance_id, "instance_id", g.INSTANCE_PREFIX)
        _counter(self.epoch, "epoch")
        _int(self.capacity, "capacity", 0, lim.MAX_CAPACITY)
        _bool(self.drain, "drain")
        _int(self.active_leases, "active_leases", 0, lim.MAX_INT32)
        _int(self.lease_ttl_ms, "lease_ttl_ms", 1, lim.MAX_INT32)
        _int(self.start_timeout_ms, "start_timeout_ms", 1, lim.MAX_INT32)
        _need(isinstance(self.limits, ServerLimits), "limits", "must be ServerLimits")
        _time(self.server_time, "server_time")
        if self.instance_secret is not None:
            _secret(self.instance_secret, "instance_secret")
        if self.sequence is not None:
            _counter(self.sequence, "sequence")


@dataclass(frozen=True, slots=True)
class Lease:
    """An execution right; ``lease_secret`` only in task.assign."""

    lease_id: str
    task_id: str
    revision: int
    epoch: int
    state: LeaseState
    expires_at: datetime
    lease_secret: str | None = None
    cancel_requested_at: datetime | None = None

    def __post_init__(self) -> None:
        _id(self.lease_id, "lease_id", g.LEASE_PREFIX)
        _id(self.task_id, "task_id", g.TASK_PREFIX)
        _counter(self.revision, "revision")
        _counter(self.epoch, "epoch")
        _need(self.state in LEASE_STATES, "state", f"must be OFFERED or RUNNING, got {self.state!r:.40}")
        _time(self.expires_at, "expires_at")
        if self.lease_secret is not None:
            _secret(self.lease_secret, "lease_secret")
        if self.cancel_requested_at is not None:
            _time(self.cancel_requested_at, "cancel_requested_at")


@dataclass(frozen=True, slots=True)
class Receipt:
    """The durable record of a committed lease command (never a right to run)."""

    command: LeaseCommand
    task_id: str
    lease_id: str
    revision: int
    committed_at: datetime
    duplicate: bool

    def __post_init__(self) -> None:
        _need(self.command in LEASE_COMMANDS, "command", f"must be a lease command, got {self.command!r:.40}")
        _id(self.task_id, "task_id", g.TASK_PREFIX)
        _id(self.lease_id, "lease_id", g.LEASE_PREFIX)
        _counter(self.revision, "revision")
        _time(self.committed_at, "committed_at")
        _bool(self.duplicate, "duplicate")


@dataclass(frozen=True, slots=True)
class CommandResult:
    receipt: Receipt
    lease: Lease | None = None  # None once the caller holds no execution right

    def __post_init__(self) -> None:
        _need(isinstance(self.receipt, Receipt), "receipt", "must be a Receipt")
        if self.lease is not None:
            _need(isinstance(self.lease, Lease), "lease", "must be a Lease")
            _need(self.lease.lease_secret is None, "lease.lease_secret", "is only sent in task.assign")


@dataclass(frozen=True, slots=True)
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
        _id(self.task_id, "task_id", g.TASK_PREFIX)
        _str(self.queue, "queue", g.is_queue, "a queue name")
        _str(self.kind, "kind", g.is_kind, "a kind name")
        _json(self, "payload", lim.MAX_PAYLOAD_DEPTH)
        _int(self.attempt, "attempt", 1, lim.MAX_INT32)
        _int(self.max_attempts, "max_attempts", 1, lim.MAX_INT32)
        _str(self.idempotency_key, "idempotency_key",
             lambda v: v != "" and g.is_text(v, lim.MAX_IDEMPOTENCY_KEY_CHARS), "1..255 chars")
        _time(self.created_at, "created_at")
        _time(self.due_at, "due_at")
        _int(self.priority, "priority", lim.MIN_PRIORITY, lim.MAX_PRIORITY)
        _need((self.concurrency_key is None) == (self.concurrency_token is None),
              "concurrency_key", "concurrency_key and concurrency_token come together")
        if self.concurrency_key is not None:
            _str(self.concurrency_key, "concurrency_key", g.is_concurrency_key, "1..128 printable ASCII chars")
            _counter(self.concurrency_token, "concurrency_token")
        _bool(self.effect_uncertain, "effect_uncertain")
        if self.retry_of is not None:
            _id(self.retry_of, "retry_of", g.TASK_PREFIX)
            _need(self.retry_of != self.task_id, "retry_of", "must not be the task's own id")


# -- client → server ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkerHello:
    TYPE: ClassVar[str] = "worker.hello"
    id: str
    worker_name: str
    subscriptions: tuple[Subscription, ...]
    cancellation_notifications: bool = False
    concurrency_keys: bool = False
    client: ClientInfo | None = None

    def __post_init__(self) -> None:
        _message_id(self.id, "id")
        _str(self.worker_name, "worker_name", lambda v: g.is_label(v, lim.MAX_LABEL_CHARS), "1..128 printable chars")
        subs = _tuple(self, "subscriptions")
        _need(0 < len(subs) <= lim.MAX_SUBSCRIPTIONS, "subscriptions",
              f"must hold 1..{lim.MAX_SUBSCRIPTIONS} subscriptions")
        for i, sub in enumerate(subs):
            _need(isinstance(sub, Subscription), f"subscriptions[{i}]", "must be a Subscription")
        _need(len({sub.queue for sub in subs}) == len(subs), "subscriptions", "must not repeat a queue")
        _bool(self.cancellation_notifications, "cancellation_notifications")
        _bool(self.concurrency_keys, "concurrency_keys")
        if self.client is not None:
            _need(isinstance(self.client, ClientInfo), "client", "must be a ClientInfo")


@dataclass(frozen=True, slots=True)
class WorkerCapacity:
    TYPE: ClassVar[str] = "worker.capacity"
    id: str
    session_id: str
    sequence: int
    capacity: int
    drain: bool

    def __post_init__(self) -> None:
        _message_id(self.id, "id")
        _id(self.session_id, "session_id", g.SESSION_PREFIX)
        _counter(self.sequence, "sequence")
        _int(self.capacity, "capacity", 0, lim.MAX_CAPACITY)
        _bool(self.drain, "drain")


@dataclass(frozen=True, slots=True)
class WorkerResume:
    TYPE: ClassVar[str] = "worker.resume"
    id: str
    session_id: str
    instance_id: str
    instance_secret: str
    task_id: str
    lease_id: str
    lease_secret: str

    def __post_init__(self) -> None:
        _message_id(self.id, "id")
        _id(self.session_id, "session_id", g.SESSION_PREFIX)
        _id(self.instance_id, "instance_id", g.INSTANCE_PREFIX)
        _secret(self.instance_secret, "instance_secret")
        _id(self.task_id, "task_id", g.TASK_PREFIX)
        _id(self.lease_id, "lease_id", g.LEASE_PREFIX)
        _secret(self.lease_secret, "lease_secret")


def _lease_command(msg) -> None:
    _message_id(msg.id, "id")
    _id(msg.session_id, "session_id", g.SESSION_PREFIX)
    _id(msg.task_id, "task_id", g.TASK_PREFIX)
    _id(msg.lease_id, "lease_id", g.LEASE_PREFIX)
    _secret(msg.lease_secret, "lease_secret")
    _counter(msg.revision, "revision")


@dataclass(frozen=True, slots=True)
class TaskStart:
    TYPE: ClassVar[str] = "task.start"
    id: str
    session_id: str
    task_id: str
    lease_id: str
    lease_secret: str
    revision: int

    __post_init__ = _lease_command


@dataclass(frozen=True, slots=True)
class TaskRenew:
    TYPE: ClassVar[str] = "task.renew"
    id: str
    session_id: str
    task_id: str
    lease_id: str
    lease_secret: str
    revision: int

    __post_init__ = _lease_command


@dataclass(frozen=True, slots=True)
class TaskFinish:
    TYPE: ClassVar[str] = "task.finish"
    id: str
    session_id: str
    task_id: str
    lease_id: str
    lease_secret: str
    revision: int
    status: Status
    result: str  # canonical JSON text (JsonText), never null
    error_code: str = ""
    error_message: str = ""
    retryable: bool = False

    def __post_init__(self) -> None:
        _lease_command(self)
        _need(self.status in STATUSES, "status", f"must be one of {sorted(STATUSES)}, got {self.status!r:.40}")
        _json(self, "result", lim.MAX_RESULT_DEPTH)
        _need(self.result != "null", "result", "must not be null")
        _need(utf8_size(self.result) <= lim.MAX_RESULT_BYTES, "result",
              f"must be at most {lim.MAX_RESULT_BYTES} bytes of UTF-8")
        if self.status == "SUCCEEDED":
            _need(self.error_code == "", "error_code", "must be empty when SUCCEEDED")
        else:
            _str(self.error_code, "error_code", g.is_error_code, f"a non-empty error code when {self.status}")
        _str(self.error_message, "error_message",
             lambda v: g.is_text(v, lim.MAX_ERROR_MESSAGE_CHARS), "at most 4096 chars")
        _bool(self.retryable, "retryable")
        _need(not self.retryable or self.status == "FAILED", "retryable", "may be true only when FAILED")


# -- server → client ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkerWelcome:
    TYPE: ClassVar[str] = "worker.welcome"
    id: str
    session_id: str
    reply_to: str
    body: Welcome

    def __post_init__(self) -> None:
        _server_envelope(self)
        _need(isinstance(self.body, Welcome), "body", "must be a Welcome")
        _need(self.body.instance_secret is not None, "body.instance_secret", "is required in worker.welcome")


@dataclass(frozen=True, slots=True)
class TaskAssign:
    TYPE: ClassVar[str] = "task.assign"
    id: str
    session_id: str
    task: AssignedTask
    lease: Lease

    def __post_init__(self) -> None:
        _server_envelope(self)
        _need(isinstance(self.task, AssignedTask), "task", "must be an AssignedTask")
        _need(isinstance(self.lease, Lease), "lease", "must be a Lease")
        _need(self.lease.lease_secret is not None, "lease.lease_secret", "is required in task.assign")
        _need(self.lease.state == "OFFERED", "lease.state", "an assignment is an OFFERED lease")
        _need(self.lease.task_id == self.task.task_id, "lease.task_id", "must equal task.task_id")


@dataclass(frozen=True, slots=True)
class TaskCancel:
    TYPE: ClassVar[str] = "task.cancel"
    id: str
    session_id: str
    task_id: str
    lease_id: str
    cancel_requested_at: datetime
    grace_expires_at: datetime
    reason: str | None = None

    def __post_init__(self) -> None:
        _server_envelope(self)
        _id(self.task_id, "task_id", g.TASK_PREFIX)
        _id(self.lease_id, "lease_id", g.LEASE_PREFIX)
        _time(self.cancel_requested_at, "cancel_requested_at")
        _time(self.grace_expires_at, "grace_expires_at")
        if self.reason is not None:
            _str(self.reason, "reason", lambda v: g.is_text(v, lim.MAX_REASON_CHARS), "at most 1024 chars")


AckBody = Union[Welcome, Lease, CommandResult]


@dataclass(frozen=True, slots=True)
class Ack:
    TYPE: ClassVar[str] = "ack"
    id: str
    session_id: str
    reply_to: str
    body: AckBody

    def __post_init__(self) -> None:
        _server_envelope(self)
        body = self.body
        _need(isinstance(body, (Welcome, Lease, CommandResult)), "body",
              "must be a Welcome, Lease or CommandResult")
        if isinstance(body, Welcome):
            _need(body.instance_secret is None, "body.instance_secret", "is only sent in worker.welcome")
        if isinstance(body, Lease):
            _need(body.lease_secret is None, "body.lease_secret", "is only sent in task.assign")


@dataclass(frozen=True, slots=True)
class Error:
    TYPE: ClassVar[str] = "error"
    id: str
    code: str
    message: str
    fatal: bool
    retry_after_ms: int | None = None
    session_id: str | None = None  # None only when registration is refused
    reply_to: str | None = None  # None for invalid_json, timeouts, shutdown

    def __post_init__(self) -> None:
        _server_envelope(self)
        _str(self.code, "code", g.is_error_code, "an error code")
        _str(self.message, "message", lambda v: g.is_text(v, lim.MAX_ERROR_MESSAGE_CHARS), "at most 4096 chars")
        _bool(self.fatal, "fatal")
        if self.retry_after_ms is not None:
            _int(self.retry_after_ms, "retry_after_ms", 0, lim.MAX_INT32)


def _server_envelope(msg) -> None:
    _message_id(msg.id, "id")
    if msg.session_id is not None or not isinstance(msg, Error):
        _id(msg.session_id, "session_id", g.SESSION_PREFIX)
    reply_to = getattr(msg, "reply_to", None)
    if reply_to is not None or isinstance(msg, (WorkerWelcome, Ack)):
        _message_id(reply_to, "reply_to")


ClientMessage = Union[WorkerHello, WorkerCapacity, WorkerResume, TaskStart, TaskRenew, TaskFinish]
ServerMessage = Union[WorkerWelcome, TaskAssign, TaskCancel, Ack, Error]
Message = Union[ClientMessage, ServerMessage]

CLIENT_TYPES: dict[str, type] = {
    cls.TYPE: cls for cls in (WorkerHello, WorkerCapacity, WorkerResume, TaskStart, TaskRenew, TaskFinish)
}
SERVER_TYPES: dict[str, type] = {cls.TYPE: cls for cls in (WorkerWelcome, TaskAssign, TaskCancel, Ack, Error)}

#: Which ack body answers which request (only the pending-request table knows).
ACK_BODY_FOR: dict[str, type] = {
    "worker.capacity": Welcome,
    "worker.resume": Lease,
    "task.start": CommandResult,
    "task.renew": CommandResult,
    "task.finish": CommandResult,
}
