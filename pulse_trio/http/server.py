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
"""

from __future__ import annotations

import logging

import trio
from hypercorn.config import Config, Sockets
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app

from pulse_trio.config import Settings
from pulse_trio.group.metrics_files import SharedMetrics
from pulse_trio.http.app import build_app
from pulse_trio.listen import ListenError, listen_error, start_listening
from pulse_trio.live_instance import LiveInstance
from pulse_trio.store.engine.trio_bridge import Store

log = logging.getLogger("pulse_trio.http")

GRACEFUL_TIMEOUT_S = 2.0


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
                await worker_serve(app, config, sockets=sockets, shutdown_trigger=stop.wait,
                                   task_status=task_status)
            finally:
                nursery.cancel_scope.cancel()  # the outcome probes end with the server

        async def release_waiters() -> None:
            await stop.wait()
            outcomes.close()  # long-polls answer now, within the graceful shutdown

        async with trio.open_nursery() as nursery:
            nursery.start_soon(outcomes.run)
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
