"""What the worker endpoint's two sides may use of their instance: built once by the service, shared by every connection.

Each side gets only what it uses, named, so a reader sees what it can touch:

* :class:`WorkerEndpoint`, the socket side (``wire.py``): the listen address
  and hello timeout, the frame counters, the registry of open connections,
  keepalive, the token checks, the refused handshakes' counter and log, whether the instance is stopping, and the
  :class:`SessionServices` it hands to each session it opens;
* :class:`SessionServices`, the session side (``live_session.py``): the
  settings it announces, the clock, the hub, and the few calls it makes
  into the store, the request coalescer, the command batcher and the metrics.

Neither sees the service that composes them. The calls are bound methods,
fetched once here, so a frame pays no lookup through these objects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

from pulse_trio.server.clock import ServiceClock
from pulse_trio.server.handshake_refusals import HandshakeRefusals
from pulse_trio.server.hub import SessionHub
from pulse_trio.server.keepalive import Keepalive
from pulse_trio.server.live_settings import LiveSettings
from pulse_trio.server.token_checks import TokenChecks


class OpenConnection(Protocol):
    """An open worker connection as the service and liveness see it (``wire.WireConnection`` is one)."""

    def shutdown(self) -> None:
        """Tell the worker the instance is stopping (server_shutting_down), then close."""


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class SessionServices:
    """All a live session (``live_session.LiveSession``) may use of its instance."""

    #: Read only: the hello timeout, and the lease TTL and start timeout a welcome announces.
    settings: LiveSettings
    clock: ServiceClock
    #: Where a welcomed session registers, and what it tells the dispatcher (freed slots, new capacity).
    hub: SessionHub
    #: ``Store.run``: a transaction of the session's own (a resume, the disconnect).
    run_in_store: Callable[..., Awaitable[Any]]
    #: ``SessionRequests.call``: a hello or capacity frame, in a transaction shared with other connections'.
    call_request: Callable[..., Awaitable[Any]]
    #: ``LeaseCommandBatcher.submit``: queue a lease command; its outcome comes back through the session's inbox.
    submit_command: Callable[..., None]
    #: ``ServiceMetrics`` counters a session feeds: acked commands, errors answered, offers made.
    count_command: Callable[[Any, Any], None]
    count_error: Callable[[str], None]
    observe_assign: Callable[[Any, Any], None]


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class WorkerEndpoint:
    """All a worker connection's socket loop (``wire.WireConnection``) may use of its instance."""

    #: Read only: the listen address, the hello timeout.
    settings: LiveSettings
    #: ``ServiceMetrics`` counters of frames read and written.
    count_frame_in: Callable[[int], None]
    count_frame_out: Callable[[int], None]
    #: The open connections (the service shuts them down; liveness too, when the node is cut off or lost).
    connections: set[OpenConnection]
    #: The handshakes' worker token checks (one lookup per token at a time).
    tokens: TokenChecks
    #: Counts and logs (bounded) the handshakes refused; an accepted one never calls it.
    refusals: HandshakeRefusals
    #: Pings the open connections, each in its slot (set once, by the service, before any connection).
    keepalive: Keepalive
    #: What each session opened here is given.
    sessions: SessionServices
    #: Set once the instance begins to stop: a connection whose handshake ends after the stop told the open
    #: ones is told at once, as they were.
    stopping: trio.Event


__all__ = ["OpenConnection", "SessionServices", "WorkerEndpoint"]
