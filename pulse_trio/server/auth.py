"""Token checks the server runs through the store's read-only path."""

from __future__ import annotations

from pulse_trio import tokens
from pulse_trio.store.registry import read_only
from pulse_trio.store.tx import Tx


@read_only(takes_locks=False)
def worker_token(tx: Tx, *, token: str) -> tokens.TokenInfo | None:
    """The worker token's record, or None (unknown, revoked, or not a worker token)."""
    return tokens.lookup(tx.one, token, roles=("worker",))
