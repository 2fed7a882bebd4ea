"""Every HTTP error is ``{"error": {"code", "message"}}`` with one status per kind.

=====  ===============================================================
400    bad input: ``invalid_json``, ``invalid_request``
401    ``unauthenticated``: no, unknown or revoked bearer token
403    ``forbidden``: the token's role or queues do not allow it
404    ``not_found``, ``task_not_found``, ``instance_not_found``, ``setting_not_found``
405    ``method_not_allowed``
409    conflict with the resource's state: ``not_retryable``, ``setting_conflict``, or a store refusal
408    ``request_timeout``: the body did not arrive within ``--http-body-timeout``
413    ``request_too_large`` (body), ``payload_too_large`` (task payload)
415    ``unsupported_media_type``: a body that says it is not JSON
422    ``invalid_schedule``: a schedule field out of its rule; ``invalid_request``: a value of the
       queue endpoints out of its rule; ``field`` names it
500    ``internal``: a defect, logged with its traceback
503    ``database_unavailable`` (with ``Retry-After``): the database cannot be reached, nothing else;
       ``too_many_waits`` (with ``Retry-After``): an outcome long-poll beyond the process's bound
=====  ===============================================================

A database error is an outage only when the connection is gone (the store's
retries ran out, or the driver lost the server): that is the one failure a
client should retry, so of the database errors it alone is 503. A value the database refuses (out
of a column's range, a character set the column cannot hold) is bad input
the validation missed: 400. Anything else is a defect: 500.
"""

from __future__ import annotations

import json

import pymysql
from starlette.responses import Response

from pulse_trio.client import ClientError
from pulse_trio.cluster_settings import UNKNOWN_SETTING
from pulse_trio.store.engine.facade import database_away
from pulse_trio.store.engine.codes import TASK_NOT_FOUND

RETRY_AFTER_S = 1
JSON = "application/json"

#: ClientError codes that are not conflicts (everything else a refusal says is a 409).
_CLIENT_STATUS = {
    "invalid_request": 400,
    TASK_NOT_FOUND: 404,
    UNKNOWN_SETTING: 404,
    "payload_too_large": 413,
}


class ApiError(Exception):
    """An answer other than success; raised anywhere below a handler."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None, *,
                 field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}
        #: The input at fault, where one is. A 422 names it in its answer; a 400 keeps it for a batch's
        #: refusal, which names it per task (a single 400 answers code and message only).
        self.field = field

    def response(self) -> Response:
        field = self.field if self.status == 422 else None
        return error_response(self.status, self.code, self.message, self.headers, field=field)


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None, *,
                   field: str | None = None, items: list[dict[str, object]] | None = None) -> Response:
    error: dict[str, object] = {"code": code, "message": message}
    if field is not None:
        error["field"] = field
    if items is not None:
        error["items"] = items
    body = json.dumps({"error": error}, ensure_ascii=False, separators=(",", ":"))
    return Response(body, status_code=status, media_type=JSON, headers=headers)


class BatchRefused(ApiError):
    """A batch with refused tasks: nothing was submitted; ``items`` names each refusal (index, code, field)."""

    def __init__(self, status: int, code: str, message: str, items: list[dict[str, object]]) -> None:
        super().__init__(status, code, message)
        self.items = items

    def response(self) -> Response:
        return error_response(self.status, self.code, self.message, items=self.items)


def bad_request(message: str, code: str = "invalid_request", field: str | None = None) -> ApiError:
    return ApiError(400, code, message, field=field)


def unprocessable(field: str, message: str) -> ApiError:
    """422: a well-formed request whose ``field`` breaks its rule (the message names it too)."""
    return ApiError(422, "invalid_request", message, field=field)


def unauthenticated(message: str = "a valid bearer token is required: Authorization: Bearer <token>") -> ApiError:
    return ApiError(401, "unauthenticated", message, {"WWW-Authenticate": 'Bearer realm="pulse"'})


def forbidden(message: str) -> ApiError:
    return ApiError(403, "forbidden", message)


def not_found(code: str, message: str) -> ApiError:
    return ApiError(404, code, message)


def database_unavailable() -> ApiError:
    return ApiError(503, "database_unavailable", "the database is not reachable; retry later",
                    {"Retry-After": str(RETRY_AFTER_S)})


def too_many_waits() -> ApiError:
    """This process holds as many outcome long-polls as it may: the client asks again after ``Retry-After``.

    The connection is closed too: kept alive, it would hold one of the connections the waits left free.
    """
    return ApiError(503, "too_many_waits", "this server holds as many outcome waits as it may; retry later",
                    {"Retry-After": str(RETRY_AFTER_S), "Connection": "close"})


def from_client_error(exc: ClientError) -> ApiError:
    return ApiError(_CLIENT_STATUS.get(exc.code, 409), exc.code, exc.message, field=exc.field)


#: Server errors that say a value does not fit a column (range, length, character set, collation, date).
INPUT_REFUSED = frozenset({1264, 1265, 1266, 1267, 1270, 1271, 1292, 1300, 1366, 1406, 1690})


def database_error(exc: BaseException) -> ApiError | None:
    """The answer for a database error (None: not one). Only a lost connection is 503."""
    if database_away(exc):
        return database_unavailable()
    if not isinstance(exc, pymysql.err.MySQLError):
        return None
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    if isinstance(exc, pymysql.err.DataError) or code in INPUT_REFUSED:
        return bad_request("a value does not fit what the database stores for it")
    return ApiError(500, "internal", "internal error; it has been logged")
