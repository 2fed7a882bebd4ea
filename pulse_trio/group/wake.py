"""Tell the other members of a serve group that new work was committed here.

A member that accepts a submit wakes its own dispatcher at once; another
member, whose worker may be the only one with a free slot, would otherwise
see the task only at its next poll (``--poll-interval``). So each member
binds a Unix datagram socket in the abstract namespace, named by the group
and its index, and sends one byte to every other member's when it commits
work others may take: a submit or a retry through its HTTP API, a timers
tick that made tasks READY, a schedule pass that fired (once per tick or
pass). Its sessions' own news (capacity, freed slots) and a wake it received
send nothing. A datagram that cannot be sent at once
(a member not listening yet, a full queue) is dropped: the poll still finds
the work. A stray datagram from another local process costs one dispatcher
pass and nothing else.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

import trio

_WAKE = b"w"


def _address(group: str, index: int) -> bytes:
    return f"\0pulse-trio-group-{group}-{index}".encode()


class SiblingWake:
    """Member ``index``'s inbox, and its way to reach the others' (bound when made)."""

    def __init__(self, group: str, size: int, index: int) -> None:
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
        self._socket.bind(_address(group, index))
        self._others = [_address(group, other) for other in range(size) if other != index]

    def notify(self) -> None:
        """New work was committed here: a datagram to every other member (dropped if it cannot go now)."""
        for address in self._others:
            try:
                self._socket.sendto(_WAKE, address)
            except OSError:
                pass

    async def listen(self, wake: Callable[[], None]) -> None:
        """Call ``wake()`` for every datagram (several read at once make one call), until cancelled."""
        inbox = trio.socket.from_stdlib_socket(self._socket)
        while True:
            await inbox.recv(64)
            try:
                while True:
                    self._socket.recv(64)
            except BlockingIOError:
                pass
            wake()

    def close(self) -> None:
        self._socket.close()
