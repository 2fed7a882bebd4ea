"""Accept a worker connection only while this process holds no more than its share.

Used when several serve processes share one listening socket
(``serve --processes``): without a gate the kernel may give two workers to
one process and none to another. The gate (``pulse_trio.group.shares``
implements it) says whether this process may take the next connection and
counts the ones it holds; a process over its share waits, polling, while a
less loaded one accepts. A process that should take a connection may not
(stopped, deadlocked): a connection still waiting after
:data:`GATE_PATIENCE_S` is taken by a process over its share.

The gate is asked again when a connection is waiting, just before it is
taken, and the accept then never blocks: a process that sat blocked in
``accept()`` would take the next connection whatever the counts had become
meanwhile (a worker that left a less loaded process, reconnecting), and a
process that lost the connection to another goes back to waiting.
"""

from __future__ import annotations

import errno
import functools
import select
import socket
from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

#: How often a process over its share looks again (a connection never waits for it: another process accepts).
GATE_POLL_S = 0.02
#: How long a connection waits for a process within its share before one over its share takes it: long
#: enough that a healthy member on a loaded machine still takes its own (a reconnecting worker lands on
#: the member it left), short beside a worker's reconnect backoff.
GATE_PATIENCE_S = 2.0
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
        waiting_since: float | None = None  # over its share: since when it has seen a connection wait, at each poll
        while True:
            if not self.gate.may_accept():
                if not _connection_waiting(self.inner.socket):
                    waiting_since = None
                elif waiting_since is None:
                    waiting_since = trio.current_time()
                if waiting_since is None or trio.current_time() - waiting_since < GATE_PATIENCE_S:
                    await trio.sleep(GATE_POLL_S)
                    continue
            else:
                waiting_since = None  # within its share: what it saw wait while over it was taken by another
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


def _connection_waiting(listening: trio.socket.SocketType) -> bool:
    """True if a connection waits on ``listening`` now (asked without waiting)."""
    poller = select.poll()
    poller.register(listening.fileno(), select.POLLIN)
    return bool(poller.poll(0))


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
