"""Chart ``lease``, trigger ``resume``: a reconnected worker re-attaches a lease.

Locks the resuming session's instance row first (so an assign to the same
session cannot miscount its live leases), then the previous instance's row
shared (an operator's drain of it is either seen, and inherited, or waits
until the lease has moved), then the lease and its task.
Refusal order follows docs/protocol.md §4.6: wrong instance or lease
secret -> ``lease_not_found`` (no oracle), lapsed or expired ->
``lease_expired``, revoked -> ``task_cancelled``, finished ->
``invalid_transition`` (FINISHED is no source of ``resume``), owner moved or not older -> ``lease_not_owned``, queue
not subscribed -> ``permission_denied``, keyed without the declaration ->
``concurrency_keys_not_declared``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from pulse_trio.store.instance import instances
from pulse_trio.store.lease import guards as lease_guards  # noqa: F401  (guards)
from pulse_trio.store.lease import sql
from pulse_trio.store.lease.leases import lease_view, lock_lease, renewed_expiry
from pulse_trio.store.engine.chart_write import move
from pulse_trio.store.engine.guard_context import LeaseContext
from pulse_trio.store.engine.registry import decide, transition
from pulse_trio.store.engine.results import LEASE_NOT_FOUND, SESSION_NOT_FOUND, Refusal, Resumed
from pulse_trio.store.engine.rows import InstanceRow
from pulse_trio.store.engine.tx import Tx, after_ms, db_time


@dataclasses.dataclass(frozen=True, slots=True)
class ResumeRequest:
    """The body of ``worker.resume`` plus the session it arrived on."""

    session_id: str
    instance_id: str
    instance_secret: str = dataclasses.field(repr=False)
    task_id: str = ""
    lease_id: str = ""
    lease_secret: str = dataclasses.field(default="", repr=False)


@transition("lease", "resume")
def resume(tx: Tx, *, request: ResumeRequest, now: dt.datetime, start_timeout_ms: int) -> Resumed | Refusal:
    """Move the lease to the newer session: revision + 1, the new epoch, a fresh expires_at.

    The result says whether an operator's drain holds the session now (one
    inherited here included), so the live session stops offering at once.
    """
    session = instances.load_session(tx, request.session_id, lock=True)
    if session is None:
        return Refusal(SESSION_NOT_FOUND, f"no session {request.session_id}")
    old = tx.one(sql.OLD_INSTANCE, (request.instance_id,))
    old_instance = InstanceRow.from_row(old) if old else None
    locked = lock_lease(tx, request.lease_id)
    lease, task = locked if locked else (None, None)
    ctx = LeaseContext(lease=lease, task=task, task_id=request.task_id, lease_secret=request.lease_secret,
                          instance_secret=request.instance_secret, old_instance=old_instance, session=session,
                          session_id=request.session_id, now=now)
    dest = decide("lease", "resume", lease.state if lease is not None else "NONE", ctx)
    # instance_secret_matches and lease_secret_matches come first and are resume's only lease_not_found.
    if isinstance(dest, Refusal) and dest.code == LEASE_NOT_FOUND:
        return Refusal(LEASE_NOT_FOUND, "no such lease, or a secret does not match")
    if tx.recovering and lease.owner_session_id == session.session_id and lease.live:
        # Our own COMMIT landed before the connection was lost: the row shows what it inherited.
        return Resumed(lease_view(lease), session.operator_drained_at is not None)
    if isinstance(dest, Refusal):
        return dest
    expires = after_ms(now, start_timeout_ms) if lease.state == "OFFERED" else renewed_expiry(lease, now)
    move(tx, "lease", "resume", [lease.lease_id], source=lease.state, dest=dest,
         sets="owner_instance_id = %s, owner_session_id = %s, epoch = %s, revision = revision + 1, expires_at = %s",
         args=(session.instance_id, session.session_id, session.epoch, db_time(expires)),
         where="revision = %s AND owner_session_id = %s", where_args=(lease.revision, lease.owner_session_id))
    drained = session.operator_drained_at is not None
    if old_instance.operator_drained_at is not None:  # an operator's drain follows the worker (docs/worker.md §9)
        drained = instances.inherit_drain(tx, row=session, drained_at=old_instance.operator_drained_at, now=now)
    return Resumed(lease_view(lease, state=dest, revision=lease.revision + 1, epoch=session.epoch, expires_at=expires,
                              owner_instance_id=session.instance_id, owner_session_id=session.session_id), drained)
