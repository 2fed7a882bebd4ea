"""The service's listening addresses are bound before the process joins the cluster.

``serve`` binds the worker endpoint's and the HTTP API's sockets first, and
only then records its node ALIVE: a port that is taken (a typo, a second
instance on the same port) stops the start with :class:`ListenError` before
anything is written, so no healthy instance later declares a node lost that
never ran. The sockets start listening only once the node has joined, so a
port that accepts a connection still means the instance is up.
"""

from __future__ import annotations

import errno
import socket as stdlib_socket

import trio

#: Connections the kernel queues before accept (trio's own default).
BACKLOG = 0xFFFF


class ListenError(OSError):
    """A listener cannot bind where its flag says (port taken, bad address); the message names the flag."""


def listen_error(what: str, flag: str, address: str, exc: OSError) -> ListenError:
    return ListenError(f"cannot listen for {what} on {address} ({flag}): {exc.strerror or exc}")


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def bind_workers(listen: tuple[str, int]) -> list[trio.socket.SocketType]:
    """Sockets bound to ``--worker-listen``, not listening yet (as ``trio.open_tcp_listeners`` binds them)."""
    host, port = listen
    bound: list[trio.socket.SocketType] = []
    try:
        for family, type_, proto, _, sockaddr in await trio.socket.getaddrinfo(
                host, port, type=trio.socket.SOCK_STREAM, flags=trio.socket.AI_PASSIVE):
            try:
                sock = trio.socket.socket(family, type_, proto)
            except OSError as exc:
                if exc.errno == errno.EAFNOSUPPORT:
                    continue
                raise
            bound.append(sock)
            sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_REUSEADDR, 1)
            if family == trio.socket.AF_INET6:
                sock.setsockopt(trio.socket.IPPROTO_IPV6, trio.socket.IPV6_V6ONLY, 1)
            await sock.bind(sockaddr)
        if not bound:
            raise OSError(errno.EAFNOSUPPORT, "no socket family of this address is supported")
    except OSError as exc:
        for sock in bound:
            sock.close()
        raise listen_error("workers", "--worker-listen", _address(host, port), exc) from None
    return bound


def listen_workers(bound: list[trio.socket.SocketType], listen: tuple[str, int]) -> list[trio.SocketListener]:
    """Start listening on the bound sockets (another process may have raced us to the port meanwhile)."""
    try:
        for sock in bound:
            sock.listen(BACKLOG)
    except OSError as exc:
        raise listen_error("workers", "--worker-listen", _address(*listen), exc) from None
    return [trio.SocketListener(sock) for sock in bound]


def start_listening(sockets: list[stdlib_socket.socket], what: str, flag: str, address: str) -> None:
    """``listen()`` on sockets bound earlier, failing with the same one-line ListenError."""
    try:
        for sock in sockets:
            sock.listen(BACKLOG)
    except OSError as exc:
        raise listen_error(what, flag, address, exc) from None
