"""The ``api_tokens`` table: the one token lookup both endpoints authenticate with, and the CLI's admin.

:func:`live_token` is the read-only view the HTTP API (any role; the handler
judges what the role allows) runs through the store, and :func:`token_verdict`
the same lookup for the worker endpoint (``roles=WORKER``), which also says
why it refuses (unknown, revoked, another role) so refusals can be counted; :func:`live_token_ids` is how a serve process re-checks
the tokens of the sessions it holds, and :class:`LiveTokens` how the
registrations sharing a transaction check theirs again. Creating, listing and revoking are operator commands of
the CLI on a connection of its own: no chart governs a token, so they are
plain statements, not transitions, and they live here only so that every
statement on the table does.
"""

from __future__ import annotations

import datetime as dt
import hmac
import json
import secrets
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from pulse_trio.store.engine.registry import read_only
from pulse_trio.store.engine.tx import Tx
from pulse_trio.store.token import sql
from pulse_trio.tokens import (MAX_TOKEN_CHARS, ROLES, TOKEN_ID_PREFIX, TOKEN_PREFIX, TokenInfo, check_grants,
                               check_label, digest)

#: The worker endpoint takes only worker tokens.
WORKER: tuple[str, ...] = ("worker",)



def _naive_utc(now: dt.datetime) -> dt.datetime:
    return now.astimezone(dt.timezone.utc).replace(tzinfo=None) if now.tzinfo else now


def _row_to_info(row: Sequence[Any]) -> TokenInfo:
    token_id, role, queues, label, created_at, revoked_at, allow = row
    return TokenInfo(token_id, role, tuple(json.loads(queues)), label, created_at, revoked_at,
                     tuple(json.loads(allow)))


#: Why :func:`token_verdict` refuses a token; the worker endpoint counts its refusals by these (never by the token).
UNKNOWN_TOKEN, REVOKED_TOKEN, OTHER_ROLE = "unknown_token", "revoked_token", "other_role"


def _verdict(row_of: Any, token: str, roles: Sequence[str]) -> TokenInfo | str:
    """The live token's record, or why not: :data:`UNKNOWN_TOKEN`, :data:`REVOKED_TOKEN` or :data:`OTHER_ROLE`.

    The digest's unique index finds the row and the final comparison is
    constant-time, so neither the table nor response timing reveals a token.
    """
    if not token.startswith(TOKEN_PREFIX) or len(token) > MAX_TOKEN_CHARS:
        return UNKNOWN_TOKEN
    wanted = digest(token)
    row = row_of(sql.BY_DIGEST, (wanted,))
    if row is None or not hmac.compare_digest(bytes(row[7]), wanted):
        return UNKNOWN_TOKEN
    info = _row_to_info(row[:7])
    if info.revoked_at is not None:
        return REVOKED_TOKEN
    if info.role not in roles:
        return OTHER_ROLE
    return info


def _lookup(row_of: Any, token: str, roles: Sequence[str]) -> TokenInfo | None:
    """The live token's record, or None for an unknown, revoked or wrong-role token."""
    found = _verdict(row_of, token, roles)
    return found if isinstance(found, TokenInfo) else None


@read_only(takes_locks=False)
def token_verdict(tx: Tx, *, token: str, roles: Sequence[str] = ROLES) -> TokenInfo | str:
    """:func:`live_token`, but a refusal says which: the worker handshake counts and logs it by that reason."""
    return _verdict(tx.one, token, roles)


@read_only(takes_locks=False)
def live_token(tx: Tx, *, token: str, roles: Sequence[str] = ROLES) -> TokenInfo | None:
    """The record of a live token whose role is one of ``roles``, or None (unknown, revoked, other role)."""
    return _lookup(tx.one, token, roles)


@read_only(takes_locks=False)
def live_token_ids(tx: Tx, *, token_ids: Collection[str]) -> frozenset[str]:
    """The ids among ``token_ids`` whose token is not revoked: one statement by primary key.

    A serve process asks it for the distinct tokens its open sessions were
    opened with, so a revoke also ends the sessions opened before it.
    """
    if not token_ids:
        return frozenset()
    return frozenset(row[0] for row in tx.all(sql.LIVE_IDS, (tuple(token_ids),)))


class LiveTokens:
    """Which of a batch's worker tokens are live: one read per transaction, however many hellos share it.

    The registrations that share a transaction (``server/registrations.py``)
    each re-check the token their connection opened with; they ask this,
    which reads every token of the batch at the first question and answers
    the rest from that read. A retried or split batch runs in a new
    transaction, which reads again. A token outside the batch is read alone.
    """

    __slots__ = ("token_ids", "_tx", "_live")

    def __init__(self, token_ids: Iterable[str]) -> None:
        self.token_ids = frozenset(token_ids)
        self._tx: Tx | None = None
        self._live: frozenset[str] = frozenset()

    def live(self, tx: Tx, token_id: str) -> bool:
        if token_id not in self.token_ids:
            return token_id in live_token_ids(tx, token_ids=(token_id,))
        if self._tx is not tx:
            self._live, self._tx = live_token_ids(tx, token_ids=self.token_ids), tx
        return token_id in self._live


# -- the CLI's operator commands, each on a connection of its own -------------------------------------
def create_token(conn: Any, *, role: str, queues: Sequence[str], label: str,
                 now: dt.datetime, allow: Sequence[str] = ()) -> tuple[str, TokenInfo]:
    """Store a new token's digest; return the token (shown once) and its record.

    ``allow`` grants actions beyond the role (``pulse_trio.tokens.GRANTS``), within ``queues``.
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    grants = check_grants(role, allow)
    label = check_label(label)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token_id = TOKEN_ID_PREFIX + secrets.token_hex(13)
    created = _naive_utc(now)
    with conn.cursor() as cur:
        cur.execute(
            sql.INSERT_TOKEN,
            (token_id, digest(token), role, json.dumps(sorted(set(queues))), json.dumps(list(grants)), label,
             created),
        )
    conn.commit()
    return token, TokenInfo(token_id, role, tuple(sorted(set(queues))), label, created, None, grants)


def list_tokens(conn: Any) -> list[TokenInfo]:
    with conn.cursor() as cur:
        cur.execute(sql.ALL_TOKENS)
        rows = cur.fetchall()
    conn.rollback()
    return [_row_to_info(r) for r in rows]


def revoke_token(conn: Any, token_id: str, *, now: dt.datetime) -> TokenInfo | None:
    """Revoke by id; revoking twice keeps the first revocation time."""
    with conn.cursor() as cur:
        cur.execute(sql.REVOKE, (_naive_utc(now), token_id))
        cur.execute(sql.BY_ID, (token_id,))
        row = cur.fetchone()
    conn.commit()
    return _row_to_info(row) if row else None


def authenticate(conn: Any, token: str, *, roles: Sequence[str] = ROLES) -> TokenInfo | None:
    """:func:`live_token` on a raw connection (ends its read-only transaction)."""

    def row_of(statement: str, args: tuple) -> tuple | None:
        with conn.cursor() as cur:
            cur.execute(statement, args)
            return cur.fetchone()

    try:
        return _lookup(row_of, token, roles)
    finally:
        conn.rollback()
