"""Bearer tokens for workers, producers and operators: the roles and the record of one token.

A token is shown once, when it is created; the database keeps only its
SHA-256 digest. Every statement on the table is in
:mod:`pulse_trio.store.token.tokens`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import string
from collections.abc import Sequence

from pulse_trio.contract.grammar import is_label
from pulse_trio.contract.limits import MAX_LABEL_CHARS

ROLES = ("worker", "producer", "operator")
#: Actions a producer token may be granted beyond its role when it is created (``--allow``); the
#: HTTP API's permission table (``pulse_trio.http.auth``) is where a grant is honoured.
GRANTS = ("cancel", "retry")
#: The roles a grant may be given to (an operator already may; a worker token never reaches the API).
GRANTABLE_ROLES = ("producer",)
TOKEN_PREFIX = "pt_"
#: Longer presented tokens are refused before any digest is taken.
MAX_TOKEN_CHARS = 200
#: What a token's id starts with (the rest is hex digits): an id names a token, never grants anything.
TOKEN_ID_PREFIX = "tok_"


@dataclasses.dataclass(frozen=True, slots=True)
class TokenInfo:
    token_id: str
    role: str
    queues: tuple[str, ...]  # empty: every queue
    label: str
    created_at: dt.datetime
    revoked_at: dt.datetime | None
    #: Actions granted beyond the role (names from ``GRANTS``), within the token's queues.
    allow: tuple[str, ...] = ()

    def allows_queue(self, queue: str) -> bool:
        return not self.queues or queue in self.queues

    def as_json(self) -> dict[str, object]:
        return {
            "token_id": self.token_id, "role": self.role,
            "queues": list(self.queues) or ["*"], "allow": list(self.allow), "label": self.label,
            "created_at": _iso(self.created_at),
            "revoked_at": _iso(self.revoked_at) if self.revoked_at else None,
        }


def check_grants(role: str, allow: Sequence[str]) -> tuple[str, ...]:
    """The grants as stored (sorted, once each); ValueError for an unknown one or a role that takes none."""
    unknown = sorted(set(allow) - set(GRANTS))
    if unknown:
        raise ValueError(f"unknown grant(s) {', '.join(unknown)}: a token may be granted {', '.join(GRANTS)}")
    if allow and role not in GRANTABLE_ROLES:
        raise ValueError(f"a {role} token takes no grants (only {', '.join(GRANTABLE_ROLES)} tokens do)")
    return tuple(sorted(set(allow)))


def check_label(label: str) -> str:
    """The label as given, or ValueError: the rule of worker names, so `token list` prints nothing raw that
    drives a terminal; empty is allowed (no label)."""
    if label and not is_label(label, MAX_LABEL_CHARS):
        raise ValueError(f"a token's label is at most {MAX_LABEL_CHARS} characters of UTF-8 text "
                         "without control characters")
    return label


def could_be_token_id(text: str) -> bool:
    """False for text no token's id can be (``TOKEN_ID_PREFIX`` and hex digits): such an argument is
    neither looked up nor shown, since it may be a secret pasted around (one with a blank or
    ``Bearer`` before it) or text that was not UTF-8."""
    digits = text.removeprefix(TOKEN_ID_PREFIX)
    return text.startswith(TOKEN_ID_PREFIX) and bool(digits) and all(c in string.hexdigits for c in digits)


def _iso(value: dt.datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()
