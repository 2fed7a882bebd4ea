"""Tell systemd how a ``Type=notify`` service is doing: one datagram to ``$NOTIFY_SOCKET``.

``serve`` says ``READY=1`` once its node is recorded and both its ports
listen (a worker or a load balancer may use it from then on), and
``STOPPING=1`` when a stop begins; ``worker run`` says ``READY=1`` once it is
connected and registered. Outside systemd (no ``NOTIFY_SOCKET``) every call
does nothing. The protocol is one ``AF_UNIX`` datagram of ``KEY=value``
lines (sd_notify(3)); a name starting with ``@`` is in the abstract
namespace. A failure to send is logged and otherwise ignored: the service
runs the same without its supervisor's bookkeeping. The watchdog sends every
few seconds, so a socket that keeps failing is logged once, when it starts
to, and once more when a send to it works again, with how many failed in
between (:class:`_Failing`).

Under a unit's ``WatchdogSec=`` systemd sets ``WATCHDOG_USEC`` (and
``WATCHDOG_PID``, its main process): :func:`watchdog_interval` reads them as
sd_watchdog_enabled(3) does, and ``serve`` (from ``READY=1`` on) and
``worker run`` (once connected) then send ``WATCHDOG=1`` every half interval
from their event loop (:mod:`pulse_trio.watchdog`), so a loop that is held,
deadlocked or stopped misses the watchdog and systemd restarts the service.
Nothing else gates the ping: a database outage does not stop it (a restart
cannot end one, and the service rides it). A ``--processes`` group's first process pings only while every
member's loop has shown life within the interval (:mod:`pulse_trio.group.heartbeats`);
the members, like the managed ``mariadbd``, get none of these variables
(:func:`without_notify_socket`).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger("pulse_trio.systemd")
#: What systemd sets for the process it started and no child of it should act on.
_SERVICE_MANAGER_VARIABLES = frozenset({"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"})


def without_notify_socket(environment: Mapping[str, str]) -> dict[str, str]:
    """``environment`` less ``NOTIFY_SOCKET`` and the watchdog's variables, for a child that is not the unit's
    service (a group's member, the managed mariadbd, which speaks the same protocol): only the process systemd
    started reports to it."""
    return {name: value for name, value in environment.items() if name not in _SERVICE_MANAGER_VARIABLES}


def watchdog_interval(environ: Mapping[str, str] = os.environ, pid: int | None = None) -> float | None:
    """Seconds within which systemd wants a ``WATCHDOG=1`` from process ``pid`` (this one), or None.

    None without ``WATCHDOG_USEC``, or when ``WATCHDOG_PID`` names another
    process (these variables were inherited). A value that is no positive
    whole number is ignored with one warning: the service runs unwatched
    rather than not at all.
    """
    usec = environ.get("WATCHDOG_USEC")
    if not usec:
        return None
    if not (usec.isascii() and usec.isdigit()) or int(usec) == 0:
        log.warning("WATCHDOG_USEC=%r is no positive number of microseconds: no watchdog pings", usec)
        return None
    watched = environ.get("WATCHDOG_PID")
    if watched:
        if not (watched.isascii() and watched.isdigit()):
            log.warning("WATCHDOG_PID=%r is no process id: no watchdog pings", watched)
            return None
        if int(watched) != (os.getpid() if pid is None else pid):
            return None
    return int(usec) / 1e6


class _Failing:
    """The notify sockets whose last send failed, each with the failures left out of the log since its line."""

    def __init__(self) -> None:
        self._left_out: dict[str, int] = {}

    def failed(self, path: str, exc: OSError) -> None:
        if path in self._left_out:
            self._left_out[path] += 1
            return
        self._left_out[path] = 0
        log.warning("could not notify systemd at %s: %s (its next failures are counted, not logged, until a send "
                    "works again)", path, exc)

    def sent(self, path: str) -> None:
        left_out = self._left_out.pop(path, None)
        if left_out is not None:
            log.warning("notifying systemd at %s works again (%d more failed sends since its failure was logged)",
                        path, left_out, extra={"suppressed": left_out})


_failing = _Failing()


def notify(*lines: str, wait: bool = True) -> bool:
    """Send ``lines`` (``"READY=1"``, ``"STATUS=…"``) to systemd; False when there is nobody to tell.

    ``wait=False`` (a watchdog ping, sent from the event loop it vouches for): fail rather than wait when
    systemd's queue is full; a ping is worth less than the loop's stall, a ``READY=1`` is not.
    """
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return False
    address = "\0" + path[1:] if path.startswith("@") else path
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.send("\n".join(lines).encode("utf-8"), 0 if wait else socket.MSG_DONTWAIT)
    except OSError as exc:
        _failing.failed(path, exc)
        return False
    _failing.sent(path)
    return True


__all__ = ["notify", "watchdog_interval", "without_notify_socket"]
