"""Bearer tokens for workers, producers and operators.

A token is shown once, when it is created; the database keeps only its
SHA-256 digest. Lookup goes through the digest's unique index and the final
comparison is constant-time, so neither the table nor response timing
reveals a token.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import hmac
import json
import secrets
from collections.abc import Callable, Sequence

ROLES = ("worker", "producer", "operator")
TOKEN_PREFIX = "pt_"


@dataclasses.dataclass(frozen=True, slots=True)
class TokenInfo:
    token_id: str
    role: str
    queues: tuple[str, ...]  # empty: every queue
    label: str
    created_at: dt.datetime
    revoked_at: dt.datetime | None

    def allows_queue(self, queue: str) -> bool:
        return not self.queues or queue in self.queues

    def as_json(self) -> dict[str, object]:
        return {
            "token_id": self.token_id, "role": self.role,
            "queues": list(self.queues) or ["*"], "label": self.label,
            "created_at": _iso(self.created_at),
            "revoked_at": _iso(self.revoked_at) if self.revoked_at else None,
        }


def _iso(value: dt.datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def _naive_utc(now: dt.datetime) -> dt.datetime:
    return now.astimezone(dt.timezone.utc).replace(tzinfo=None) if now.tzinfo else now


def create_token(conn, *, role: str, queues: Sequence[str], label: str, now: dt.datetime) -> tuple[str, TokenInfo]:
    """Store a new token's digest; return the token (shown once) and its record."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token_id = "tok_" + secrets.token_hex(13)
    created = _naive_utc(now)
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO api_tokens (token_id, digest, role, queues, label, created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            (token_id, digest(token), role, json.dumps(sorted(set(queues))), label, created),
        )
    conn.commit()
    return token, TokenInfo(token_id, role, tuple(sorted(set(queues))), label, created, None)


def _row_to_info(row) -> TokenInfo:
    token_id, role, queues, label, created_at, revoked_at = row
    return TokenInfo(token_id, role, tuple(json.loads(queues)), label, created_at, revoked_at)


_COLUMNS = "token_id, role, queues, label, created_at, revoked_at"


def list_tokens(conn) -> list[TokenInfo]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT {_COLUMNS} FROM api_tokens ORDER BY created_at, token_id")
        rows = cur.fetchall()
    conn.rollback()
    return [_row_to_info(r) for r in rows]


def revoke_token(conn, token_id: str, *, now: dt.datetime) -> TokenInfo | None:
    """Revoke by id; revoking twice keeps the first revocation time."""
    with conn.cursor() as cur:
        cur.execute(
            "UPDATE api_tokens SET revoked_at = %s WHERE token_id = %s AND revoked_at IS NULL",
            (_naive_utc(now), token_id),
        )
        cur.execute(f"SELECT {_COLUMNS} FROM api_tokens WHERE token_id = %s", (token_id,))
        row = cur.fetchone()
    conn.commit()
    return _row_to_info(row) if row else None


def lookup(fetch_one: Callable[[str, tuple], tuple | None], token: str, *,
           roles: Sequence[str] = ROLES) -> TokenInfo | None:
    """The live token's record, or None for an unknown, revoked or wrong-role token.

    ``fetch_one(sql, args)`` runs one query and returns its first row, so the
    same check serves a raw connection (CLI) and a store transaction (server).
    """
    if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    wanted = digest(token)
    row = fetch_one(f"SELECT {_COLUMNS}, digest FROM api_tokens WHERE digest = %s", (wanted,))
    if row is None or not hmac.compare_digest(bytes(row[6]), wanted):
        return None
    info = _row_to_info(row[:6])
    if info.revoked_at is not None or info.role not in roles:
        return None
    return info


def authenticate(conn, token: str, *, roles: Sequence[str] = ROLES) -> TokenInfo | None:
    """``lookup`` on a raw connection (ends its read-only transaction)."""

    def fetch_one(sql: str, args: tuple) -> tuple | None:
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchone()

    try:
        return lookup(fetch_one, token, roles=roles)
    finally:
        conn.rollback()
