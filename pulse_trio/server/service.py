"""One service instance: the worker endpoint, dispatcher and timers in one nursery.

What runs beside it in the same process (the HTTP API) is handed in as a
:class:`Beside` by ``pulse_trio.serve``, the one module that composes the
two: nothing here imports ``pulse_trio.http``. The surface beside gets the
store and a :class:`~pulse_trio.server.live.LiveService`, never the
:class:`ServiceContext`.

At start the instance binds its listeners (``pulse_trio.listen``: a taken port stops
it before anything is written), writes the cluster settings given by its flags and
reads the cluster's (``settings_sync.py``) before its node is recorded, and
re-reads them every few seconds while it runs: ``ctx.settings`` is always
the cluster's values plus this process's own.

Shutdown (SIGINT/SIGTERM, or :meth:`ServiceHandle.stop`) is orderly: stop
accepting, tell every session ``server_shutting_down`` and close it, record
this process (its node) STOPPED, stop the loops. Leases are left as
they are: valid until they expire, so the workers resume them on another
instance. A SIGKILL loses nothing either, because nothing lives only in
this process; the other instances disconnect its sessions once its
heartbeat lapses (``liveness.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import ssl
from typing import Protocol

import trio

from pulse_trio.cluster_settings import milliseconds
from pulse_trio.config import Settings
from pulse_trio.dburl import DatabaseConfig
from pulse_trio.listen import bind_workers
from pulse_trio.live_instance import LiveInstance
from pulse_trio.server.batcher import LeaseCommandBatcher
from pulse_trio.server.clock import ServiceClock
from pulse_trio.server.dispatcher import Dispatcher
from pulse_trio.server.hub import SessionHub
from pulse_trio.server.live import LiveService
from pulse_trio.server.liveness import NodeLiveness
from pulse_trio.server.metrics import ServiceMetrics
from pulse_trio.server.settings_sync import SettingsRefused, SettingsSync
from pulse_trio.server.timers import Timers
from pulse_trio.server.wire import WireConnection, keepalive, serve_workers
from pulse_trio.store.trio_bridge import Store
from pulse_trio.store.ids import new_node_id

log = logging.getLogger("pulse_trio.service")

SHUTDOWN_GRACE_S = 5.0
DEFAULT_POOL_SIZE = 8


@dataclasses.dataclass(eq=False)
class ServiceContext:
    """What the worker service's own parts share; built once per instance (the HTTP API never sees it).

    ``settings`` is replaced (never mutated) when the cluster's values change:
    read it at each decision, not once.
    """

    settings: Settings
    store: Store
    clock: ServiceClock
    hub: SessionHub = dataclasses.field(default_factory=SessionHub)
    metrics: ServiceMetrics = dataclasses.field(default_factory=ServiceMetrics)
    connections: set[WireConnection] = dataclasses.field(default_factory=set)
    batcher: LeaseCommandBatcher | None = None
    dispatcher: Dispatcher | None = None
    node: NodeLiveness | None = None
    settings_sync: SettingsSync | None = None

    @property
    def lease_ttl_ms(self) -> int:
        return milliseconds(self.settings.lease_ttl)

    @property
    def start_timeout_ms(self) -> int:
        return milliseconds(self.settings.start_timeout)


class Beside(Protocol):
    """A surface the same process serves beside the worker endpoint (the HTTP API: ``pulse_trio.serve``)."""

    def bind(self) -> None:
        """Bind its sockets, not listening yet; a ListenError stops the start before anything is written."""

    async def serve(self, instance: LiveInstance, store: Store, stop: trio.Event, *,
                    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen once the node has joined, ``task_status.started(port)``; stop gracefully once ``stop`` is set."""

    def close(self) -> None:
        """Close its sockets once the service has stopped (or failed to start)."""


@dataclasses.dataclass(eq=False)
class ServiceHandle:
    """Returned by ``nursery.start(run_service, ...)``: where it listens, and a way to stop it."""

    ctx: ServiceContext
    worker_port: int
    _stop: trio.Event
    http_port: int = 0
    #: What the surface beside the service (the HTTP API) may ask of it.
    instance: LiveService | None = None

    def stop(self) -> None:
        self._stop.set()


def _ssl_context(settings: Settings) -> ssl.SSLContext | None:
    if settings.tls_cert is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(settings.tls_cert), str(settings.tls_key))
    return context


async def run_service(settings: Settings, database: DatabaseConfig, *, beside: Beside | None = None,
                      handle_signals: bool = True, clock: ServiceClock | None = None,
                      pool_size: int = DEFAULT_POOL_SIZE,
                      task_status: trio.TaskStatus[ServiceHandle] = trio.TASK_STATUS_IGNORED) -> None:
    """Run one instance, and ``beside`` with it, until stopped (the database must already be migrated)."""
    settings.check()
    metrics = ServiceMetrics()
    store = Store(database, pool_size=pool_size, node_id=new_node_id(), on_transaction=metrics.observe_transaction)
    clock = clock or ServiceClock()  # the wall clock; scenario tests pass a virtual one
    batcher = LeaseCommandBatcher(store, clock)
    ctx = ServiceContext(settings=settings, store=store, clock=clock, metrics=metrics, batcher=batcher)
    ctx.settings_sync = SettingsSync(ctx, settings.given_ms())
    live = LiveService(clock=clock, hub=ctx.hub, metrics=metrics, store=store, settings_sync=ctx.settings_sync)
    stop = trio.Event()
    worker_sockets: list[trio.socket.SocketType] = []
    try:
        # Bound before anything is written: a taken port stops the start with a ListenError
        # before the cluster's settings or this node are recorded; they listen once it is (pulse_trio.listen).
        worker_sockets = await bind_workers(settings.worker_listen)
        if beside is not None:
            beside.bind()
        try:
            await ctx.settings_sync.load(strict=True)  # flags the cluster refuses stop the start here
        except SettingsRefused:
            raise
        except Exception:
            log.warning("cluster settings not read yet (database unavailable); the node starts once they are",
                        exc_info=True)
        # This process is ALIVE (chart node) before it listens: see liveness.py.
        ctx.node = NodeLiveness(ctx)
        await ctx.node.start()
        async with trio.open_nursery() as root:
            if handle_signals:
                root.start_soon(_watch_signals, stop)
            async with trio.open_nursery() as connections:
                listening = trio.CancelScope()

                async def listen(task_status: trio.TaskStatus[int]) -> None:
                    with listening:
                        await serve_workers(ctx, connections, _ssl_context(settings), worker_sockets,
                                            task_status=task_status)

                port = await root.start(listen)
                root.start_soon(keepalive, ctx)
                root.start_soon(batcher.run)
                ctx.dispatcher = Dispatcher(ctx)
                root.start_soon(ctx.dispatcher.run)
                root.start_soon(ctx.node.run_heartbeats)
                root.start_soon(ctx.settings_sync.run)
                root.start_soon(Timers(ctx).run)
                log.info("listening for workers on %s:%s", settings.worker_listen[0], port)
                # The surface beside (the HTTP API): same nursery and store; stops on `stop`.
                http_port = await root.start(beside.serve, live, store, stop) if beside is not None else 0
                task_status.started(ServiceHandle(ctx, port, stop, http_port=http_port, instance=live))
                await stop.wait()
                log.info("shutting down: %d session(s)", len(ctx.connections))
                listening.cancel()
                for connection in list(ctx.connections):
                    connection.shutdown()
                with trio.move_on_after(SHUTDOWN_GRACE_S):
                    while ctx.connections:
                        await trio.sleep(0.01)
                connections.cancel_scope.cancel()
            # STOPPED once every connection has closed (and its disconnect ran).
            await ctx.node.stop()
            root.cancel_scope.cancel()
    finally:
        for sock in worker_sockets:
            sock.close()
        if beside is not None:
            beside.close()
        store.close()


async def _watch_signals(stop: trio.Event) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            stop.set()
            return
