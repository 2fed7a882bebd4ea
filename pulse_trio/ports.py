"""Local TCP ports for child processes that must bind them, chosen where no outgoing connection looks.

A port found free here may be taken by another socket before the child
binds it (or binds it again after a restart). An outgoing connection takes
its local port from the kernel's ephemeral range (from 32768 on Linux,
49152 elsewhere), so single ports are chosen at random among the free ones
of :data:`SINGLE_BAND`, and blocks of consecutive ports from
:data:`BLOCK_BAND`, both below that range: only a process that binds a port
it picked itself can take one, and a restarted child finds its port free
again. Where the ephemeral range reaches into a band (a tuned
``ip_local_port_range``), what is left of the band below it is used, and
when too little is left a single port is the operating system's choice, as
before. ``ServeProcess`` and the managed MariaDB still start the child again
on a fresh port through :func:`start_on_fresh_ports`, up to
:data:`PORT_ATTEMPTS` times; a port the user gave is never changed.
"""

from __future__ import annotations

import collections
import random
import socket
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Starts on fresh ports when one chosen here was taken before the child bound it.
PORT_ATTEMPTS = 5
#: Where the kernel says which local ports outgoing connections take (Linux).
EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
#: Single ports, [first, last): below Linux's ephemeral range and Kubernetes' node ports (30000-32767).
SINGLE_BAND = (20000, 30000)
#: Blocks: a band of their own, so that a block chosen seconds before its ports are bound is never
#: handed out as a single port meanwhile.
BLOCK_BAND = (10000, 20000)
#: Less than this left of a band below the ephemeral range: too few to pick from at random.
_LEAST_SPAN = 1000
#: Free candidates tried before giving up on a band: a band is mostly free, so a few suffice.
_TRIES = 64
#: Not the module's random: test runners seed that alike in every process, which would pick alike.
_CHOICE = random.SystemRandom()
#: The ports this process handed out lately: a child may not have bound one yet, so it is not handed out twice.
_RECENT: collections.deque[int] = collections.deque(maxlen=256)


def free_port() -> int:
    """A port nothing is bound to now and not handed out lately here, from :data:`SINGLE_BAND`."""
    first, last = _below_ephemeral(SINGLE_BAND)
    if last - first >= _LEAST_SPAN:
        for _ in range(_TRIES):
            port = _CHOICE.randrange(first, last)
            if port not in _RECENT and bindable(port):
                _RECENT.append(port)
                return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    _RECENT.append(port)
    return port


def free_port_block(count: int) -> list[int]:
    """``count`` consecutive ports nothing is bound to now, from :data:`BLOCK_BAND`.

    For a cluster that binds its nodes' ports one node at a time, seconds
    after the choice. When the ephemeral range leaves too little of the band,
    the whole band is used: a block needs consecutive ports, which the
    operating system does not hand out.
    """
    first, last = _below_ephemeral(BLOCK_BAND)
    if last - first < max(_LEAST_SPAN, count):
        first, last = BLOCK_BAND
    for _ in range(_TRIES):
        base = _CHOICE.randrange(first, last - count)
        ports = list(range(base, base + count))
        if not any(port in _RECENT for port in ports) and all(bindable(port) for port in ports):
            _RECENT.extend(ports)
            return ports
    raise OSError(f"no {count} consecutive free ports in {first}-{last - 1}")


def bindable(port: int) -> bool:
    """Nothing is bound to ``port`` on 127.0.0.1 now."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _below_ephemeral(band: tuple[int, int]) -> tuple[int, int]:
    """The part of ``band`` below the ephemeral range (all of it where the range is not known)."""
    first, last = band
    low = ephemeral_low()
    return (first, min(last, low)) if low is not None else band


def ephemeral_low() -> int | None:
    """The first port of the kernel's ephemeral range, or None where it cannot be read."""
    try:
        with open(EPHEMERAL_RANGE_FILE) as spec:
            return int(spec.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


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
