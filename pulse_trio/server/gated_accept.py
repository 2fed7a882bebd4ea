"""Accept a worker connection only while this process holds no more than its share.

Used when several serve processes share one listening socket
(``serve --processes``): without a gate the kernel may give two workers to
one process and none to another. The gate (``pulse_trio.group.shares``
implements it) says whether this process may take the next connection and
counts the ones it holds; a process over its share waits, polling, while a
less loaded one accepts.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

#: How often a process over its share looks again (a connection never waits for it: another process accepts).
GATE_POLL_S = 0.02


class AcceptGate(Protocol):
    def may_accept(self) -> bool:
        """True while this process may take another connection."""

    def opened(self) -> None:
        """This process took a connection."""

    def closed(self) -> None:
        """A connection this process took has closed."""


class GatedListener(trio.abc.Listener[trio.SocketStream]):
    """A :class:`trio.SocketListener` that accepts only while ``gate`` allows."""

    def __init__(self, inner: trio.SocketListener, gate: AcceptGate) -> None:
        self.inner, self.gate = inner, gate

    async def accept(self) -> trio.SocketStream:
        while not self.gate.may_accept():
            await trio.sleep(GATE_POLL_S)
        stream = await self.inner.accept()
        self.gate.opened()
        return stream

    async def aclose(self) -> None:
        await self.inner.aclose()


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
