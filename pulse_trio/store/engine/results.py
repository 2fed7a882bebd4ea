"""What transaction functions hand back: typed results and typed refusals.

A :class:`Refusal` means the transaction changed nothing; ``code`` is the
spec's stable error code (docs/protocol.md §4.8), so the server can put it
on the wire as is (the codes themselves: ``codes.py``). Everything here is a
frozen value object.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from pulse_trio.contract.frozen import frozen

# The refusal codes are defined in codes.py, the store's one door to the contract's error codes;
# they are importable from here too, with the results that carry them.
from pulse_trio.store.engine.codes import (  # noqa: F401
    CANCEL_NOT_REQUESTED, CONCURRENCY_KEYS_NOT_DECLARED, INSTANCE_NOT_FOUND, INTERNAL_CODES, INVALID_TRANSITION,
    LEASE_EXPIRED, LEASE_NOT_FOUND, LEASE_NOT_OWNED, NODE_LOST, PERMISSION_DENIED, REVISION_CONFLICT,
    SERVER_SHUTTING_DOWN, SESSION_NOT_FOUND, SETTING_CONFLICT, STALE_SEQUENCE, TASK_CANCELLED, TASK_NOT_FOUND,
    WIRE_CODES,
)


@frozen
class Refusal:
    """Nothing was written; ``code`` says why (a spec error code).

    ``guard``: the chart's refusing guard that failed, when a guard refused
    (:func:`~pulse_trio.store.engine.registry.decide`), so a caller words the
    refusal from the guard itself, never from the order the chart checks
    them in. The message names it too, so equality leaves it out.
    """

    code: str
    message: str = ""
    guard: str | None = dataclasses.field(default=None, compare=False)

    def __bool__(self) -> bool:  # a refusal is never a success
        return False


# -- leases ---------------------------------------------------------------------
@frozen
class LeaseView:
    """The lease shape of docs/protocol.md §4.4-§4.6 (counters as ints)."""

    lease_id: str
    task_id: str
    revision: int
    epoch: int
    state: str
    expires_at: dt.datetime
    cancel_requested_at: dt.datetime | None = None


@frozen
class Resumed:
    """A resume's lease, and whether an operator's drain holds the resuming session now.

    The drain may have come with the lease (``inherit_drain``): the live
    session applies it at once, not at the worker's next capacity frame.
    """

    lease: LeaseView
    operator_drained: bool


@frozen
class CommandReceipt:
    """The durable record of a committed start/renew/finish."""

    command: str  # "task.start" | "task.renew" | "task.finish"
    task_id: str
    lease_id: str
    revision: int  # the revision the command carried
    committed_at: dt.datetime
    duplicate: bool


@frozen
class CommandAck:
    """Ack body of a lease command: ``lease`` only while the caller still holds one.

    An accepted (not replayed) start or finish also says, for the service's
    metrics, its task's queue and when the wait or the run began: ``due_at``
    (start: when the task became due) and ``started_at`` (finish: the
    attempt's start), read by the locking SELECT the command runs anyway.
    """

    receipt: CommandReceipt
    lease: LeaseView | None
    queue: str | None = None
    due_at: dt.datetime | None = None
    started_at: dt.datetime | None = None
    #: A finish whose released permit let a key's set-aside task compete again (one ack of the batch says so;
    #: the batcher wakes the dispatcher for the batch).
    freed_work: bool = False


@frozen
class TaskSnapshot:
    """The task shape of ``task.assign`` (payload as its exact JSON text)."""

    task_id: str
    queue: str
    kind: str
    payload_json: str
    attempt: int
    max_attempts: int
    idempotency_key: str
    created_at: dt.datetime
    due_at: dt.datetime
    priority: int
    concurrency_key: str | None
    concurrency_token: int | None
    effect_uncertain: bool
    retry_of: str | None


@frozen
class Offer:
    """One ``task.assign``: the task, its new lease, and the lease secret (shown only here)."""

    task: TaskSnapshot
    lease: LeaseView
    lease_secret: str = dataclasses.field(repr=False)  # no repr shows a secret


@frozen
class AssignResult:
    offers: tuple[Offer, ...]
    free_slots: int  # capacity - active leases, before this batch


@frozen
class LeaseEnd:
    """A lease a timer ended: the owner's dispatcher may have a free slot now."""

    lease_id: str
    task_id: str
    session_id: str
    state: str  # LAPSED / EXPIRED
    task_state: str
    queue: str = ""
    permit_quarantined: bool = False


@frozen
class TimerResult:
    """What one timer batch did; ``more`` means the batch was full (run again soon)."""

    count: int
    more: bool
    ended: tuple[LeaseEnd, ...] = ()
    task_ids: tuple[str, ...] = ()
    lost_nodes: tuple[str, ...] = ()  # node.lose: nodes declared lost by this batch (ALIVE -> LOST)


# -- instances ------------------------------------------------------------------
@frozen
class InstanceView:
    """The welcome shape (docs/protocol.md §4.2) minus the secret."""

    instance_id: str
    session_id: str
    epoch: int
    state: str  # ACTIVE / DRAINING / DISCONNECTED
    capacity: int
    drain: bool
    sequence: int | None
    active_leases: int


@frozen
class Registered:
    instance: InstanceView
    instance_secret: str = dataclasses.field(repr=False)  # shown once, in worker.welcome; never by repr


@frozen
class CapacityResult:
    """``applied`` is False for a stale sequence: the ack shows the current state."""

    instance: InstanceView
    applied: bool


# -- producer side ----------------------------------------------------------------
@frozen
class Submitted:
    task_id: str
    state: str
    created: bool  # False: an existing task with the same idempotency key


@frozen
class RetryCreated:
    task_id: str
    retry_of: str
    created: bool  # False: the source had been retried already
    effect_uncertain: bool


@frozen
class CancelResult:
    """``changed`` is False when the task was terminal or already being cancelled."""

    task_id: str
    task_state: str
    intent_state: str | None
    changed: bool
    cancel_requested_at: dt.datetime | None
    grace_expires_at: dt.datetime | None
    revoked_lease: LeaseEnd | None = None


@frozen
class CancelNotice:
    """One ``task.cancel`` push the server must send to ``session_id``."""

    session_id: str
    task_id: str
    lease_id: str
    cancel_requested_at: dt.datetime
    grace_expires_at: dt.datetime | None
    reason: str
