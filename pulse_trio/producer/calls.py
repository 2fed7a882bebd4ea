"""Every producer call as sans-IO steps: the requests it makes and what it makes of the answers.

Each call is a generator that yields :class:`Request` values and is sent
:class:`Answer` values back; its return value is the call's result, and a
refusal is raised from inside it. :class:`~pulse_trio.producer.Client`
drives the generators with a blocking ``httpx.Client``,
:class:`~pulse_trio.producer.AsyncClient` with an ``httpx.AsyncClient``:
the two share every rule here, so they cannot drift apart (h11's design,
applied to an HTTP client).

Nothing is judged here that the API judges: bad input travels to the API
and comes back with the API's code. Only what cannot travel is refused
here, with the code the API would give it (a payload that is not JSON,
a naive ``due_at``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from typing import Any, TypeVar

from pulse_trio.client.producer import InvalidRequest, TaskNotFound, check_time
from pulse_trio.client.ranges import MAX_WAIT_S
from pulse_trio.contract.grammar import TASK_PREFIX, is_resource_id, is_text
from pulse_trio.producer.errors import OUTCOME_ERRORS, RequestRefused, WaitTimeout

T = TypeVar("T")

#: The longest single long-poll a wait asks for; a longer wait asks again.
LONG_POLL_S = 30.0
assert LONG_POLL_S <= MAX_WAIT_S
#: How much longer than its long-poll a request may take to be answered before the client gives up on it.
READ_SLACK_S = 10.0
#: How long past its own timeout a wait may still wait for the answer to its last request: a service that
#: accepts connections but never answers (frozen, partitioned) does not hold a wait beyond its timeout.
OVERRUN_S = 1.0
#: A wait whose request found no service (a restart, a 503) asks again after this pause, until its timeout.
RETRY_PAUSE_S = 1.0
_NO_BODY = object()
#: Answers that say no service answered: the service's own 503 (its database away, too many waits), and a
#: gateway's 502 and 504 (it reached no instance, or had no answer within its own timeout).
UNANSWERED_STATUSES = frozenset({502, 503, 504})


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    """One HTTP request of a call: a path under the API's base URL, a JSON body, its own read timeout."""

    method: str
    path: str
    params: Mapping[str, str] | None = None
    body: Any = _NO_BODY
    timeout: float | None = None  # None: the client's
    #: Safe to send again when the service cannot be reached (a read): the driver hands the call an
    #: Answer with the transport's failure instead of raising it, and the call decides.
    retry: bool = False
    #: Seconds the driver sleeps before sending (a wait asking again after the service was away).
    pause: float = 0.0
    #: Safe to send twice: a read, or a write the API makes idempotent (a submit whose every task has an
    #: idempotency key, a cancel, a retry). The driver sends it once more when its connection drops
    #: before any answer (:func:`resends`), as a kept-alive one does that the service closed as idle
    #: just as the request went out. A write without that safety is never sent twice; nor is a wait's
    #: long-poll, which plans each request from its deadline (:func:`wait_task`).
    idempotent: bool = False

    def content(self) -> bytes | None:
        if self.body is _NO_BODY:
            return None
        try:
            return _json(self.body)
        except (TypeError, ValueError) as exc:
            where, field = _unsendable(self.body)
            raise InvalidRequest(f"{where} cannot be sent as JSON: {exc}", field) from None


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def _sends(value: Any) -> bool:
    try:
        _json(value)
    except (TypeError, ValueError):
        return False
    return True


def _unsendable(body: Any) -> tuple[str, str | None]:
    """The member of a body that no JSON text holds, as words for the refusal and the field it names.

    Any field may be the one (a ``date`` for ``due_at``, a ``Decimal``, a lone
    surrogate), so the refusal names it rather than the payload; a batch's
    task is named by its index, as the API's items do.
    """
    if isinstance(body, dict):
        for name, value in body.items():
            if name == "tasks" and isinstance(value, list):
                for index, item in enumerate(value):
                    if not _sends(item):
                        where, field = _unsendable(item)
                        return f"task {index}: {where}", field
            elif not _sends({name: value}):
                return (name, name) if isinstance(name, str) and _sends(name) else ("a field name", None)
    return "the request", None


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    status: int  # 0: no answer (``error`` says why)
    body: Any  # the parsed JSON, None when there was none
    error: BaseException | None = None

    @property
    def unavailable(self) -> bool:
        """No service answered, or it answered 503, or a gateway in front answered for it: worth asking again."""
        return self.error is not None or self.status in UNANSWERED_STATUSES


Call = Generator[Request, Answer, T]


def answer(status: int, content: bytes) -> Answer:
    """An :class:`Answer` from a response's status and bytes (a body that is not JSON reads as None)."""
    try:
        return Answer(status, json.loads(content) if content else None)
    except ValueError:
        return Answer(status, None)


def drive(call: Call[T], send: Callable[[Request], Answer]) -> T:
    """Run ``call`` to its result with a blocking ``send`` (the async driver is the same loop with ``await``).

    ``send`` raises what the transport raises; for a ``retry`` request the
    driver hands the failure to the call instead.
    """
    try:
        request = next(call)
        while True:
            if request.pause > 0:
                time.sleep(request.pause)
            try:
                reply = send_idempotent(send, request)
            except Exception as exc:
                if not (request.retry and is_transport_error(exc)):
                    raise
                reply = Answer(0, None, exc)
            request = call.send(reply)
    except StopIteration as done:
        return done.value


def send_idempotent(send: Callable[[Request], T], request: Request) -> T:
    """``send(request)``, and once more when it is to be sent again (:func:`resends`)."""
    try:
        return send(request)
    except Exception as exc:
        if not resends(request, exc):
            raise
    return send(request)


def resends(request: Request, exc: BaseException) -> bool:
    """Whether ``request``, which failed with ``exc``, goes out once more: an idempotent one whose connection
    dropped before any answer (both drivers ask this)."""
    return request.idempotent and dropped(exc)


def dropped(exc: BaseException) -> bool:
    """The connection closed or was reset before an answer came (not a timeout, not a refused connect)."""
    import httpx

    return isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError))


def is_transport_error(exc: BaseException) -> bool:
    """A failure to reach the service (refused, reset, timed out), as httpx reports it."""
    import httpx

    return isinstance(exc, httpx.TransportError)


def _expect(reply: Answer, *ok: int, task_id: str | None = None) -> Any:
    """The body of an answer with one of the ``ok`` statuses; the API's refusal raised otherwise."""
    if reply.status in ok:
        return reply.body
    raise _refusal(reply, task_id)


def _refusal(reply: Answer, task_id: str | None = None) -> BaseException:
    """What went wrong with an answer: the transport's failure, or the API's refusal as a ClientError."""
    if reply.error is not None:
        return reply.error
    error = reply.body.get("error") if isinstance(reply.body, dict) else None
    if not isinstance(error, dict):
        return RequestRefused(reply.status, "http_error", f"the API answered HTTP {reply.status} without an error")
    code, message = str(error.get("code", "http_error")), str(error.get("message", ""))
    if code == "task_not_found":
        exc = TaskNotFound(task_id or "")
        exc.status = reply.status  # type: ignore[attr-defined]
        return exc
    return RequestRefused(reply.status, code, message, error.get("items"))


def _task_path(task_id: Any, *rest: str) -> str:
    """``/v1/tasks/{id}/...``; a value that cannot be a task id names no task, as the API and the direct client say."""
    if type(task_id) is not str or not is_resource_id(task_id, TASK_PREFIX):
        raise TaskNotFound(str(task_id)[:80])
    return "/".join(("/v1/tasks", task_id, *rest))


# -- bodies -------------------------------------------------------------------------------------

def _wire(name: str, value: Any) -> Any:
    """A submit option as the API takes it: times as UTC RFC 3339, durations as seconds."""
    if isinstance(value, dt.datetime):
        return check_time(name, value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return value


def task(queue: str, kind: str, payload: Any = None, **options: Any) -> dict[str, Any]:
    """One task to submit, as the API's submit body: the fields of ``docs/http-api.md`` (Submit fields).

    ``due_at`` may be an aware ``datetime``, ``delay`` and the durations a ``timedelta`` or seconds.
    """
    body: dict[str, Any] = {"queue": queue, "kind": kind}
    if payload is not None:
        body["payload"] = payload
    body.update((name, _wire(name, value)) for name, value in options.items() if value is not None)
    return body


# -- the calls ----------------------------------------------------------------------------------

def _keyed(body: Any) -> bool:
    """A submit body with an idempotency key: sent twice, it still makes one task."""
    return isinstance(body, Mapping) and body.get("idempotency_key") is not None


def submit(body: dict[str, Any]) -> Call[dict[str, Any]]:
    """The task view, with ``created`` (False: the idempotency key named an existing task)."""
    return _expect((yield Request("POST", "/v1/tasks", body=body, idempotent=_keyed(body))), 200, 201)


def submit_many(bodies: Iterable[Mapping[str, Any]]) -> Call[list[dict[str, Any]]]:
    """``task_id``, ``state`` and ``created`` per task, in order; all submitted in one transaction, or none.

    A task that is not a mapping is sent as it is: the API refuses it with its own item (``field`` null).
    """
    items = [dict(b) if isinstance(b, Mapping) else b for b in bodies]
    keyed = all(_keyed(item) for item in items)
    return _expect((yield Request("POST", "/v1/tasks/batch", body={"tasks": items}, idempotent=keyed)), 200,
                   201)["tasks"]


def get(task_id: str) -> Call[dict[str, Any]]:
    return _expect((yield Request("GET", _task_path(task_id), idempotent=True)), 200, task_id=task_id)


def list_tasks(filters: Mapping[str, Any]) -> Call[dict[str, Any]]:
    """A page; a filter no URL holds (a lone surrogate) is refused naming it, not left to httpx's encoding."""
    params = {name: str(value).lower() if isinstance(value, bool) else str(value)
              for name, value in filters.items() if value is not None}
    for name, value in params.items():
        if not is_text(value, len(value)):
            raise InvalidRequest(f"{name} cannot be sent in a URL: it holds a lone surrogate", name)
    return _expect((yield Request("GET", "/v1/tasks", params=params, idempotent=True)), 200)


def cancel(task_id: str, reason: str) -> Call[dict[str, Any]]:
    body = {"reason": reason} if reason else {}
    return _expect((yield Request("POST", _task_path(task_id, "cancel"), body=body, idempotent=True)), 200,
                   task_id=task_id)


def retry(task_id: str) -> Call[dict[str, Any]]:
    return _expect((yield Request("POST", _task_path(task_id, "retry"), body={}, idempotent=True)), 200, 201,
                   task_id=task_id)


def outcome(view: dict[str, Any]) -> Any:
    """A terminal task's result, or its typed error (FAILED, UNKNOWN, CANCELLED)."""
    error = OUTCOME_ERRORS.get(view["state"])
    if error is not None:
        raise error(view)
    return (view.get("outcome") or {}).get("result")


def _wait_seconds(timeout: float | None) -> float:
    """A wait's timeout as seconds: None and numbers beyond a float's range are no limit; a bool is no number."""
    if timeout is None:
        return math.inf
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout != timeout:  # NaN
        raise InvalidRequest("timeout must be a number of seconds (or None: no limit)", "timeout")
    if timeout <= 0:
        return 0.0
    try:
        return float(timeout)
    except OverflowError:  # an int past 1.8e308 seconds: longer than any wait
        return math.inf


def wait_task(task_id: str, timeout: float | None, *,
              clock: Callable[[], float] = time.monotonic) -> Call[dict[str, Any]]:
    """The task's view once terminal (long-polls of at most ``LONG_POLL_S``); WaitTimeout after ``timeout`` s.

    A service that cannot be reached, or answers 503 (or a gateway in front of
    it 502 or 504: ``UNANSWERED_STATUSES``), is asked again every
    ``RETRY_PAUSE_S`` until the timeout: a wait outlives a restart of ``serve``.
    No request outlasts the timeout by more than ``OVERRUN_S``, and a wait
    whose timeout passes while the service is away ends as a WaitTimeout
    too (with the view last seen, chained from the last failure).
    """
    path = _task_path(task_id, "outcome")
    wait_s = _wait_seconds(timeout)
    deadline = clock() + wait_s
    seen: dict[str, Any] | None = None
    pause, dropping = 0.0, False
    while True:
        left = max(0.0, deadline - clock())
        pause = min(pause, left)
        chunk = min(LONG_POLL_S, left - pause)
        limit = min(chunk + READ_SLACK_S, left - pause + OVERRUN_S)
        # Not ``idempotent``: the driver would send the same request again, planned for a deadline that has moved.
        reply = yield Request("GET", path, params={"wait": f"{chunk:.3f}"}, timeout=limit, retry=True, pause=pause)
        ran_out = clock() >= deadline
        if reply.unavailable:
            if not ran_out:
                # A kept-alive connection the service closed as idle is asked again at once; a drop again, or
                # anything else (a restart, a database away), after a pause: the wait goes on until its timeout.
                drop = reply.error is not None and dropped(reply.error)
                pause, dropping = (0.0 if drop and not dropping else RETRY_PAUSE_S), drop
                continue
            timed_out = WaitTimeout(seen, wait_s) if seen else WaitTimeout.unanswered(task_id, wait_s)
            raise timed_out from _refusal(reply, task_id)
        view = _expect(reply, 200, task_id=task_id)
        if view.get("done"):
            return view
        if ran_out:
            raise WaitTimeout(view, wait_s)
        seen, pause, dropping = view, 0.0, False


def wait(task_id: str, timeout: float | None) -> Call[Any]:
    """The outcome once the task is terminal: its result, or the typed error of its end."""
    return outcome((yield from wait_task(task_id, timeout)))
