"""Chart ``lease``: the worker's commands ``task.start``, ``task.renew``, ``task.finish``.

Each command locks its lease and task rows (one join, lease first), then:

1. an unknown lease, another task's lease or a wrong secret -> ``lease_not_found``;
2. a revision older than the lease's is a replay: the stored receipt for that
   revision comes back with ``duplicate=true`` if the content matches (and
   the lease only if the caller still holds it), else ``revision_conflict``.
   Since every accepted command increments the revision, the current
   revision can never have a receipt, so the hot path skips this lookup;
3. the chart's guards decide (``decide``), then guarded UPDATEs, the steps of
   the other charts, and the receipt, all in this one transaction.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
from types import SimpleNamespace

from pulse_trio.store import cancellation, lease_guards, permits, task_steps  # noqa: F401  (guards)
from pulse_trio.store.registry import decide, transition
from pulse_trio.store.results import (
    LEASE_NOT_FOUND, REVISION_CONFLICT, CommandResult, LeaseView, Receipt, Refusal,
)
from pulse_trio.store.rows import LeaseRow, TaskRow
from pulse_trio.store.task_steps import FinishReport
from pulse_trio.store.tx import Tx, after_ms, db_time, py_time

_LOCK_BOTH = (
    f"SELECT {LeaseRow.columns()}, {TaskRow.columns()} FROM leases l"
    " JOIN tasks t ON t.task_id = l.task_id WHERE l.lease_id = %s FOR UPDATE"
)
_N_LEASE = len(LeaseRow.NAMES)


@dataclasses.dataclass(frozen=True, slots=True)
class LeaseCommand:
    """The common body of task.start / task.renew / task.finish, plus the calling session."""

    session_id: str
    task_id: str
    lease_id: str
    lease_secret: str = dataclasses.field(repr=False)
    revision: int


def lock_lease(tx: Tx, lease_id: str) -> tuple[LeaseRow, TaskRow] | None:
    """Lock a lease and its task (in that order) and read both."""
    row = tx.one(_LOCK_BOTH, (lease_id,))
    if row is None:
        return None
    return LeaseRow.from_row(row[:_N_LEASE]), TaskRow.from_row(row[_N_LEASE:])


def lease_view(lease: LeaseRow, **changes) -> LeaseView:
    lease = dataclasses.replace(lease, **changes) if changes else lease
    return LeaseView(lease.lease_id, lease.task_id, lease.revision, lease.epoch, lease.state, lease.expires_at,
                     lease.cancel_requested_at)


def renewed_expiry(lease: LeaseRow, now: dt.datetime) -> dt.datetime:
    """now + ttl, never past the cancel grace deadline."""
    expires = after_ms(now, lease.ttl_ms)
    if lease.cancel_deadline is not None and lease.cancel_deadline < expires:
        return lease.cancel_deadline
    return expires


def content_digest(command: str, cmd: LeaseCommand, report: FinishReport | None = None) -> bytes:
    """What makes two commands "the same": name, ids, revision and (finish) the exact outcome."""
    parts = [command, cmd.task_id, cmd.lease_id, str(cmd.revision)]
    if report is not None:
        parts += [report.status, report.error_code or "", report.error_message or "",
                  "1" if report.retryable else "0", report.result_json]
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8")
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.digest()


def _holds(lease: LeaseRow, session_id: str, now: dt.datetime) -> bool:
    return lease.live and lease.owner_session_id == session_id and db_time(lease.expires_at) > db_time(now)


def _replay(tx: Tx, lease: LeaseRow, cmd: LeaseCommand, command: str, digest: bytes,
            now: dt.datetime) -> CommandResult | Refusal:
    row = tx.one("SELECT command, content_digest, committed_at FROM command_receipts"
                 " WHERE lease_id = %s AND revision = %s", (cmd.lease_id, cmd.revision))
    if row is None or row[0] != command or bytes(row[1]) != digest:
        return Refusal(REVISION_CONFLICT, f"revision {cmd.revision} is not the lease's current revision "
                                          f"({lease.revision}) nor a replay of what was committed there")
    # A re-run after our own lost COMMIT finds our receipt: it is not the caller's duplicate.
    receipt = Receipt(command, cmd.task_id, cmd.lease_id, cmd.revision, py_time(row[2]), not tx.recovering)
    return CommandResult(receipt, lease_view(lease) if _holds(lease, cmd.session_id, now) else None)


def _prepare(tx: Tx, trigger: str, cmd: LeaseCommand, now: dt.datetime, digest: bytes,
             report: FinishReport | None = None) -> CommandResult | Refusal | tuple[LeaseRow, TaskRow, str]:
    locked = lock_lease(tx, cmd.lease_id)
    lease, task = locked if locked else (None, None)
    ctx = SimpleNamespace(lease=lease, task=task, task_id=cmd.task_id, lease_secret=cmd.lease_secret,
                          session_id=cmd.session_id, revision=cmd.revision, report=report, now=now)
    if not lease_guards.lease_secret_matches(ctx):
        return Refusal(LEASE_NOT_FOUND, "no such lease for this task, or the secret does not match")
    if cmd.revision < lease.revision:
        return _replay(tx, lease, cmd, "task." + trigger, digest, now)
    dest = decide("lease", trigger, lease.state, ctx)
    if isinstance(dest, Refusal):
        return dest
    return lease, task, dest


def _receipt(tx: Tx, command: str, cmd: LeaseCommand, digest: bytes, now: dt.datetime) -> Receipt:
    tx.write("INSERT INTO command_receipts (lease_id, revision, command, task_id, content_digest, committed_at)"
             " VALUES (%s, %s, %s, %s, %s, %s)", (cmd.lease_id, cmd.revision, command, cmd.task_id, digest,
                                                  db_time(now)))
    return Receipt(command, cmd.task_id, cmd.lease_id, cmd.revision, now, False)


@transition("lease", "start")
def start(tx: Tx, *, command: LeaseCommand, now: dt.datetime) -> CommandResult | Refusal:
    """task.start: OFFERED -> RUNNING; the ack authorizes execution."""
    digest = content_digest("task.start", command)
    prepared = _prepare(tx, "start", command, now, digest)
    if not isinstance(prepared, tuple):
        return prepared
    lease, task, dest = prepared
    expires = renewed_expiry(lease, now)
    tx.cas("UPDATE leases SET state = %s, revision = revision + 1, expires_at = %s, started_at = %s"
           " WHERE lease_id = %s AND state = 'OFFERED' AND revision = %s",
           (dest, db_time(expires), db_time(now), lease.lease_id, lease.revision))
    task_steps.start(tx, task=task, lease=lease, now=now)
    receipt = _receipt(tx, "task.start", command, digest, now)
    return CommandResult(receipt, lease_view(lease, state=dest, revision=lease.revision + 1, expires_at=expires))


@transition("lease", "renew")
def renew(tx: Tx, *, command: LeaseCommand, now: dt.datetime) -> CommandResult | Refusal:
    """task.renew: expires at now + ttl (capped by the cancel grace deadline), revision + 1."""
    digest = content_digest("task.renew", command)
    prepared = _prepare(tx, "renew", command, now, digest)
    if not isinstance(prepared, tuple):
        return prepared
    lease, _task, dest = prepared
    expires = renewed_expiry(lease, now)
    tx.cas("UPDATE leases SET state = %s, revision = revision + 1, expires_at = %s"
           " WHERE lease_id = %s AND state = 'RUNNING' AND revision = %s",
           (dest, db_time(expires), lease.lease_id, lease.revision))
    receipt = _receipt(tx, "task.renew", command, digest, now)
    return CommandResult(receipt, lease_view(lease, state=dest, revision=lease.revision + 1, expires_at=expires))


@transition("lease", "finish")
def finish(tx: Tx, *, command: LeaseCommand, report: FinishReport, now: dt.datetime) -> CommandResult | Refusal:
    """task.finish: the outcome is recorded, the permit released, a cancel intent resolved, a retry scheduled."""
    digest = content_digest("task.finish", command, report)
    prepared = _prepare(tx, "finish", command, now, digest, report)
    if not isinstance(prepared, tuple):
        return prepared
    lease, task, dest = prepared
    tx.cas("UPDATE leases SET state = %s, revision = revision + 1, ended_at = %s"
           " WHERE lease_id = %s AND state = 'RUNNING' AND revision = %s",
           (dest, db_time(now), lease.lease_id, lease.revision))
    task_steps.finish(tx, task=task, lease=lease, report=report, now=now)
    if lease.concurrency_token is not None:
        permits.release(tx, leases=[lease], now=now)
    if lease.cancel_requested_at is not None:
        cancellation.resolve(tx, task_id=task.task_id, now=now)
    receipt = _receipt(tx, "task.finish", command, digest, now)
    return CommandResult(receipt, None)
