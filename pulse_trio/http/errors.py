"""Every HTTP error is ``{"error": {"code", "message"}}`` with one status per kind.

=====  ===============================================================
400    bad input: ``invalid_json``, ``invalid_request``
401    ``unauthenticated``: no, unknown or revoked bearer token
403    ``forbidden``: the token's role or queues do not allow it
404    ``not_found``, ``task_not_found``, ``instance_not_found``, ``setting_not_found``
405    ``method_not_allowed``
409    conflict with the resource's state: ``not_retryable``, ``setting_conflict``, or a store refusal
413    ``request_too_large`` (body), ``payload_too_large`` (task payload)
415    ``unsupported_media_type``: a body that says it is not JSON
503    ``database_unavailable`` (with ``Retry-After``)
=====  ===============================================================
"""

from __future__ import annotations

import json

import pymysql
from starlette.responses import Response

from pulse_trio.client import ClientError
from pulse_trio.cluster_settings import UNKNOWN_SETTING
from pulse_trio.store.facade import StoreUnavailable
from pulse_trio.store.results import TASK_NOT_FOUND

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

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}

    def response(self) -> Response:
        return error_response(self.status, self.code, self.message, self.headers)


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps({"error": {"code": code, "message": message}}, ensure_ascii=False, separators=(",", ":"))
    return Response(body, status_code=status, media_type=JSON, headers=headers)


def bad_request(message: str, code: str = "invalid_request") -> ApiError:
    return ApiError(400, code, message)


def unauthenticated(message: str = "a valid bearer token is required: Authorization: Bearer <token>") -> ApiError:
    return ApiError(401, "unauthenticated", message, {"WWW-Authenticate": 'Bearer realm="pulse"'})


def forbidden(message: str) -> ApiError:
    return ApiError(403, "forbidden", message)


def not_found(code: str, message: str) -> ApiError:
    return ApiError(404, code, message)


def database_unavailable() -> ApiError:
    return ApiError(503, "database_unavailable", "the database is not reachable; retry later",
                    {"Retry-After": str(RETRY_AFTER_S)})


def from_client_error(exc: ClientError) -> ApiError:
    return ApiError(_CLIENT_STATUS.get(exc.code, 409), exc.code, exc.message)


def is_database_failure(exc: BaseException) -> bool:
    """The store gave up (retries exhausted) or the driver lost the server: answer 503."""
    return isinstance(exc, (StoreUnavailable, pymysql.err.OperationalError, pymysql.err.InterfaceError))
