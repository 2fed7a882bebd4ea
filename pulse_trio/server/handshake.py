"""The opening handshake of /v1/worker: path, subprotocol, bearer token.

Everything is decided before a WebSocket exists, so a refused client gets
a plain HTTP answer (400/401/404, or 503 while the token cannot be
looked up) and never a session. Each refusal has a cause from a fixed set
(:data:`REFUSAL_CAUSES`), which the endpoint counts and logs; what the
client sent (its token above all) is never one.
"""

from __future__ import annotations

import dataclasses

from pulse_trio.bearer import parse_bearer
from pulse_trio.contract.limits import ENDPOINT_PATH, SUBPROTOCOL
from pulse_trio.store.token.tokens import OTHER_ROLE, REVOKED_TOKEN, UNKNOWN_TOKEN

MAX_TOKEN_CHARS = 512


#: The causes a refusal is counted and logged by (docs/operations.md §6): a fixed set, so the label cannot grow.
WRONG_PATH, NO_SUBPROTOCOL, NO_TOKEN, BAD_REQUEST = "wrong_path", "no_subprotocol", "no_token", "bad_request"
STORAGE = "storage_unavailable"
REFUSAL_CAUSES = (WRONG_PATH, NO_SUBPROTOCOL, NO_TOKEN, UNKNOWN_TOKEN, REVOKED_TOKEN, OTHER_ROLE, STORAGE, BAD_REQUEST)


@dataclasses.dataclass(frozen=True, slots=True)
class HandshakeRefusal:
    """An HTTP answer instead of an upgrade: its status, its cause (one of REFUSAL_CAUSES), its one-line reason."""

    status: int
    cause: str
    reason: str
    headers: tuple[tuple[str, str], ...] = ()


#: The token could not be looked up (the database is away): the worker comes back later, as from any drop.
STORAGE_UNAVAILABLE = HandshakeRefusal(503, STORAGE,
                                       "the worker token cannot be checked now: storage unavailable; retry later",
                                       (("Retry-After", "1"),))


def token_refusal(cause: str) -> HandshakeRefusal:
    """The 401 of every token cause: the client is told the same, whatever the cause (protocol.md §1.2)."""
    return HandshakeRefusal(401, cause, "a valid worker token is required: Authorization: Bearer <token>",
                            (("WWW-Authenticate", 'Bearer realm="pulse"'),))


def header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The single value of ``name``; None when absent or repeated (ambiguous)."""
    values = [v for k, v in headers if k.lower() == name]
    return values[0] if len(values) == 1 else None


def bearer_token(headers: list[tuple[bytes, bytes]]) -> str | None:
    raw = header(headers, b"authorization")
    if raw is None or len(raw) > MAX_TOKEN_CHARS:
        return None
    try:
        return parse_bearer(raw.decode("ascii"))
    except UnicodeDecodeError:
        return None


def check_request(path: str, subprotocols: tuple[str, ...]) -> HandshakeRefusal | None:
    """What can be refused without touching the database."""
    if path.split("?", 1)[0] != ENDPOINT_PATH:
        return HandshakeRefusal(404, WRONG_PATH,
                                f"no WebSocket endpoint at {path!r}; workers connect to {ENDPOINT_PATH}")
    if SUBPROTOCOL not in subprotocols:
        return HandshakeRefusal(400, NO_SUBPROTOCOL,
                                f"the {SUBPROTOCOL} subprotocol must be offered (Sec-WebSocket-Protocol)")
    return None
