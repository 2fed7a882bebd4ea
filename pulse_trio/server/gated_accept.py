"""Accept a worker connection only while this process holds no more than its share.

Used when several serve processes share one listening socket
(``serve --processes``): without a gate the kernel may give two workers to
one process and none to another. The gate (``pulse_trio.group.shares``
implements it) says whether this process may take the next connection and
counts the ones it holds; a process over its share waits, polling, while a
less loaded one accepts.

The gate is asked again when a connection is waiting, just before it is
taken, and the accept then never blocks: a process that sat blocked in
``accept()`` would take the next connection whatever the counts had become
meanwhile (a worker that left a less loaded process, reconnecting), and a
process that lost the connection to another goes back to waiting.
"""

from __future__ import annotations

import errno
import functools
import socket
from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

#: How often a process over its share looks again (a connection never waits for it: another process accepts).
GATE_POLL_S = 0.02
#: An accept that fails with these has lost one connection, not the listener (the errors trio's SocketListener skips).
_CONNECTION_ERRNOS = frozenset(getattr(errno, name) for name in (
    "ECONNABORTED", "ECONNRESET", "EPROTO", "EPERM", "ENETDOWN", "ENETUNREACH", "EHOSTDOWN", "EHOSTUNREACH",
    "ENONET", "ENOPROTOOPT", "EOPNOTSUPP", "ENOSR", "ESOCKTNOSUPPORT", "EPROTONOSUPPORT", "ETIMEDOUT")
    if hasattr(errno, name))
#: An accept that fails with these found the listener closed.
_CLOSED_ERRNOS = frozenset((errno.EBADF, errno.ENOTSOCK))


class AcceptGate(Protocol):
    def may_accept(self) -> bool:
        """True while this process may take another connection."""

    def opened(self) -> None:
        """This process took a connection."""

    def closed(self) -> None:
        """A connection this process took has closed."""


class GatedListener(trio.abc.Listener[trio.SocketStream]):
    """A :class:`trio.SocketListener` that accepts only while ``gate`` allows, asked when a connection waits."""

    def __init__(self, inner: trio.SocketListener, gate: AcceptGate) -> None:
        self.inner, self.gate = inner, gate

    async def accept(self) -> trio.SocketStream:
        while True:
            if not self.gate.may_accept():
                await trio.sleep(GATE_POLL_S)
                continue
            await trio.lowlevel.wait_readable(self.inner.socket)
            if not self.gate.may_accept():  # the counts moved while this process waited
                continue
            try:
                sock = _accept_now(self.inner.socket)
            except BlockingIOError:  # another process took it
                continue
            except OSError as exc:
                if exc.errno in _CLOSED_ERRNOS:
                    raise trio.ClosedResourceError from None
                if exc.errno in _CONNECTION_ERRNOS:
                    continue
                raise  # EMFILE and the like: trio.serve_listeners waits and tries again
            self.gate.opened()
            return trio.SocketStream(trio.socket.from_stdlib_socket(sock))

    async def aclose(self) -> None:
        await self.inner.aclose()


def _accept_now(listening: trio.socket.SocketType) -> socket.socket:
    """A connection waiting on ``listening``, or BlockingIOError: trio's own accept would wait for the next one."""
    same = socket.socket(fileno=listening.fileno())  # the same socket (non-blocking, as trio set it), borrowed
    try:
        return same.accept()[0]
    finally:
        same.detach()


def counted(handler: Callable[[trio.SocketStream], Awaitable[None]],
            gate: AcceptGate) -> Callable[[trio.SocketStream], Awaitable[None]]:
    """``handler``, telling ``gate`` when its connection is over."""

    @functools.wraps(handler)
    async def run(stream: trio.SocketStream) -> None:
        try:
            await handler(stream)
        finally:
            gate.closed()

    return run
