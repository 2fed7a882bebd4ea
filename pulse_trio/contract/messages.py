"""Typed messages of pulse.worker.v1: frozen, slotted, validated on creation.

One class per message type. Values are Python-native: counters are ``int``
(1..2**64-1), times are aware ``datetime``, results and payloads are
canonical JSON text (``JsonText``, a ``str``) so they are stored exactly.
Construction enforces every rule a single message can show, so a message
that exists can be encoded, and ``InvalidMessage`` means a bug on the
sending side. Client messages carry their body fields flat; server messages
carry the shared body value types from ``bodies``.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import ClassVar, Union

from . import _checks as c
from . import grammar as g
from . import limits as lim
from .bodies import (
    LEASE_COMMANDS, LEASE_STATES, STATUSES, AssignedTask, ClientInfo, CommandResult, Lease, LeaseCommandName,
    LeaseState, Receipt, ServerLimits, Status, Subscription, Welcome,
)
from .errors import InvalidMessage
from .frozen import frozen
from .jsontext import utf8_size

__all__ = [
    "AssignedTask", "ClientInfo", "CommandResult", "Lease", "LeaseCommandName", "LeaseState", "Receipt",
    "ServerLimits", "Status", "Subscription", "Welcome", "LEASE_COMMANDS", "LEASE_STATES", "STATUSES",
    "WorkerHello", "WorkerCapacity", "WorkerResume", "TaskStart", "TaskRenew", "TaskFinish",
    "WorkerWelcome", "TaskAssign", "TaskCancel", "Ack", "Error", "AckBody",
    "ClientMessage", "ServerMessage", "Message", "CLIENT_TYPES", "SERVER_TYPES", "ACK_BODY_FOR", "check_outcome",
]


@frozen
class WorkerHello:
    TYPE: ClassVar[str] = "worker.hello"
    id: str
    worker_name: str
    subscriptions: tuple[Subscription, ...]
    cancellation_notifications: bool = False
    concurrency_keys: bool = False
    client: ClientInfo | None = None

    def __post_init__(self) -> None:
        c.message_id(self.id, "id")
        c.label(self.worker_name, "worker_name", lim.MAX_LABEL_CHARS)
        subs = c.sequence(self, "subscriptions")
        c.need(0 < len(subs) <= lim.MAX_SUBSCRIPTIONS, "subscriptions", "must hold 1..64 subscriptions")
        for i, sub in enumerate(subs):
            if not isinstance(sub, Subscription):
                raise InvalidMessage(f"subscriptions[{i}]", "must be a Subscription")
        c.need(len({sub.queue for sub in subs}) == len(subs), "subscriptions", "must not repeat a queue")
        c.boolean(self.cancellation_notifications, "cancellation_notifications")
        c.boolean(self.concurrency_keys, "concurrency_keys")
        if self.client is not None:
            c.need(isinstance(self.client, ClientInfo), "client", "must be a ClientInfo")


@frozen
class WorkerCapacity:
    TYPE: ClassVar[str] = "worker.capacity"
    id: str
    session_id: str
    sequence: int
    capacity: int
    drain: bool

    def __post_init__(self) -> None:
        c.message_id(self.id, "id")
        c.resource_id(self.session_id, "session_id", g.SESSION_PREFIX)
        c.counter(self.sequence, "sequence")
        c.integer(self.capacity, "capacity", 0, lim.MAX_CAPACITY)
        c.boolean(self.drain, "drain")


@frozen
class WorkerResume:
    TYPE: ClassVar[str] = "worker.resume"
    id: str
    session_id: str
    instance_id: str
    instance_secret: str = dataclasses.field(repr=False)  # no repr shows a secret
    task_id: str
    lease_id: str
    lease_secret: str = dataclasses.field(repr=False)

    def __post_init__(self) -> None:
        c.message_id(self.id, "id")
        c.resource_id(self.session_id, "session_id", g.SESSION_PREFIX)
        c.resource_id(self.instance_id, "instance_id", g.INSTANCE_PREFIX)
        c.secret(self.instance_secret, "instance_secret")
        c.resource_id(self.task_id, "task_id", g.TASK_PREFIX)
        c.resource_id(self.lease_id, "lease_id", g.LEASE_PREFIX)
        c.secret(self.lease_secret, "lease_secret")


def _lease_command(msg) -> None:
    c.message_id(msg.id, "id")
    c.resource_id(msg.session_id, "session_id", g.SESSION_PREFIX)
    c.resource_id(msg.task_id, "task_id", g.TASK_PREFIX)
    c.resource_id(msg.lease_id, "lease_id", g.LEASE_PREFIX)
    c.secret(msg.lease_secret, "lease_secret")
    c.counter(msg.revision, "revision")


@frozen
class TaskStart:
    TYPE: ClassVar[str] = "task.start"
    id: str
    session_id: str
    task_id: str
    lease_id: str
    lease_secret: str = dataclasses.field(repr=False)
    revision: int

    __post_init__ = _lease_command


@frozen
class TaskRenew:
    TYPE: ClassVar[str] = "task.renew"
    id: str
    session_id: str
    task_id: str
    lease_id: str
    lease_secret: str = dataclasses.field(repr=False)
    revision: int

    __post_init__ = _lease_command


@frozen
class TaskFinish:
    TYPE: ClassVar[str] = "task.finish"
    id: str
    session_id: str
    task_id: str
    lease_id: str
    lease_secret: str = dataclasses.field(repr=False)
    revision: int
    status: Status
    result: str  # canonical JSON text (JsonText), never null
    error_code: str = ""
    error_message: str = ""
    retryable: bool = False

    def __post_init__(self) -> None:
        _lease_command(self)
        c.one_of(self.status, "status", STATUSES)
        c.json_text(self, "result", lim.MAX_RESULT_DEPTH)
        c.need(self.result != "null", "result", "must not be null")
        c.need(utf8_size(self.result) <= lim.MAX_RESULT_BYTES, "result", "must be at most 262144 UTF-8 bytes")
        check_outcome(self.status, self.error_code, self.error_message, self.retryable)


def check_outcome(status: str, error_code: str, error_message: str, retryable: bool) -> None:
    """The finish rules besides the result's, owned here: the SDK's finish tail and the store's report ask this too.

    Raises ``InvalidMessage`` (a ``ValueError``). ``TaskFinish`` checks the
    status first, before its result, so the first fault a frame shows keeps
    its place.
    """
    c.one_of(status, "status", STATUSES)
    if status == "SUCCEEDED":
        c.need(error_code == "", "error_code", "must be empty when SUCCEEDED")
    else:
        c.string(error_code, "error_code", g.is_error_code, "a non-empty error code")
    c.text(error_message, "error_message", lim.MAX_ERROR_MESSAGE_CHARS)
    c.boolean(retryable, "retryable")
    c.need(not retryable or status == "FAILED", "retryable", "may be true only when FAILED")


# -- server → client ---------------------------------------------------------


@frozen
class WorkerWelcome:
    TYPE: ClassVar[str] = "worker.welcome"
    id: str
    session_id: str
    reply_to: str
    body: Welcome

    def __post_init__(self) -> None:
        _server_envelope(self)
        c.need(isinstance(self.body, Welcome), "body", "must be a Welcome")
        c.need(self.body.instance_secret is not None, "body.instance_secret", "is required in worker.welcome")


@frozen
class TaskAssign:
    TYPE: ClassVar[str] = "task.assign"
    id: str
    session_id: str
    task: AssignedTask
    lease: Lease

    def __post_init__(self) -> None:
        _server_envelope(self)
        c.need(isinstance(self.task, AssignedTask), "task", "must be an AssignedTask")
        c.need(isinstance(self.lease, Lease), "lease", "must be a Lease")
        c.need(self.lease.lease_secret is not None, "lease.lease_secret", "is required in task.assign")
        c.need(self.lease.state == "OFFERED", "lease.state", "an assignment is an OFFERED lease")
        c.need(self.lease.task_id == self.task.task_id, "lease.task_id", "must equal task.task_id")


@frozen
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
        c.resource_id(self.task_id, "task_id", g.TASK_PREFIX)
        c.resource_id(self.lease_id, "lease_id", g.LEASE_PREFIX)
        c.aware(self.cancel_requested_at, "cancel_requested_at")
        c.aware(self.grace_expires_at, "grace_expires_at")
        if self.reason is not None:
            c.text(self.reason, "reason", lim.MAX_REASON_CHARS)


AckBody = Union[Welcome, Lease, CommandResult]


@frozen
class Ack:
    TYPE: ClassVar[str] = "ack"
    id: str
    session_id: str
    reply_to: str
    body: AckBody

    def __post_init__(self) -> None:
        _server_envelope(self)
        body = self.body
        c.need(isinstance(body, (Welcome, Lease, CommandResult)), "body",
              "must be a Welcome, Lease or CommandResult")
        if isinstance(body, Welcome):
            c.need(body.instance_secret is None, "body.instance_secret", "is only sent in worker.welcome")
        if isinstance(body, Lease):
            c.need(body.lease_secret is None, "body.lease_secret", "is only sent in task.assign")


@frozen
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
        c.string(self.code, "code", g.is_error_code, "an error code")
        c.text(self.message, "message", lim.MAX_ERROR_MESSAGE_CHARS)
        c.boolean(self.fatal, "fatal")
        if self.retry_after_ms is not None:
            c.integer(self.retry_after_ms, "retry_after_ms", 0, lim.MAX_INT32)


def _server_envelope(msg) -> None:
    c.message_id(msg.id, "id")
    if msg.session_id is not None or not isinstance(msg, Error):
        c.resource_id(msg.session_id, "session_id", g.SESSION_PREFIX)
    reply_to = getattr(msg, "reply_to", None)
    if reply_to is not None or isinstance(msg, (WorkerWelcome, Ack)):
        c.message_id(reply_to, "reply_to")


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
