"""Local TCP ports chosen by the operating system, for child processes that must bind them.

A port found free here may be taken by any other socket (a client's
outgoing connection takes its port from the same range) before the child
binds it. ``ServeProcess`` and the managed MariaDB then start the child
again on a fresh port through :func:`start_on_fresh_ports`, up to
:data:`PORT_ATTEMPTS` times; a port the user gave is never changed.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Starts on fresh ports when one chosen here was taken before the child bound it.
PORT_ATTEMPTS = 5


def free_port() -> int:
    """A port nothing listens on now (the OS's choice)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_on_fresh_ports(start: Callable[[], T], taken: Callable[[Exception], bool]) -> T:
    """``start()``, again while it fails with a port it chose taken (``taken(error)``), up to :data:`PORT_ATTEMPTS` times.

    ``start`` picks its fresh ports itself on each call; ``taken`` must say False for a failure
    on a port the user gave. The last failure is raised as it is.
    """
    for attempt in range(1, PORT_ATTEMPTS + 1):
        try:
            return start()
        except Exception as error:
            if attempt == PORT_ATTEMPTS or not taken(error):
                raise
    raise AssertionError("unreachable")
