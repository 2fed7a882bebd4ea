"""The guards of chart ``lease``, evaluated against rows locked by the caller.

Each reads a :class:`~pulse_trio.store.engine.guard_context.LeaseContext`:
``lease`` (LeaseRow), ``task`` (TaskRow), ``now`` and, depending on the
trigger, the command, the calling session and the resuming instance. They
are evaluated by ``registry.decide`` only. The order in which a
trigger lists its guards in ``statecharts/lease.json`` is the order in
which their refusal codes win (docs/protocol.md §4.5, §4.6).
"""

from __future__ import annotations

from pulse_trio.charts.states import LIVE_LEASE_STATES
from pulse_trio.store.engine import ids
from pulse_trio.store.engine.registry import guard
from pulse_trio.store.engine.results import (
    CANCEL_NOT_REQUESTED, CONCURRENCY_KEYS_NOT_DECLARED, INVALID_TRANSITION, LEASE_EXPIRED, LEASE_NOT_FOUND,
    LEASE_NOT_OWNED, PERMISSION_DENIED, REVISION_CONFLICT, TASK_CANCELLED,
)
from pulse_trio.store.engine.tx import db_time


def _expired(lease, now) -> bool:
    return lease.state in LIVE_LEASE_STATES and db_time(lease.expires_at) <= db_time(now)


@guard("lease", "lease_secret_matches", code=LEASE_NOT_FOUND)
def lease_secret_matches(c) -> bool:
    """The lease exists for this task and the lease_secret matches its digest (no oracle: same code as unknown)."""
    return (c.lease is not None and c.lease.task_id == c.task_id
            and ids.secret_matches(c.lease_secret, c.lease.secret_digest))


@guard("lease", "owned_by_session", code=LEASE_NOT_OWNED)
def owned_by_session(c) -> bool:
    """The calling session owns the lease (a resume elsewhere moves it away)."""
    return c.lease.owner_session_id == c.session_id


@guard("lease", "lease_live", code=LEASE_EXPIRED)
def lease_live(c) -> bool:
    """The lease has not lapsed or expired, by state or by time (expires_at > now)."""
    return c.lease.state not in ("LAPSED", "EXPIRED") and not _expired(c.lease, c.now)


@guard("lease", "not_revoked", code=TASK_CANCELLED)
def not_revoked(c) -> bool:
    """The offer was not revoked by a cancel request."""
    return c.lease.state != "REVOKED"


@guard("lease", "revision_current", code=REVISION_CONFLICT)
def revision_current(c) -> bool:
    """The command carries the lease's current revision (older ones are answered from receipts first)."""
    return c.revision == c.lease.revision


@guard("lease", "cancelled_only_if_requested", code=CANCEL_NOT_REQUESTED)
def cancelled_only_if_requested(c) -> bool:
    """CANCELLED is accepted only if a cancel intent was saved before this finish (same transaction)."""
    return c.report.status != "CANCELLED" or c.lease.cancel_requested_at is not None


@guard("lease", "instance_secret_matches", code=LEASE_NOT_FOUND)
def instance_secret_matches(c) -> bool:
    """The earlier instance exists and instance_secret matches (wrong secret = unknown lease)."""
    return c.old_instance is not None and ids.secret_matches(c.instance_secret, c.old_instance.secret_digest)


@guard("lease", "owned_by_instance", code=LEASE_NOT_OWNED)
def owned_by_instance(c) -> bool:
    """The lease is still held by the instance being resumed from."""
    return c.lease.owner_instance_id == c.old_instance.instance_id


@guard("lease", "owner_epoch_older", code=LEASE_NOT_OWNED)
def owner_epoch_older(c) -> bool:
    """The current owner's epoch is lower than the resuming session's."""
    return c.lease.epoch < c.session.epoch


@guard("lease", "queue_subscribed", code=PERMISSION_DENIED)
def queue_subscribed(c) -> bool:
    """The resuming session subscribes to the task's queue and kind."""
    return c.session.subscribes(c.task.queue, c.task.kind)


@guard("lease", "keys_declared_if_keyed", code=CONCURRENCY_KEYS_NOT_DECLARED)
def keys_declared_if_keyed(c) -> bool:
    """A keyed task goes only to a session that declared concurrency_keys."""
    return c.task.concurrency_key is None or c.session.concurrency_keys


@guard("lease", "session_dispatchable", code=INVALID_TRANSITION)
def session_dispatchable(c) -> bool:
    """The session is ACTIVE (not draining, not disconnected)."""
    return c.session.state == "ACTIVE"


@guard("lease", "subscribed", code=PERMISSION_DENIED)
def subscribed(c) -> bool:
    """The session subscribes to the task's queue and kind."""
    return c.session.subscribes(c.task.queue, c.task.kind)


@guard("lease", "task_ready", code=INVALID_TRANSITION)
def task_ready(c) -> bool:
    """The task is READY (locked by this transaction's pick-up)."""
    return c.task.state == "READY"


@guard("lease", "offer_timed_out")
def offer_timed_out(c) -> bool:
    """The offer's expires_at (start timeout) has passed."""
    return db_time(c.lease.expires_at) <= db_time(c.now)


@guard("lease", "lease_timed_out")
def lease_timed_out(c) -> bool:
    """The started lease's expires_at (ttl, or the cancel grace deadline) has passed."""
    return db_time(c.lease.expires_at) <= db_time(c.now)
