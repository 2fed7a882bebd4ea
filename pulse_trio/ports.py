"""Local TCP ports chosen by the operating system, for child processes that must bind them.

A port found free here may be taken by any other socket (a client's
outgoing connection takes its port from the same range) before the child
binds it. ``ServeProcess`` and the managed MariaDB then start the child
again on a fresh port, up to :data:`PORT_ATTEMPTS` times; a port the user
gave is never changed.
"""

from __future__ import annotations

import socket

#: Starts on fresh ports when one chosen here was taken before the child bound it.
PORT_ATTEMPTS = 5


def free_port() -> int:
    """A port nothing listens on now (the OS's choice)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
