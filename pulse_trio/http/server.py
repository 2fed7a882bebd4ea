"""Run the HTTP API with hypercorn's Trio worker, inside the service's nursery.

``hypercorn.trio.serve`` is awaited as one more child of ``serve()``'s root
nursery: the same process, the same Trio run, the same store and hub as the
worker endpoint. It stops gracefully when the service's stop event is set
(in-flight requests get ``GRACEFUL_TIMEOUT_S``), and is cancelled with the
rest of the instance after that. With ``--tls-cert`` the API is HTTPS too.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from pulse_trio.http.app import build_app

if TYPE_CHECKING:
    from pulse_trio.server.service import ServiceContext

log = logging.getLogger("pulse_trio.http")

GRACEFUL_TIMEOUT_S = 2.0


class HttpListenError(OSError):
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


async def serve_http(ctx: ServiceContext, stop: trio.Event, *,
                     task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve until ``stop`` is set; ``task_status.started(port)`` once listening."""
    config = hypercorn_config(ctx)
    _check_listen(config)

    async def listening(task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        await serve(build_app(ctx), config, shutdown_trigger=stop.wait, mode="asgi",
                    task_status=task_status)

    async with trio.open_nursery() as nursery:
        binds = await nursery.start(listening)
        port = int(binds[0].rsplit(":", 1)[1])
        log.info("HTTP API on %s", binds[0], extra={"http_port": port})
        task_status.started(port)


def _check_listen(config: Config) -> None:
    """Fail with a message naming the flag, not a traceback from deep in hypercorn.

    The probe sockets are closed at once and hypercorn binds its own
    (SO_REUSEADDR), so this only turns the common mistakes into one line.
    """
    try:
        sockets = config.create_sockets()
    except OSError as exc:
        raise HttpListenError(f"cannot listen for the HTTP API on {config.bind[0]} (--http-listen): "
                              f"{exc.strerror or exc}") from None
    for sock in (*sockets.secure_sockets, *sockets.insecure_sockets, *sockets.quic_sockets):
        sock.close()
