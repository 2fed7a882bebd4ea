"""Tell systemd how a ``Type=notify`` service is doing: one datagram to ``$NOTIFY_SOCKET``.

``serve`` says ``READY=1`` once its node is recorded and both its ports
listen (a worker or a load balancer may use it from then on), and
``STOPPING=1`` when a stop begins; ``worker run`` says ``READY=1`` once it is
connected and registered. Outside systemd (no ``NOTIFY_SOCKET``) every call
does nothing. The protocol is one ``AF_UNIX`` datagram of ``KEY=value``
lines (sd_notify(3)); a name starting with ``@`` is in the abstract
namespace. A failure to send is logged and otherwise ignored: the service
runs the same without its supervisor's bookkeeping.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger("pulse_trio.systemd")


def without_notify_socket(environment: Mapping[str, str]) -> dict[str, str]:
    """``environment`` less ``NOTIFY_SOCKET``, for a child that is not the unit's service (a group's member, the
    managed mariadbd, which speaks the same protocol): only the process systemd started reports to it."""
    return {name: value for name, value in environment.items() if name != "NOTIFY_SOCKET"}


def notify(*lines: str) -> bool:
    """Send ``lines`` (``"READY=1"``, ``"STATUS=…"``) to systemd; False when there is nobody to tell."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return False
    address = "\0" + path[1:] if path.startswith("@") else path
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall("\n".join(lines).encode("utf-8"))
    except OSError as exc:
        log.warning("could not notify systemd at %s: %s", path, exc)
        return False
    return True


__all__ = ["notify", "without_notify_socket"]
