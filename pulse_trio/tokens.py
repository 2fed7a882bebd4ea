"""Bearer tokens for workers, producers and operators: the roles and the record of one token.

A token is shown once, when it is created; the database keeps only its
SHA-256 digest. Every statement on the table is in
:mod:`pulse_trio.store.tokens`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib

ROLES = ("worker", "producer", "operator")
TOKEN_PREFIX = "pt_"
#: Longer presented tokens are refused before any digest is taken.
MAX_TOKEN_CHARS = 200


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
