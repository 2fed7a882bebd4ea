"""The contract's error tree.

Two kinds of failure, kept apart on purpose (as h11 does):

* ``ProtocolError``: a frame we *received* breaks the contract. It carries
  the stable wire code, whether it is fatal, and the ``reply_to`` the error
  frame must carry, so the session layer can answer without re-deriving any
  of it.
* ``InvalidMessage``: *our own* code tried to build a message that the
  contract does not allow (a bug on this side). It is a ``ValueError`` and
  never goes on the wire.
"""

from __future__ import annotations

from typing import Final

INVALID_JSON: Final = "invalid_json"
INVALID_FRAME: Final = "invalid_frame"
UNSUPPORTED_VERSION: Final = "unsupported_version"
HELLO_REQUIRED: Final = "hello_required"
PERMISSION_DENIED: Final = "permission_denied"
SESSION_MISMATCH: Final = "session_mismatch"
DUPLICATE_MESSAGE_ID: Final = "duplicate_message_id"
LEASE_NOT_FOUND: Final = "lease_not_found"
LEASE_EXPIRED: Final = "lease_expired"
LEASE_NOT_OWNED: Final = "lease_not_owned"
REVISION_CONFLICT: Final = "revision_conflict"
INVALID_TRANSITION: Final = "invalid_transition"
TASK_CANCELLED: Final = "task_cancelled"
CANCEL_NOT_REQUESTED: Final = "cancel_not_requested"
RESULT_TOO_LARGE: Final = "result_too_large"
INVALID_RESULT: Final = "invalid_result"
CONCURRENCY_KEYS_NOT_DECLARED: Final = "concurrency_keys_not_declared"
SERVER_SHUTTING_DOWN: Final = "server_shutting_down"
INTERNAL: Final = "internal"

#: Default fatality per code (docs/protocol.md §4.8). ``permission_denied``
#: is fatal at hello; the session layer passes ``fatal=False`` on resume.
#: ``invalid_frame`` becomes fatal after MAX_INVALID_FRAMES, also by override.
FATAL: Final[dict[str, bool]] = {
    INVALID_JSON: True,
    INVALID_FRAME: False,
    UNSUPPORTED_VERSION: True,
    HELLO_REQUIRED: True,
    PERMISSION_DENIED: True,
    SESSION_MISMATCH: True,
    DUPLICATE_MESSAGE_ID: False,
    LEASE_NOT_FOUND: False,
    LEASE_EXPIRED: False,
    LEASE_NOT_OWNED: False,
    REVISION_CONFLICT: False,
    INVALID_TRANSITION: False,
    TASK_CANCELLED: False,
    CANCEL_NOT_REQUESTED: False,
    RESULT_TOO_LARGE: False,
    INVALID_RESULT: False,
    CONCURRENCY_KEYS_NOT_DECLARED: False,
    SERVER_SHUTTING_DOWN: True,
    INTERNAL: False,
}

ERROR_CODES: Final = frozenset(FATAL)

# WebSocket close codes a transport should use after a fatal error. A hint,
# like h11's status hint: the transport owns the close.
CLOSE_GOING_AWAY: Final = 1001
CLOSE_UNSUPPORTED_DATA: Final = 1003
CLOSE_INVALID_PAYLOAD: Final = 1007
CLOSE_POLICY_VIOLATION: Final = 1008
CLOSE_MESSAGE_TOO_BIG: Final = 1009


class ProtocolError(Exception):
    """A received frame breaks the contract; tells the caller how to answer."""

    code: str
    message: str
    fatal: bool
    reply_to: str | None

    def __init__(
        self,
        code: str,
        message: str,
        fatal: bool | None = None,
        reply_to: str | None = None,
    ) -> None:
        if code not in FATAL:
            raise ValueError(f"unknown error code {code!r}")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.fatal = FATAL[code] if fatal is None else fatal
        self.reply_to = reply_to

    @property
    def close_code(self) -> int | None:
        """WebSocket close code to use after sending the error, if fatal."""
        if not self.fatal:
            return None
        if self.code == SERVER_SHUTTING_DOWN:
            return CLOSE_GOING_AWAY
        if self.code == INVALID_JSON:
            return CLOSE_INVALID_PAYLOAD
        return CLOSE_POLICY_VIOLATION

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, "
            f"fatal={self.fatal!r}, reply_to={self.reply_to!r})"
        )


class FrameTooLarge(ProtocolError):
    """Over MAX_FRAME_BYTES: the transport closes with 1009, no error frame."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            INVALID_FRAME,
            f"frame is at least {size} bytes of UTF-8; the limit is {limit}",
            fatal=True,
        )
        self.size = size
        self.limit = limit

    @property
    def close_code(self) -> int:
        return CLOSE_MESSAGE_TOO_BIG


class InvalidMessage(ValueError):
    """A message object was built with a value the contract forbids."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason
