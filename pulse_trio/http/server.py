"""Run the HTTP API with hypercorn's Trio worker, beside the worker service.

``pulse_trio.serve`` hands an :class:`HttpApi` to the service, which runs it
as one more child of its root nursery: the same process, the same Trio
run and the same store as the worker endpoint, and the running instance
through :class:`~pulse_trio.live_instance.LiveInstance` only. Its sockets
are bound (:meth:`HttpApi.bind`) before the node joins the cluster and
listen once it has (``pulse_trio.listen``); hypercorn gets them. It stops
gracefully when the service's stop event is set (in-flight requests get
``GRACEFUL_TIMEOUT_S``), and is cancelled with the rest of the instance
after that. With ``--tls-cert`` the API is HTTPS too.

The accept loop is ours, not hypercorn's ``worker_serve``, for two reasons.
A connection whose protocol layer fails (an HTTP/2 ``:path`` with a byte
outside ASCII, which hypercorn decodes as ASCII) is closed and logged, and
the failure goes no further (unhandled, it ended the serve process). And
it holds at most :func:`~pulse_trio.http.connections.connection_limit` HTTP connections at a time. The
worker endpoint and the database share this process's open-file limit;
without the bound, a flood of long-polls or idle connections took every
descriptor, and a worker could no longer connect, nor the store open a
connection. A connection beyond the bound waits in the listen backlog.
"""

from __future__ import annotations

import functools
import logging

import trio
from hypercorn.config import Config, Sockets
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import repr_socket_addr, wrap_app

from pulse_trio.config import Settings
from pulse_trio.group.metrics_files import SharedMetrics
from pulse_trio.http.app import build_app
from pulse_trio.http.connections import connection_limit
from pulse_trio.listen import ListenError, listen_error, start_listening
from pulse_trio.live_instance import LiveInstance
from pulse_trio.store.engine.trio_bridge import Store

log = logging.getLogger("pulse_trio.http")

GRACEFUL_TIMEOUT_S = 2.0


class _BoundedListener(trio.abc.Listener[trio.abc.Stream]):
    """Accepts only while a slot is free; the handler gives the slot back once its connection is closed."""

    def __init__(self, inner: trio.abc.Listener[trio.abc.Stream], slots: trio.Semaphore) -> None:
        self.inner, self.slots = inner, slots

    async def accept(self) -> trio.abc.Stream:
        await self.slots.acquire()
        try:
            return await self.inner.accept()
        except BaseException:
            self.slots.release()
            raise

    async def aclose(self) -> None:
        await self.inner.aclose()


class HttpListenError(ListenError):
    """The HTTP API cannot listen where ``--http-listen`` says (port taken, bad address)."""


def hypercorn_config(settings: Settings) -> Config:
    host, port = settings.http_listen
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    if settings.tls_cert is not None:
        config.certfile, config.keyfile = str(settings.tls_cert), str(settings.tls_key)
    config.accesslog = None  # pulse_trio.http.access writes one structured line per request
    config.errorlog = logging.getLogger("hypercorn.error")
    config.graceful_timeout = GRACEFUL_TIMEOUT_S
    # Also bounds a connection's wait for a request's headers (hypercorn's idle timer runs until they are in).
    config.keep_alive_timeout = settings.http_idle_timeout
    # hypercorn's idle timer starts after the TLS handshake: a connection silent before it is idle too.
    config.ssl_handshake_timeout = settings.http_idle_timeout
    config.include_server_header = False
    return config


class HttpApi:
    """The HTTP API of one serve process: bound first, served once the instance has joined."""

    def __init__(self, settings: Settings, *, sockets: Sockets | None = None,
                 shared_metrics: SharedMetrics | None = None) -> None:
        """``sockets``: bound already (a serve group's parent bound them); ``shared_metrics``: the group's."""
        self.settings = settings
        self.config = hypercorn_config(settings)
        self.sockets: Sockets | None = sockets
        self.shared_metrics = shared_metrics

    def bind(self) -> None:
        """Bind ``--http-listen`` (not listening yet); HttpListenError names the flag, not a hypercorn traceback."""
        if self.sockets is not None:
            return
        try:
            self.sockets = self.config.create_sockets()
        except OSError as exc:
            raise HttpListenError(str(listen_error("the HTTP API", "--http-listen", self.config.bind[0],
                                                   exc))) from None

    async def serve(self, instance: LiveInstance, store: Store, stop: trio.Event, *,
                    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until ``stop`` is set; ``task_status.started(port)`` once listening."""
        if self.sockets is None:
            self.bind()
        sockets = self.sockets
        assert sockets is not None
        config = self.config
        start_listening([*sockets.secure_sockets, *sockets.insecure_sockets], "the HTTP API", "--http-listen",
                        config.bind[0])
        api = build_app(instance, store, self.settings, self.shared_metrics)
        outcomes = api.state.outcomes
        app = wrap_app(api, config.wsgi_max_body_size, "asgi")

        async def listening(task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                await _serve_bounded(app, config, sockets, stop, connection_limit(), task_status=task_status)
            finally:
                nursery.cancel_scope.cancel()  # the outcome probes and the scrapes' reads end with the server

        async def release_waiters() -> None:
            await stop.wait()
            outcomes.close()  # long-polls answer now, within the graceful shutdown

        async with trio.open_nursery() as nursery:
            nursery.start_soon(outcomes.run)
            nursery.start_soon(api.state.database_figures.run)
            nursery.start_soon(release_waiters)
            if self.shared_metrics is not None:
                nursery.start_soon(self.shared_metrics.publish_every, api.state.process_metrics)
            binds = await nursery.start(listening)
            port = int(binds[0].rsplit(":", 1)[1])
            log.info("HTTP API on %s", binds[0], extra={"http_port": port})
            task_status.started(port)

    def close(self) -> None:
        """Close the bound sockets (after the service has stopped, or when its start failed)."""
        sockets, self.sockets = self.sockets, None
        for sock in (*sockets.secure_sockets, *sockets.insecure_sockets) if sockets else ():
            sock.close()


async def _serve_bounded(app: object, config: Config, sockets: Sockets, stop: trio.Event, limit: int, *,
                         task_status: trio.TaskStatus[list[str]]) -> None:
    """hypercorn's HTTP/1.1 and HTTP/2 connections over ``sockets``, at most ``limit`` at a time, until ``stop``.

    Then, as hypercorn's own worker does: no new connection, kept-alive ones
    are closed after their current request, and ``graceful_timeout`` later
    whatever is left is cancelled.
    """
    context = WorkerContext(None)
    slots = trio.Semaphore(limit)
    ssl_context = config.create_ssl_context()
    listeners: list[trio.abc.Listener[trio.abc.Stream]] = []
    binds = []
    for sock in sockets.secure_sockets:
        listeners.append(trio.SSLListener(trio.SocketListener(trio.socket.from_stdlib_socket(sock)), ssl_context,
                                          https_compatible=True))
        binds.append(f"https://{repr_socket_addr(sock.family, sock.getsockname())}")
    for sock in sockets.insecure_sockets:
        listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
        binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")
    connection = functools.partial(TCPServer, app, config, context, ConnectionState({}))

    async def handle(stream: trio.abc.Stream) -> None:
        try:
            await connection(stream)
        except Exception as exc:  # a connection's failure is its own, never the serve process's
            log.warning("an HTTP connection failed below the API and was closed", exc_info=exc)
        finally:
            await trio.aclose_forcefully(stream)
            slots.release()

    async with trio.open_nursery() as connections:
        async with trio.open_nursery() as accepting:
            await accepting.start(functools.partial(
                trio.serve_listeners, handle, [_BoundedListener(listener, slots) for listener in listeners],
                handler_nursery=connections))
            task_status.started(binds)
            await stop.wait()
            accepting.cancel_scope.cancel()
        await context.terminated.set()
        connections.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
