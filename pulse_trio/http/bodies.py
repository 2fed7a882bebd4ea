"""Request bodies and query strings, read with the same strictness as frames.

A body is at most ``MAX_BODY_BYTES`` (the frame limit, 512 KiB), checked
from ``Content-Length`` and again while reading, before any parsing. It
must be UTF-8 and strict JSON as the worker contract's scanner defines it
(no duplicate keys, no NaN, no lone surrogates, bounded depth); objects are
closed: an unknown field is an error, not something silently ignored.
An integer field takes what JSON Schema calls an integer: any number
without a fractional part (``1``, ``1.0`` and ``1e0`` are the same), never
``true``. An optional
field given as ``null`` counts as not given (``payload`` excepted: ``null``
is a payload like any other JSON value).
"""

from __future__ import annotations

import codecs
import dataclasses
import datetime as dt
import re
from decimal import Decimal
from typing import Any, TypeVar
from urllib.parse import unquote_to_bytes

import trio
from starlette.requests import ClientDisconnect, Request

from pulse_trio.client import ranges
from pulse_trio.client.producer import check_name
from pulse_trio.contract.grammar import is_resource_id, parse_time
from pulse_trio.contract.jsontext import dumps
from pulse_trio.contract.limits import MAX_DEPTH, MAX_FRAME_BYTES, MAX_IDEMPOTENCY_KEY_CHARS
from pulse_trio.contract.scanner import JsonNumber, ScanError, scan
from pulse_trio.http.errors import ApiError, bad_request

HandlerT = TypeVar("HandlerT")

MAX_BODY_BYTES = MAX_FRAME_BYTES
#: When the application does not say (``app.state.body_timeout``, from ``--http-body-timeout``).
DEFAULT_BODY_TIMEOUT_S = 10.0
_JSON_TYPES = ("application/json",)
_CHARSET = "utf-8"


async def read_json(request: Request, *, optional: bool = False) -> dict[str, Any]:
    """The body as a strict JSON object (``{}`` for an empty optional body).

    A ``Content-Type`` given twice is refused, not read as its first: the
    other may name the charset the body was written in.
    """
    content_types = request.headers.getlist("content-type")
    if len(content_types) > 1:
        raise bad_request("the Content-Type header is given twice; send one")
    if content_types:
        _check_content_type(content_types[0])
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise bad_request("Content-Length is not a number")
        if int(declared) > MAX_BODY_BYTES:
            raise _too_large()
    chunks: list[bytes] = []
    size = 0
    timeout = getattr(request.app.state, "body_timeout", DEFAULT_BODY_TIMEOUT_S)
    with trio.move_on_after(timeout) as reading:
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise _too_large()
                chunks.append(chunk)
        except ClientDisconnect:
            raise bad_request("the connection closed before the body was complete", "request_incomplete") from None
    if reading.cancelled_caught:
        raise ApiError(408, "request_timeout", f"the request body did not arrive within {timeout:g} s")
    raw = b"".join(chunks)
    if not raw.strip() and optional:
        return {}
    try:
        text = raw.decode(_CHARSET)
    except UnicodeDecodeError:
        raise bad_request("the body is not UTF-8", "invalid_json") from None
    try:
        value = scan(text, max_depth=MAX_DEPTH)
    except ScanError as exc:
        raise bad_request(f"the body is not strict JSON: {exc}", "invalid_json") from None
    if not isinstance(value, dict):
        raise bad_request("the body must be a JSON object")
    return value


def _check_content_type(content_type: str) -> None:
    """415 unless the body is declared JSON, in UTF-8 if a charset is named: a body is only ever read as UTF-8,
    and another charset's bytes read so could be a different text than the one sent."""
    media, *params = content_type.split(";")
    media = media.strip().lower()
    if media not in _JSON_TYPES:
        raise ApiError(415, "unsupported_media_type",
                       f"the body must be JSON: send Content-Type: application/json (got {media or 'nothing'})")
    for param in params:
        name, _, value = param.partition("=")
        charset = value.strip().strip('"').lower()
        if name.strip().lower() == "charset" and not _is_utf8(charset):
            raise ApiError(415, "unsupported_media_type",
                           f"the body must be UTF-8 JSON: send charset={_CHARSET} or none (got {charset[:40]})")


def _is_utf8(charset: str) -> bool:
    """Whether a declared charset names UTF-8 under any of its names (``utf8``, ``UTF-8``, ``u8``)."""
    try:
        return codecs.lookup(charset).name == _CHARSET
    except LookupError:
        return False


def _too_large() -> ApiError:
    return ApiError(413, "request_too_large", f"the request body is larger than {MAX_BODY_BYTES} bytes")


# -- typed fields -----------------------------------------------------------------------------

def _allowed(names: frozenset[str], what: str) -> str:
    """The names a refusal offers instead; never an empty list."""
    return f"allowed: {', '.join(sorted(names))}" if names else f"this takes no {what}s"


def _closed(body: dict[str, Any], allowed: frozenset[str], required: tuple[str, ...] = ()) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise bad_request(f"unknown field(s): {', '.join(unknown)}; {_allowed(allowed, 'field')}", field=unknown[0])
    missing = [name for name in required if name not in body]
    if missing:
        raise bad_request(f"missing required field(s): {', '.join(missing)}", field=missing[0])


def _string(body: dict[str, Any], name: str, *, optional: bool = True) -> str | None:
    value = body.get(name)
    if value is None and optional:
        return None
    if type(value) is not str:
        raise bad_request(f"{name} must be a string", field=name)
    return value


def _number(body: dict[str, Any], field: ranges.Range) -> int | float | None:
    """A numeric field held to its range (:mod:`pulse_trio.client.ranges`); None when not given."""
    value = body.get(field.name)
    if value is None:
        return None
    if isinstance(value, JsonNumber):
        value = value.exact()  # a fraction, an exponent, or a long integer: exact, then judged by range
        if value is None:
            raise bad_request(f"{field.name} must be {field.spelled}", field=field.name)
        if field.integer and value != value.to_integral_value():
            raise bad_request(f"{field.name} must be a JSON integer: {field.spelled}", field=field.name)
    elif field.integer and type(value) is not int:
        raise bad_request(f"{field.name} must be a JSON integer: {field.spelled}", field=field.name)
    try:
        return field.check(value)
    except ranges.OutOfRange as exc:
        raise bad_request(str(exc), field=field.name) from None


def _boolean(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if type(value) is not bool:
        raise bad_request(f"{name} must be true or false", field=name)
    return value


#: What the ``Idempotency-Key`` header may hold: printable ASCII, blanks only inside (HTTP strips them at
#: the ends, so a key that began or ended with one could not arrive intact).
IDEMPOTENCY_HEADER_PATTERN = r"^[!-~]([\t -~]*[!-~])?$"
IDEMPOTENCY_HEADER = re.compile(IDEMPOTENCY_HEADER_PATTERN)

SUBMIT_FIELDS = frozenset({
    "queue", "kind", "payload", "priority", "delay", "due_at", "idempotency_key", "concurrency_key",
    "concurrency_limit", "fairness_key", "max_attempts", "retry_uncertain", "lease_ttl", "backoff_initial", "backoff_factor",
    "backoff_max",
})


@dataclasses.dataclass(frozen=True, slots=True)
class Submission:
    """A parsed ``POST /v1/tasks`` body: the arguments of ``build_task``."""

    queue: str
    kind: str
    options: dict[str, Any]


def submission(body: dict[str, Any], idempotency_header: str | None) -> Submission:
    """The submit body as ``build_task`` arguments; the Idempotency-Key header counts as the field."""
    _closed(body, SUBMIT_FIELDS, ("queue", "kind"))
    key = _string(body, "idempotency_key")
    if idempotency_header is not None:
        if (IDEMPOTENCY_HEADER.fullmatch(idempotency_header) is None
                or len(idempotency_header) > MAX_IDEMPOTENCY_KEY_CHARS):
            raise bad_request(f"the Idempotency-Key header must be 1-{MAX_IDEMPOTENCY_KEY_CHARS} printable ASCII "
                              "characters (tabs and spaces only inside); send any other key as the "
                              "idempotency_key field")
        if key is not None and key != idempotency_header:
            raise bad_request("the Idempotency-Key header and the idempotency_key field disagree",
                              field="idempotency_key")
        key = idempotency_header
    payload_json = "{}"
    if "payload" in body:
        payload_json, problem = dumps(body["payload"], check_numbers=True)
        if problem:
            raise bad_request(f"payload: {problem}", field="payload")
    due_at: dt.datetime | None = None
    if (due := _string(body, "due_at")) is not None:
        try:
            due_at = parse_time(due)
        except ValueError as exc:
            raise bad_request(f"due_at: {exc}", field="due_at") from None
    numbers = {name: _number(body, field) for name, field in ranges.SUBMIT.items()}
    for name in ("priority", "concurrency_limit", "max_attempts"):
        if numbers[name] is None:
            numbers[name] = ranges.SUBMIT[name].default
    options = dict(
        payload_json=payload_json, due_at=due_at, idempotency_key=key, concurrency_key=_string(body, "concurrency_key"),
        fairness_key=_string(body, "fairness_key"),
        retry_uncertain=_boolean(body, "retry_uncertain", False), **numbers,
    )
    return Submission(check_name("queue", body["queue"]), check_name("kind", body["kind"]), options)


def batch(body: dict[str, Any]) -> list[Any]:
    """``POST /v1/tasks/batch``: ``{"tasks": [submit body, ...]}``, 1 to ``MAX_BATCH`` of them (each judged later)."""
    _closed(body, frozenset({"tasks"}), ("tasks",))
    items = body["tasks"]
    if type(items) is not list or not 1 <= len(items) <= ranges.MAX_BATCH:
        raise bad_request(f"tasks must be a list of 1-{ranges.MAX_BATCH} task objects", field="tasks")
    return items


def no_fields(body: dict[str, Any]) -> None:
    """For actions that take no fields: an empty body or ``{}``."""
    _closed(body, frozenset())


def cancel_reason(body: dict[str, Any]) -> str:
    _closed(body, frozenset({"reason"}))
    reason = _string(body, "reason") or ""
    if len(reason) > ranges.MAX_CANCEL_REASON_CHARS:
        raise bad_request(f"reason is longer than {ranges.MAX_CANCEL_REASON_CHARS} characters")
    return reason


def _seconds_or_null(value: Any, name: str) -> Decimal | int | None:
    """A cluster setting's value as sent: a JSON number of seconds, or null (the setting's own rules follow)."""
    if value is None or type(value) is int:
        return value
    if isinstance(value, JsonNumber):
        number = value.exact()
        if number is None:
            raise bad_request(f"{name} is far outside every setting's range")
        return number
    raise bad_request(f"{name} must be a number of seconds (or null where the setting allows it)")


def setting_value(body: dict[str, Any]) -> Decimal | int | None:
    """``PUT /v1/settings/{name}``: ``{"value": seconds or null}``."""
    _closed(body, frozenset({"value"}), ("value",))
    return _seconds_or_null(body["value"], "value")


def weight_value(body: dict[str, Any]) -> int:
    """``PUT /v1/fairness-weights/{key}``: ``{"weight": N}``, a whole number in its range."""
    _closed(body, frozenset({"weight"}), ("weight",))
    weight = _number(body, ranges.FAIRNESS_WEIGHT)
    if weight is None:
        raise bad_request(f"weight must be {ranges.FAIRNESS_WEIGHT.spelled}")
    return int(weight)


def setting_values(body: dict[str, Any], names: tuple[str, ...]) -> dict[str, Decimal | int | None]:
    """``PATCH /v1/settings``: ``{"name": seconds or null, ...}``, at least one, each a cluster setting."""
    _closed(body, frozenset(names))
    if not body:
        raise bad_request(f"name at least one setting to change: {', '.join(names)}")
    return {name: _seconds_or_null(value, name) for name, value in body.items()}


# -- path and query ------------------------------------------------------------------------------

def resource_id(value: str, prefix: str, what: str, code: str) -> str:
    """A ``tsk_…`` / ``ins_…`` path segment; a malformed one cannot name anything (404)."""
    if not is_resource_id(value, prefix):
        raise ApiError(404, code, f"no {what} {value[:80]}")
    return value


def idempotency_header(request: Request) -> str | None:
    """The ``Idempotency-Key`` header; given twice it is refused, not read as its first value."""
    values = request.headers.getlist("idempotency-key")
    if len(values) > 1:
        raise bad_request("the Idempotency-Key header is given twice")
    return values[0] if values else None


def takes_idempotency_header(handler: HandlerT) -> HandlerT:
    """Marks a ``/v1`` handler that reads the ``Idempotency-Key`` header itself (:func:`idempotency_header`).

    Every other ``/v1`` handler refuses it (:func:`no_idempotency_header`): ignored, it promised a replay
    the operation never gives.
    """
    handler.takes_idempotency_header = True  # type: ignore[attr-defined]
    return handler


def no_idempotency_header(request: Request) -> None:
    """400 when the request carries an ``Idempotency-Key`` header: this operation does not take one."""
    if "idempotency-key" in request.headers:
        raise bad_request("this operation takes no Idempotency-Key header; only POST /v1/tasks does "
                          "(a batch takes each task's idempotency_key)")


def judges_query(handler: HandlerT) -> HandlerT:
    """Marks a ``/v1`` handler that reads its own query parameters (through :func:`query`).

    Every other ``/v1`` handler takes none: the route refuses any it is given
    (``pulse_trio.http.app``), so a mistyped parameter is never silently ignored.
    """
    handler.judges_query = True  # type: ignore[attr-defined]
    return handler


def query_items(raw: bytes) -> list[tuple[str, str]]:
    """The query string's name/value pairs, percent-decoded as strict UTF-8 (400 otherwise).

    Not Starlette's ``query_params``: it reads bytes that are not UTF-8 as
    U+FFFD, so ``idempotency_key=%FF`` would find the task whose key is that
    character, and a filter nobody sent would answer an empty page.
    """
    items = []
    for field in raw.split(b"&"):
        if not field:
            continue
        name, _, value = field.partition(b"=")
        try:
            items.append((unquote_to_bytes(name.replace(b"+", b" ")).decode(_CHARSET),
                          unquote_to_bytes(value.replace(b"+", b" ")).decode(_CHARSET)))
        except UnicodeDecodeError:
            raise bad_request("the query string is not UTF-8 once percent-decoded") from None
    return items


def query(request: Request, allowed: frozenset[str]) -> dict[str, str]:
    """Query parameters, each at most once, none unknown."""
    items = query_items(request.scope.get("query_string", b""))
    names = [k for k, _ in items]
    unknown = sorted(set(names) - allowed)
    if unknown:
        raise bad_request(f"unknown query parameter(s): {', '.join(unknown)}; {_allowed(allowed, 'query parameter')}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise bad_request(f"query parameter(s) given twice: {', '.join(repeated)}")
    return dict(items)


def query_number(params: dict[str, str], field: ranges.Range) -> Any:
    """A numeric query parameter by its range (the default when absent)."""
    text = params.get(field.name)
    if text is None:
        return field.default
    try:
        return field.check_text(text)
    except ranges.OutOfRange as exc:
        raise bad_request(str(exc)) from None


def query_bool(params: dict[str, str], name: str) -> bool:
    text = params.get(name, "false")
    if text not in ("true", "false"):
        raise bad_request(f"{name} must be true or false")
    return text == "true"
