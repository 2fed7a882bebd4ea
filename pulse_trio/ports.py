"""Local TCP ports for child processes that must bind them, chosen where no outgoing connection looks.

A port found free here may be taken by another socket before the child
binds it (or binds it again after a restart). An outgoing connection takes
its local port from the kernel's ephemeral range, so ports are chosen below
that range, at random among the free ones there: only another process that
binds a port it picked itself can take one, and a restarted child finds its
port free again. Where the range leaves no room below it the operating
system chooses. ``ServeProcess`` and the managed MariaDB still start the
child again on a fresh port through :func:`start_on_fresh_ports`, up to
:data:`PORT_ATTEMPTS` times; a port the user gave is never changed.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Starts on fresh ports when one chosen here was taken before the child bound it.
PORT_ATTEMPTS = 5
#: Where the kernel says which local ports outgoing connections take.
EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
#: How many ports below the ephemeral range single ports are chosen from (blocks: the span below that).
SPAN_BELOW = 10000
#: The lowest port either is chosen from: well above the usual services' ports.
_LOWEST = 10000
_TRIES = 64
#: Not the module's random: test runners seed that alike in every process, which would pick alike.
_CHOICE = random.SystemRandom()


def free_port() -> int:
    """A port nothing is bound to now, below the ephemeral range when it leaves room (else the OS's choice)."""
    low = _ephemeral_low()
    if low is not None and low - SPAN_BELOW >= _LOWEST:
        for _ in range(_TRIES):
            port = _CHOICE.randrange(low - SPAN_BELOW, low)
            if bindable(port):
                return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_port_block(count: int) -> list[int]:
    """``count`` consecutive ports nothing is bound to now, from the span below :func:`free_port`'s.

    A cluster binds a block's ports one node at a time, seconds after the
    choice: ``free_port`` never picks from this span, so it cannot hand one
    of them out meanwhile.
    """
    low = _ephemeral_low()
    if low is None or low - 2 * SPAN_BELOW < _LOWEST:
        raise OSError("no room below the ephemeral port range for a block of ports")
    for _ in range(_TRIES):
        base = _CHOICE.randrange(low - 2 * SPAN_BELOW, low - SPAN_BELOW - count)
        ports = list(range(base, base + count))
        if all(bindable(port) for port in ports):
            return ports
    raise OSError(f"no {count} consecutive free ports below the ephemeral port range")


def _ephemeral_low() -> int | None:
    try:
        with open(EPHEMERAL_RANGE_FILE) as spec:
            return int(spec.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def bindable(port: int) -> bool:
    """Nothing is bound to ``port`` on 127.0.0.1 now."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


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
