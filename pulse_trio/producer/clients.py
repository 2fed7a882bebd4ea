"""``Client`` and ``AsyncClient``: the producer calls over the HTTP API, with the same names.

Both hold one ``httpx`` connection pool for their life (open them once,
share them, close them: ``with`` / ``async with``), send the token on every
request, and run the sans-IO calls of :mod:`pulse_trio.producer.calls`.
``AsyncClient`` runs under asyncio and Trio alike (httpx is written
against AnyIO). A task handle's ``result()`` waits for the outcome.
"""

from __future__ import annotations

import dataclasses
import functools
import ssl
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import anyio
import httpx

from pulse_trio.contract.credentials import check_token
from pulse_trio.contract.options import check_seconds
from pulse_trio.producer import calls
from pulse_trio.producer.calls import Answer, Call, Request

T = TypeVar("T")

#: ``timeout=``: httpx's for each request, each of its steps alone (connecting, a connection from the pool,
#: each write, each read), not the whole call; a wait's long-polls set their own (``calls.wait_task``).
DEFAULT_TIMEOUT_S = 10.0
#: How long an idle connection is kept for the next call: well within serve's default
#: ``--http-idle-timeout``, so the client lets it go before the service closes it, rather than send a
#: request on a connection the service is closing (a keyless submit is never sent twice).
KEEPALIVE_EXPIRY_S = 2.0
#: No cap on open connections: a waiting handle holds one for each long-poll, so under httpx's cap a
#: shared client's other calls would queue behind the waits and fail. The idle ones kept stay capped.
DEFAULT_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=20, keepalive_expiry=KEEPALIVE_EXPIRY_S)


@functools.cache
def default_tls() -> ssl.SSLContext:
    """What ``verify=True`` means (httpx's default: certifi's CA file, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``),
    built at the process's first client and shared by every client after it.

    httpx builds it anew for each client, reading the CA file, which cost more
    than the rest of a client's construction; a context holds no per-client
    state and the clients all set the same ALPN on it (HTTP/1.1 only).
    """
    return httpx.create_ssl_context()


def _verify(verify: Any) -> Any:
    """``verify`` as given, but ``True`` as the process's shared default context."""
    return default_tls() if verify is True else verify


def _check_timeout(timeout: object) -> None:
    """Seconds, or httpx's own ``Timeout`` (a short connect beside a longer read) with every step bounded: a zero
    one fails each request, a None or NaN one waits for ever (a service that never answers hangs the caller)."""
    if isinstance(timeout, httpx.Timeout):
        for step in ("connect", "read", "write", "pool"):
            check_seconds(f"timeout.{step}", getattr(timeout, step))
    else:
        check_seconds("timeout", timeout)


def _options(url: str, token: str, timeout: float | httpx.Timeout, headers: Mapping[str, str] | None,
             limits: httpx.Limits) -> dict[str, Any]:
    if not isinstance(token, str) or not token:
        raise ValueError("a producer (or operator) token is required: pulse-trio token create --role producer")
    check_token(token, "producer")  # else httpx's refusal of the header would quote it
    _check_timeout(timeout)
    return dict(base_url=url.rstrip("/"), timeout=timeout, limits=limits,
                headers={**(headers or {}), "Authorization": f"Bearer {token}", "Accept": "application/json"})


def _send_args(request: Request) -> dict[str, Any]:
    args: dict[str, Any] = {"params": request.params}
    content = request.content()
    if content is not None:
        args["content"] = content
        args["headers"] = {"Content-Type": "application/json"}
    if request.timeout is not None:
        args["timeout"] = request.timeout
    return args


@dataclasses.dataclass(frozen=True, eq=False)
class TaskHandle:
    """A submitted task: ``result()`` waits for its outcome (the result, or the typed error of its end)."""

    client: Client
    task_id: str
    created: bool
    state: str

    def result(self, timeout: float | None = None) -> Any:
        return self.client.wait(self.task_id, timeout)

    def get(self) -> dict[str, Any]:
        return self.client.get(self.task_id)

    def cancel(self, reason: str = "") -> dict[str, Any]:
        return self.client.cancel(self.task_id, reason=reason)


@dataclasses.dataclass(frozen=True, eq=False)
class AsyncTaskHandle:
    """A submitted task: ``await result()`` waits for its outcome (the result, or the typed error of its end)."""

    client: AsyncClient
    task_id: str
    created: bool
    state: str

    async def result(self, timeout: float | None = None) -> Any:
        return await self.client.wait(self.task_id, timeout)

    async def get(self) -> dict[str, Any]:
        return await self.client.get(self.task_id)

    async def cancel(self, reason: str = "") -> dict[str, Any]:
        return await self.client.cancel(self.task_id, reason=reason)


class Client:
    """The producer over HTTP, blocking: ``Client("http://127.0.0.1:7381", token)``.

    Thread-safe (httpx's pool is). ``timeout`` bounds each step of a request
    (:data:`DEFAULT_TIMEOUT_S`): seconds, or an ``httpx.Timeout`` whose every
    step is bounded (:func:`_check_timeout`). ``limits`` bounds the pool (``httpx.Limits``;
    a long-poll holds a connection, so a cap counts the waits too). For
    transactional enqueue inside your own database transaction, use
    :class:`pulse_trio.client.DatabaseClient` instead.
    """

    def __init__(self, url: str, token: str, *, timeout: float | httpx.Timeout = DEFAULT_TIMEOUT_S,
                 headers: Mapping[str, str] | None = None, verify: Any = True,
                 limits: httpx.Limits = DEFAULT_LIMITS) -> None:
        self._http = httpx.Client(**_options(url, token, timeout, headers, limits), verify=_verify(verify))

    def _run(self, call: Call[T]) -> T:
        def send(request: Request) -> Answer:
            response = self._http.request(request.method, request.path, **_send_args(request))
            return calls.answer(response.status_code, response.content)

        return calls.drive(call, send)

    def submit(self, queue: str, kind: str, payload: Any = None, **options: Any) -> TaskHandle:
        """Submit one task (the options are the API's submit fields); its handle."""
        view = self._run(calls.submit(calls.task(queue, kind, payload, **options)))
        return TaskHandle(self, view["task_id"], view["created"], view["state"])

    def submit_many(self, tasks: Iterable[Mapping[str, Any]]) -> list[TaskHandle]:
        """Submit tasks built with :func:`pulse_trio.producer.task` in one transaction: all or none."""
        return [TaskHandle(self, d["task_id"], d["created"], d["state"]) for d in self._run(calls.submit_many(tasks))]

    def get(self, task_id: str) -> dict[str, Any]:
        return self._run(calls.get(task_id))

    def list(self, *, queue: str | None = None, state: str | None = None, kind: str | None = None,
             idempotency_key: str | None = None, order: str | None = None, cursor: str | None = None,
             limit: int | None = None) -> dict[str, Any]:
        """A page of tasks: ``{"tasks": [...], "next": cursor or None}``."""
        return self._run(calls.list_tasks(dict(queue=queue, state=state, kind=kind, idempotency_key=idempotency_key,
                                               order=order, cursor=cursor, limit=limit)))

    def cancel(self, task_id: str, *, reason: str = "") -> dict[str, Any]:
        return self._run(calls.cancel(task_id, reason))

    def retry(self, task_id: str) -> dict[str, Any]:
        return self._run(calls.retry(task_id))

    def wait(self, task_id: str, timeout: float | None = None) -> Any:
        """The task's result once it ends; TaskFailed / TaskUnknown / TaskCancelled, or WaitTimeout."""
        return self._run(calls.wait(task_id, timeout))

    def handle(self, task_id: str) -> TaskHandle:
        """A handle on a task submitted earlier (by id)."""
        view = self.get(task_id)
        return TaskHandle(self, task_id, False, view["state"])

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient:
    """The producer over HTTP for asyncio and Trio: ``async with AsyncClient(url, token) as client``.

    The same options as :class:`Client`.
    """

    def __init__(self, url: str, token: str, *, timeout: float | httpx.Timeout = DEFAULT_TIMEOUT_S,
                 headers: Mapping[str, str] | None = None, verify: Any = True,
                 limits: httpx.Limits = DEFAULT_LIMITS) -> None:
        self._http = httpx.AsyncClient(**_options(url, token, timeout, headers, limits), verify=_verify(verify))

    async def _run(self, call: Call[T]) -> T:
        """:func:`pulse_trio.producer.calls.drive`, awaiting each request (and each pause)."""
        try:
            request = next(call)
            while True:
                if request.pause > 0:
                    await anyio.sleep(request.pause)
                try:
                    response = await self._send(request)
                    reply = calls.answer(response.status_code, response.content)
                except Exception as exc:
                    if not (request.retry and calls.is_transport_error(exc)):
                        raise
                    reply = Answer(0, None, exc)
                request = call.send(reply)
        except StopIteration as done:
            return done.value

    async def _send(self, request: Request) -> httpx.Response:
        """:func:`pulse_trio.producer.calls.send_idempotent`, awaited: an idempotent request whose connection
        dropped before any answer goes out once more."""
        try:
            return await self._http.request(request.method, request.path, **_send_args(request))
        except Exception as exc:
            if not calls.resends(request, exc):
                raise
        return await self._http.request(request.method, request.path, **_send_args(request))

    async def submit(self, queue: str, kind: str, payload: Any = None, **options: Any) -> AsyncTaskHandle:
        view = await self._run(calls.submit(calls.task(queue, kind, payload, **options)))
        return AsyncTaskHandle(self, view["task_id"], view["created"], view["state"])

    async def submit_many(self, tasks: Iterable[Mapping[str, Any]]) -> list[AsyncTaskHandle]:
        done = await self._run(calls.submit_many(tasks))
        return [AsyncTaskHandle(self, d["task_id"], d["created"], d["state"]) for d in done]

    async def get(self, task_id: str) -> dict[str, Any]:
        return await self._run(calls.get(task_id))

    async def list(self, *, queue: str | None = None, state: str | None = None, kind: str | None = None,
                   idempotency_key: str | None = None, order: str | None = None, cursor: str | None = None,
                   limit: int | None = None) -> dict[str, Any]:
        return await self._run(calls.list_tasks(dict(queue=queue, state=state, kind=kind,
                                                     idempotency_key=idempotency_key, order=order, cursor=cursor,
                                                     limit=limit)))

    async def cancel(self, task_id: str, *, reason: str = "") -> dict[str, Any]:
        return await self._run(calls.cancel(task_id, reason))

    async def retry(self, task_id: str) -> dict[str, Any]:
        return await self._run(calls.retry(task_id))

    async def wait(self, task_id: str, timeout: float | None = None) -> Any:
        return await self._run(calls.wait(task_id, timeout))

    async def handle(self, task_id: str) -> AsyncTaskHandle:
        view = await self.get(task_id)
        return AsyncTaskHandle(self, task_id, False, view["state"])

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
