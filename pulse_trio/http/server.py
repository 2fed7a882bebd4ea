"""Run the HTTP API with hypercorn's Trio worker, inside the service's nursery.

Hypercorn's Trio worker is awaited as one more child of ``serve()``'s root
nursery: the same process, the same Trio run, the same store and hub as the
worker endpoint. It stops gracefully when the service's stop event is set
(in-flight requests get ``GRACEFUL_TIMEOUT_S``), and is cancelled with the
rest of the instance after that. With ``--tls-cert`` the API is HTTPS too.
Its sockets are bound (:func:`bind_http`) before the node joins the cluster
and listen once it has (``pulse_trio.server.listen``); hypercorn gets them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio
from hypercorn.config import Config, Sockets
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app

from pulse_trio.http.app import build_app
from pulse_trio.server.listen import ListenError, listen_error, start_listening

if TYPE_CHECKING:
    from pulse_trio.server.service import ServiceContext

log = logging.getLogger("pulse_trio.http")

GRACEFUL_TIMEOUT_S = 2.0


class HttpListenError(ListenError):
    """The HTTP API cannot listen where ``--http-listen`` says (port taken, bad address)."""


def hypercorn_config(ctx: ServiceContext) -> Config:
    settings = ctx.settings
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


async def serve_http(ctx: ServiceContext, stop: trio.Event, sockets: Sockets | None = None, *,
                     task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve until ``stop`` is set; ``task_status.started(port)`` once listening.

    ``sockets`` are bound already (:func:`bind_http`); without them
    ``--http-listen`` is bound here.
    """
    config = hypercorn_config(ctx)
    if sockets is None:
        sockets = bind_http(config)
    start_listening([*sockets.secure_sockets, *sockets.insecure_sockets], "the HTTP API", "--http-listen",
                    config.bind[0])
    app = wrap_app(build_app(ctx), config.wsgi_max_body_size, "asgi")

    async def listening(task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        await worker_serve(app, config, sockets=sockets, shutdown_trigger=stop.wait, task_status=task_status)

    async with trio.open_nursery() as nursery:
        binds = await nursery.start(listening)
        port = int(binds[0].rsplit(":", 1)[1])
        log.info("HTTP API on %s", binds[0], extra={"http_port": port})
        task_status.started(port)


def bind_http(config: Config) -> Sockets:
    """Sockets bound for the HTTP API, not listening yet; HttpListenError names the flag, not a hypercorn traceback."""
    try:
        sockets = config.create_sockets()
    except OSError as exc:
        raise HttpListenError(str(listen_error("the HTTP API", "--http-listen", config.bind[0], exc))) from None
    return sockets
