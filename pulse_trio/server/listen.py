"""The service's listening sockets are bound before the process joins the cluster.

``serve`` binds the worker endpoint and the HTTP API first, and only then
records its node ALIVE: a port that is taken (a typo, a second instance on
the same port) stops the start with :class:`ListenError` before anything is
written, so no healthy instance later declares a node lost that never ran.
Connections that arrive between the bind and the node's start wait in the
listen backlog.
"""

from __future__ import annotations

import trio


class ListenError(OSError):
    """A listener cannot bind where its flag says (port taken, bad address); the message names the flag."""


def listen_error(what: str, flag: str, address: str, exc: OSError) -> ListenError:
    return ListenError(f"cannot listen for {what} on {address} ({flag}): {exc.strerror or exc}")


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def bind_workers(listen: tuple[str, int]) -> list[trio.SocketListener]:
    """Bound and listening sockets for the worker endpoint (``--worker-listen``)."""
    host, port = listen
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        raise listen_error("workers", "--worker-listen", _address(host, port), exc) from None
