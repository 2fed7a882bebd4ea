"""What one worker connection needs of its instance: built once by the service, shared by every connection.

A connection (``wire.py``) and its session (``live_session.py``) see
the instance only through this object, never through the service that
composes it; each binds the few methods it calls per frame when it is
built, so a frame pays no lookup through here.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from pulse_trio.server.batcher import LeaseCommandBatcher
from pulse_trio.server.clock import ServiceClock
from pulse_trio.server.hub import SessionHub
from pulse_trio.server.keepalive import Keepalive
from pulse_trio.server.live_settings import LiveSettings
from pulse_trio.server.metrics import ServiceMetrics
from pulse_trio.server.registrations import SessionRequests
from pulse_trio.server.token_checks import TokenChecks
from pulse_trio.store.engine.trio_bridge import Store


class OpenConnection(Protocol):
    """An open worker connection as the service and liveness see it (``wire.WireConnection`` is one)."""

    def shutdown(self) -> None:
        """Tell the worker the instance is stopping (server_shutting_down), then close."""


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class WorkerEndpoint:
    """The worker endpoint's shared parts: what a connection reads, and where it registers."""

    settings: LiveSettings
    store: Store
    clock: ServiceClock
    hub: SessionHub
    metrics: ServiceMetrics
    batcher: LeaseCommandBatcher
    #: Hellos and capacity frames of every connection, in shared transactions.
    requests: SessionRequests
    #: The open connections (the service shuts them down; liveness too, when the node is cut off or lost).
    connections: set[OpenConnection]
    #: The handshakes' worker token checks (one lookup per token at a time).
    tokens: TokenChecks
    #: Pings the open connections, each in its slot (set once, by the service, before any connection).
    keepalive: Keepalive


__all__ = ["OpenConnection", "WorkerEndpoint"]
