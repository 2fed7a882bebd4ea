"""A member of a serve group: what its parent handed it, and its two signals back.

The parent starts each member as ``pulse-trio serve`` with
:data:`ENVIRONMENT` set to a :class:`GroupMember` in JSON: the settings
to run by (the parent's, with the database it resolved), and the
descriptors it inherits: the bound worker and HTTP sockets, the connection
shares, its link to the parent, a Unix socket pair of which the
parent holds the other end, and under systemd's watchdog the group's
heartbeats (:mod:`~pulse_trio.group.heartbeats`), which it beats while its
loop runs. A member says ``ready`` by writing one byte on
the link once it serves; it reads the link only to learn that the group is
stopping: end of file, when the parent closes its end to stop the group or
dies (even by SIGKILL). It then stops as on SIGTERM, so no member outlives
its parent.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path

import trio
from hypercorn.config import Sockets

from pulse_trio.config import Settings, settings_from_json, settings_to_json
from pulse_trio.group.heartbeats import Heartbeats
from pulse_trio.group.metrics_files import SharedMetrics
from pulse_trio.group.shares import ConnectionShares
from pulse_trio.group.wake import SiblingWake

ENVIRONMENT = "PULSE_GROUP_MEMBER"
#: The byte a member writes on its link once it serves.
READY = b"R"


@dataclasses.dataclass(frozen=True)
class GroupMember:
    index: int
    size: int
    settings: Settings
    worker_fds: tuple[int, ...]
    http_fds: tuple[int, ...]
    shares_fd: int
    link_fd: int
    metrics_dir: Path
    #: The group's name among this host's groups (its members' wake sockets carry it).
    group: str
    #: Under systemd's watchdog: the group's heartbeats and the interval they are read against; else None.
    heartbeats_fd: int | None = None
    watchdog_s: float | None = None

    @property
    def inherited_fds(self) -> tuple[int, ...]:
        """What the member's process must inherit (``pass_fds``)."""
        return (*self.worker_fds, *self.http_fds, self.shares_fd, self.link_fd,
                *(() if self.heartbeats_fd is None else (self.heartbeats_fd,)))

    def to_environment(self) -> str:
        return json.dumps({
            "index": self.index, "size": self.size, "settings": settings_to_json(self.settings),
            "worker_fds": self.worker_fds, "http_fds": self.http_fds, "shares_fd": self.shares_fd,
            "link_fd": self.link_fd, "metrics_dir": str(self.metrics_dir), "group": self.group,
            "heartbeats_fd": self.heartbeats_fd, "watchdog_s": self.watchdog_s})

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> GroupMember | None:
        """The member this process is, or None when it was not started by a serve group."""
        text = environ.get(ENVIRONMENT)
        if not text:
            return None
        values = json.loads(text)
        return cls(index=values["index"], size=values["size"], settings=settings_from_json(values["settings"]),
                   worker_fds=tuple(values["worker_fds"]), http_fds=tuple(values["http_fds"]),
                   shares_fd=values["shares_fd"], link_fd=values["link_fd"], metrics_dir=Path(values["metrics_dir"]),
                   group=values["group"], heartbeats_fd=values["heartbeats_fd"], watchdog_s=values["watchdog_s"])

    # -- in the member -----------------------------------------------------------
    def worker_sockets(self) -> tuple[trio.socket.SocketType, ...]:
        return tuple(trio.socket.from_stdlib_socket(socket.socket(fileno=fd)) for fd in self.worker_fds)

    def http_sockets(self) -> Sockets:
        """The HTTP API's sockets as hypercorn takes them (all TLS when the settings name a certificate)."""
        sockets = [socket.socket(fileno=fd) for fd in self.http_fds]
        secure = self.settings.tls_cert is not None
        return Sockets(secure_sockets=sockets if secure else [], insecure_sockets=[] if secure else sockets,
                       quic_sockets=[])

    def shares(self) -> ConnectionShares:
        return ConnectionShares(self.shares_fd, self.size, self.index)

    def shared_metrics(self) -> SharedMetrics:
        return SharedMetrics(self.metrics_dir, self.index)

    def sibling_wake(self) -> SiblingWake:
        return SiblingWake(self.group, self.size, self.index)

    def heartbeats(self) -> Heartbeats | None:
        """The group's heartbeats, when the group is under systemd's watchdog."""
        return None if self.heartbeats_fd is None else Heartbeats(self.heartbeats_fd, self.size)

    def link(self) -> trio.socket.SocketType:
        return trio.socket.from_stdlib_socket(socket.socket(fileno=self.link_fd))


async def report_ready(link: trio.socket.SocketType) -> None:
    await link.send(READY)


async def wait_parent_gone(link: trio.socket.SocketType) -> None:
    """Return once the parent has closed its end of the link (the group is stopping, or the parent died)."""
    while await link.recv(64):
        pass
