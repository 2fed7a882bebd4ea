"""Count the server side of HTTP connections this process holds open, from /proc (Linux).

A socket the server forgot is invisible to the client once the client has
gone; the kernel still lists it (ESTABLISHED or CLOSE_WAIT) with the
server's port as its local port, and the process still has a descriptor
for it. Both are required here, so a connection the server has closed
(TIME_WAIT, kernel-only) does not count.
"""

from __future__ import annotations

import os

import trio

_LISTEN = "0A"


def _inodes_of_this_process() -> set[str]:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def open_server_sockets(port: int) -> int:
    """Connections accepted on ``port`` whose descriptor this process still holds."""
    held = _inodes_of_this_process()
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                lines = handle.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] != _LISTEN and fields[9] in held:
                count += 1
    return count


async def settle_to(port: int, expected: int, within: float) -> int:
    """Wait up to ``within`` seconds for the count to drop to ``expected``; the last count."""
    with trio.move_on_after(within):
        while open_server_sockets(port) > expected:
            await trio.sleep(0.05)
    return open_server_sockets(port)
