"""The opening handshake of /v1/worker: path, subprotocol, bearer token.

Everything is decided before a WebSocket exists, so a refused client gets
a plain HTTP answer (400/401/404) and never a session.
"""

from __future__ import annotations

import dataclasses

WORKER_PATH = "/v1/worker"
SUBPROTOCOL = "pulse.worker.v1"
MAX_TOKEN_CHARS = 512


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    reason: str

    def body(self) -> bytes:
        return (self.reason + "\n").encode()


def header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The single value of ``name``; None when absent or repeated (ambiguous)."""
    values = [v for k, v in headers if k.lower() == name]
    return values[0] if len(values) == 1 else None


def bearer_token(headers: list[tuple[bytes, bytes]]) -> str | None:
    raw = header(headers, b"authorization")
    if raw is None or len(raw) > MAX_TOKEN_CHARS:
        return None
    try:
        scheme, _, token = raw.decode("ascii").strip().partition(" ")
    except UnicodeDecodeError:
        return None
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def check_request(path: str, subprotocols: tuple[str, ...]) -> Refusal | None:
    """What can be refused without touching the database."""
    if path.split("?", 1)[0] != WORKER_PATH:
        return Refusal(404, f"no WebSocket endpoint at {path!r}; workers connect to {WORKER_PATH}")
    if SUBPROTOCOL not in subprotocols:
        return Refusal(400, f"the {SUBPROTOCOL} subprotocol must be offered (Sec-WebSocket-Protocol)")
    return None
