"""A handler's return value or exception, as the fields of one ``task.finish``.

Pure functions, so the mapping of docs/protocol.md §4.5 is testable
without a server. ``finish`` requires a non-null ``result`` for every
status: a handler that returns ``None`` reports ``{}``, and failures report
the exception's ``details`` (or ``{}``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pulse_trio.contract.jsontext import JsonText, utf8_size
from pulse_trio.contract.limits import MAX_ERROR_MESSAGE_CHARS, MAX_RESULT_BYTES, MAX_RESULT_DEPTH
from pulse_trio.contract.messages import Status
from pulse_trio.sdk.errors import (
    HandlerOutcome, PermanentError, RetryableError, TaskCancelled, UnknownOutcome, text_of,
)
from pulse_trio.sdk.payload import INVALID_PAYLOAD, to_builtins

EMPTY = "{}"
UNHANDLED = "unhandled_exception"
INVALID_RESULT = "invalid_result"
RESULT_TOO_LARGE = "result_too_large"


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """What to finish with; ``fields()`` is the body of ``task.finish`` after the lease fields."""

    status: Status
    result: str = EMPTY
    error_code: str = ""
    error_message: str = ""
    retryable: bool = False

    def fields(self) -> dict[str, Any]:
        return {"status": self.status, "result": self.result, "error_code": self.error_code,
                "error_message": self.error_message, "retryable": self.retryable}

    def describe(self) -> str:
        if self.status == "SUCCEEDED":
            return f"SUCCEEDED {_short(self.result)}"
        retry = " (retryable)" if self.retryable else ""
        message = f": {self.error_message}" if self.error_message else ""
        return f"{self.status} {self.error_code}{retry}{message}"


SUCCEEDED_EMPTY = Outcome("SUCCEEDED", EMPTY)


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clean_message(text: str) -> str:
    """At most MAX_ERROR_MESSAGE_CHARS and no lone surrogates (the finish grammar)."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    return text[:MAX_ERROR_MESSAGE_CHARS]


def encode_result(value: Any, max_bytes: int = MAX_RESULT_BYTES) -> str | Outcome:
    """Canonical JSON text of a result, or the FAILED outcome that explains why it cannot be sent.

    Builtins are encoded as they are; a dataclass, ``msgspec.Struct`` or
    pydantic model (also inside lists and dicts) becomes its JSON object.
    Numbers are held to the result rules here, as the server holds them:
    an outcome's details that break them are dropped instead of the finish
    being refused (which would turn an UNKNOWN into a FAILED).
    """
    try:
        try:
            text = JsonText.from_value({} if value is None else value, max_depth=MAX_RESULT_DEPTH,
                                       check_numbers=True)
        except TypeError:
            text = JsonText.from_value(to_builtins(value), max_depth=MAX_RESULT_DEPTH, check_numbers=True)
    except Exception as exc:  # noqa: BLE001 - a model's own dump may raise anything; the effect has happened
        return Outcome("FAILED", EMPTY, INVALID_RESULT,
                       clean_message(f"the handler finished but its result is not JSON: {text_of(exc)}"))
    size = utf8_size(text)
    if size > max_bytes:
        return Outcome("FAILED", EMPTY, RESULT_TOO_LARGE,
                       f"the handler finished but its result is {size} bytes; the limit is {max_bytes}")
    return str(text)


def succeeded(value: Any, max_bytes: int = MAX_RESULT_BYTES) -> Outcome:
    if value is None or (type(value) is dict and not value):
        return SUCCEEDED_EMPTY  # the common "done, nothing to say": no encoding needed
    encoded = encode_result(value, max_bytes)
    return encoded if isinstance(encoded, Outcome) else Outcome("SUCCEEDED", encoded)


def _details(exc: HandlerOutcome, max_bytes: int) -> str:
    if exc.details is None:
        return EMPTY
    encoded = encode_result(exc.details, max_bytes)
    return EMPTY if isinstance(encoded, Outcome) else encoded


def from_exception(exc: BaseException, *, cancel_requested: bool,
                   max_bytes: int = MAX_RESULT_BYTES) -> Outcome:
    """The outcome a raised exception stands for (see ``errors``)."""
    exc = _decisive(exc)
    if isinstance(exc, HandlerOutcome):
        message = clean_message(exc.message)
        details = _details(exc, max_bytes)
        if isinstance(exc, TaskCancelled) or (cancel_requested and isinstance(exc, RetryableError)):
            # A cancelled task is never retried: a retryable failure after the
            # cancel request is reported as the cancellation it became.
            return cancelled(message, details)
        if isinstance(exc, RetryableError):
            return Outcome("FAILED", details, exc.code, message, retryable=True)
        if isinstance(exc, UnknownOutcome):
            return Outcome("UNKNOWN", details, exc.code, message)
        return Outcome("FAILED", details, exc.code, message)  # PermanentError, or a HandlerOutcome of its own
    return _unhandled(described(exc), cancel_requested=cancel_requested)


def _decisive(exc: BaseException) -> BaseException:
    """The member a task group's ``ExceptionGroup`` finishes as, or ``exc`` itself.

    The cautious reading: a child that cannot tell whether its effect
    happened makes the whole attempt unknown (a retry could repeat a
    payment); else a child's permanent failure makes it permanent. The
    first such member, depth first, names the code, message and details.
    """
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    return _member(exc, UnknownOutcome) or _member(exc, PermanentError) or exc


def _member(exc: BaseException, kind: type[HandlerOutcome]) -> HandlerOutcome | None:
    """The first ``kind`` in ``exc`` or its groups, depth first; None when there is none."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for member in exc.exceptions:
            found = _member(member, kind)
            if found is not None:
                return found
    return None


def described(exc: BaseException) -> str:
    """``Type: text`` of an exception, even one whose ``__str__`` raises (see ``errors.text_of``)."""
    return clean_message(f"{type(exc).__name__}: {text_of(exc)}")


def unmapped(exc: BaseException, error: Exception, *, cancel_requested: bool) -> Outcome:
    """What a handler's outcome finishes as when mapping it failed (a broken ``HandlerOutcome`` subclass, say).

    The handler raised, so it is what any other exception is: FAILED,
    retryable, ``unhandled_exception`` (CANCELLED after a cancel request).
    """
    return _unhandled(clean_message(f"{described(exc)} (its outcome could not be read: {described(error)})"),
                      cancel_requested=cancel_requested)


def _unhandled(message: str, *, cancel_requested: bool) -> Outcome:
    """Any exception but a handler outcome: FAILED, retryable, ``unhandled_exception`` (CANCELLED once asked)."""
    if cancel_requested:
        return cancelled(message)
    return Outcome("FAILED", EMPTY, UNHANDLED, message, retryable=True)


def invalid_payload(message: str) -> Outcome:
    """The payload does not fit the handler's type: never retried (the same payload would not fit again)."""
    return Outcome("FAILED", EMPTY, INVALID_PAYLOAD, clean_message(message))


def cancelled(message: str | None = None, result: str = EMPTY) -> Outcome:
    """CANCELLED with ``message``: the cancel's reason, or the handler's words (empty or None: no reason given)."""
    return Outcome("CANCELLED", result, "cancelled", clean_message(message or "cancelled by request"))


def fallback(refused: Outcome, code: str, message: str) -> Outcome:
    """What to send when the server refused ``refused`` for its content (result, status)."""
    return Outcome("FAILED", EMPTY, code, clean_message(
        f"the server refused finishing {refused.status}: {message}"))
