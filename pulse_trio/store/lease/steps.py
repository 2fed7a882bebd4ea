"""Chart ``lease``: the two steps a cancel request runs on a live lease.

Both run inside ``cancellation.request`` with the lease and task rows already
locked (lease first).
"""

from __future__ import annotations

import datetime as dt

from pulse_trio.store.key_permit import permits
from pulse_trio.store.engine.chart_write import move
from pulse_trio.store.engine.registry import transition
from pulse_trio.store.engine.rows import LeaseRow
from pulse_trio.store.engine.tx import Tx, db_time

#: revoke and cancel have no guard: their caller, cancellation.request, decided.


@transition("lease", "revoke", entry=False)
def revoke(tx: Tx, *, lease: LeaseRow, now: dt.datetime) -> str:
    """OFFERED -> REVOKED: the unstarted offer is withdrawn; its permit is released.

    ``cancel_requested_at`` is kept on the revoked lease so the holder's
    instance can find it and push ``task.cancel`` (cancellation.notify),
    which clears it once told: the lease is filed under REVOKED only until then.
    """
    stamp = db_time(now)
    dest = move(tx, "lease", "revoke", [lease.lease_id], source=lease.state,
         sets="ended_at = %s, cancel_requested_at = %s", args=(stamp, stamp),
         where="revision = %s", where_args=(lease.revision,))
    if lease.concurrency_token is not None:
        permits.release(tx, leases=[lease], now=now)
    return dest


@transition("lease", "cancel", entry=False)
def cancel(tx: Tx, *, lease: LeaseRow, now: dt.datetime, deadline: dt.datetime) -> dt.datetime:
    """RUNNING stays RUNNING: record cancel_requested_at and cap expires_at at the grace deadline.

    The cap is what makes the ordinary expiry timer escalate exactly when the
    grace runs out, and renewals never move it (``renewed_expiry``).
    """
    expires = min(lease.expires_at, deadline)
    move(tx, "lease", "cancel", [lease.lease_id], source=lease.state,
         sets="cancel_requested_at = %s, cancel_deadline = %s, expires_at = %s",
         args=(db_time(now), db_time(deadline), db_time(expires)), where="cancel_requested_at IS NULL")
    return expires
