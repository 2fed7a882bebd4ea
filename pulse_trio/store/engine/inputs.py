"""What transaction functions are handed, made before the transaction: a registration, a lease command.

They sit below the guards and the transaction functions (``guard_context``
reads them, ``instance.instances`` and ``task.steps`` take them), so neither has to
import the other.
"""

from __future__ import annotations

import dataclasses

from pulse_trio.contract.frozen import frozen
from pulse_trio.contract.grammar import is_kind, is_queue
from pulse_trio.contract.limits import MAX_SUBSCRIPTIONS
from pulse_trio.contract.messages import check_outcome
from pulse_trio.store.engine import ids

#: The statuses a finish reports (``task.finish``).
FINISH_STATUSES = ("SUCCEEDED", "FAILED", "UNKNOWN", "CANCELLED")


@frozen
class SubscribedQueue:
    """One queue of a registration, and the kinds taken from it."""

    queue: str
    kinds: frozenset[str] | None = None  # None: every kind of the queue

    def __post_init__(self) -> None:
        if not is_queue(self.queue):
            raise ValueError(f"bad queue name {self.queue!r}")
        if self.kinds is not None and not all(is_kind(k) for k in self.kinds):
            raise ValueError(f"bad kind in {sorted(self.kinds)!r}")

    def as_json(self) -> dict[str, object]:
        return {"queue": self.queue, "kinds": None if self.kinds is None else sorted(self.kinds)}


@frozen
class NewInstance:
    """A registration, with its ids and secret made once, before any retry.

    Making them here (not inside the transaction) is what lets a re-run after
    a lost COMMIT find the row it may already have written.
    """

    worker_name: str
    subscriptions: tuple[SubscribedQueue, ...]
    cancellation_notifications: bool = False
    concurrency_keys: bool = False
    client_json: str | None = None
    token_id: str | None = None
    instance_id: str = dataclasses.field(default_factory=lambda: ids.new_id("ins"))
    session_id: str = dataclasses.field(default_factory=lambda: ids.new_id("ses"))
    instance_secret: str = dataclasses.field(default_factory=ids.new_secret, repr=False)

    def __post_init__(self) -> None:
        if not 1 <= len(self.subscriptions) <= MAX_SUBSCRIPTIONS:
            raise ValueError(f"1 to {MAX_SUBSCRIPTIONS} subscriptions")
        if len({s.queue for s in self.subscriptions}) != len(self.subscriptions):
            raise ValueError("a queue is subscribed twice")


@frozen
class FinishReport:
    """The outcome part of ``task.finish`` (result as its exact JSON text)."""

    status: str
    result_json: str
    error_code: str | None = None
    error_message: str | None = None
    retryable: bool = False

    def __post_init__(self) -> None:
        # The finish rules are the contract's, which task.finish passed already; asked again for direct callers.
        check_outcome(self.status, self.error_code or "", self.error_message or "", self.retryable)


@frozen
class LeaseCommand:
    """The common body of task.start / task.renew / task.finish, plus the calling session."""

    session_id: str
    task_id: str
    lease_id: str
    lease_secret: str = dataclasses.field(repr=False)
    revision: int


@frozen
class StartCommand(LeaseCommand):
    """task.start: run by ``leases.start``."""


@frozen
class RenewCommand(LeaseCommand):
    """task.renew: run by ``leases.renew``."""


@frozen
class FinishCommand(LeaseCommand):
    """task.finish with its outcome: run by ``leases.finish``."""

    report: FinishReport


#: A lease command: its type says which transaction function runs it.
AnyLeaseCommand = StartCommand | RenewCommand | FinishCommand


__all__ = ["FINISH_STATUSES", "AnyLeaseCommand", "FinishCommand", "FinishReport", "LeaseCommand", "NewInstance",
           "RenewCommand", "StartCommand", "SubscribedQueue"]
