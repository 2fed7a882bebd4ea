"""What handlers raise to name their outcome, and what the SDK raises itself.

Handler outcomes are exceptions because a handler's normal return value is
its result: raising is the one way to say "this did not succeed" without a
second return channel. Each maps to exactly one ``task.finish``:

======================  =====================================================
raised                  finish
======================  =====================================================
``RetryableError``      FAILED, ``retryable: true`` (the server schedules the
                        next attempt if the task has attempts left)
``PermanentError``      FAILED, never retried automatically
``UnknownOutcome``      UNKNOWN: the effect may or may not have happened;
                        a person decides (manual recovery)
``TaskCancelled``       CANCELLED, when a cancel was requested
any other exception     FAILED, ``retryable: true``, code ``unhandled_exception``
======================  =====================================================

A task group's ``ExceptionGroup`` finishes as its first ``UnknownOutcome``,
else as its first ``PermanentError``, else as any other exception.

The SDK's own errors (``ConnectionLost``, ``CommandRefused``, ...) stay
inside the SDK except ``WorkerRefused``, which ``Worker.run`` raises when
reconnecting cannot help (a bad token, a queue the token does not allow).
"""

from __future__ import annotations

from typing import Any

from pulse_trio.contract.grammar import ERROR_CODE_PATTERN, is_error_code


def text_of(value: object) -> str:
    """``value`` as message text, whatever it is: a handler's message must fail its task, never the worker.

    ``RetryableError(exc)`` (the caught exception as the message) is the
    usual idiom, so a non-str is turned into its ``str()``, None into no
    message; an object whose ``__str__`` raises (a library exception that
    formats lazily) is named by its type instead, whatever it raised: a
    library's own ``BaseException`` let out here would end the worker.
    Only a ``KeyboardInterrupt`` goes on, the Ctrl-C that landed here.
    """
    if type(value) is str:
        return value
    if value is None:
        return ""
    try:
        return str(value)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - any failure of a foreign __str__
        return f"<{type(value).__name__}: str() raised {type(exc).__name__}>"


def _code(code: str) -> str:
    if not is_error_code(code):
        raise ValueError(f"error codes are {ERROR_CODE_PATTERN}, got {code!r}")
    return code


class HandlerOutcome(Exception):
    """Base of the outcomes a handler may raise; ``details`` becomes the finish result.

    ``message`` may be any object (the caught exception, say): it is kept as
    its text (:func:`text_of`).
    """

    default_code = "failed"

    def __init__(self, message: object = "", *, code: str | None = None, details: Any = None) -> None:
        text = text_of(message)
        super().__init__(text)
        self.message = text
        self.code = _code(code or self.default_code)
        self.details = details


class RetryableError(HandlerOutcome):
    """The attempt failed before any effect it cares about; trying again is safe."""

    default_code = "retryable"


class PermanentError(HandlerOutcome):
    """The attempt failed and another attempt would fail the same way."""

    default_code = "permanent"


class UnknownOutcome(HandlerOutcome):
    """The handler cannot tell whether its effect happened (a timeout mid-request)."""

    default_code = "unknown_outcome"


class TaskCancelled(HandlerOutcome):
    """Raised by ``TaskContext.check_cancelled()`` once the handler must stop.

    Raise (or let propagate) it to finish CANCELLED when a cancel was
    requested; when the lease was lost instead, nothing is finished.
    """

    default_code = "cancelled"


# -- the SDK's own errors -------------------------------------------------------------


class WorkerError(Exception):
    """Base of the SDK's own failures."""


class WorkerRefused(WorkerError):
    """The service refused this worker for a reason reconnecting cannot fix.

    ``status`` is the HTTP status of a refused handshake, ``code`` the error
    code of a refused hello, and ``detail`` the service's own words (the
    response body or the error frame's message), so a caller can say why.
    """

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None,
                 detail: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.detail = detail


class ConnectionLost(WorkerError):
    """The connection ended before the request was answered (it may have committed).

    ``retry_after``: the seconds a refused handshake asked the worker to wait (a 503's Retry-After), else 0.
    """

    def __init__(self, message: str = "", *, retry_after: float = 0.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ProtocolViolation(WorkerError):
    """The server sent a frame that breaks the contract; the connection is dropped."""


class CommandRefused(WorkerError):
    """The server answered a request with an error frame (nothing was committed)."""

    def __init__(self, code: str, message: str, *, fatal: bool = False, retry_after_ms: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.fatal = fatal
        self.retry_after_ms = retry_after_ms


class LeaseLost(WorkerError):
    """This worker no longer holds the lease: it expired, moved, or the task was cancelled."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
