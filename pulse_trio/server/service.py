"""One service instance: the worker endpoint, dispatcher, timers and the retention purge in one nursery.

This module is the composition: it builds each part of the instance with
the few parts it uses, named in the part's constructor (the store, the
clock, the session hub, the :class:`~pulse_trio.server.live_settings.LiveSettings`,
the metrics), and runs them. No other server module imports it
(``tests/foundation/test_import_graph.py``): a part never reaches back
into the whole. Worker connections share one
:class:`~pulse_trio.server.endpoint.WorkerEndpoint` (their socket side) and
one :class:`~pulse_trio.server.endpoint.SessionServices` (their sessions').

What runs beside it in the same process (the HTTP API) is handed in as a
:class:`Beside` by ``pulse_trio.serve``, the one module that composes the
two: nothing here imports ``pulse_trio.http``. The surface beside gets the
store and a :class:`~pulse_trio.server.live.LiveService`, never the parts.

At start the instance binds its listeners (``pulse_trio.listen``: a taken port stops
it before anything is written; a member of a serve group is handed them bound, as
:class:`Inherited`, with the gate that keeps its share of worker connections and
the wake it shares with the other members), writes the cluster settings given by its flags and
reads the cluster's (``settings_sync.py``) before its node is recorded, and
re-reads them every few seconds while it runs: its live settings are always
the cluster's values plus this process's own.

Shutdown (SIGINT/SIGTERM/SIGHUP, or :meth:`ServiceHandle.stop`) is orderly: stop
accepting, tell every session ``server_shutting_down`` and close it, record
this process (its node) STOPPED, stop the loops. Leases are left as
they are: valid until they expire, so the workers resume them on another
instance. Every step is bounded, whatever the database does: store work
still in flight after the sessions' grace is cut short, and the STOPPED
gets a short bound of its own; what was not recorded is left to the other
instances, as after a crash. A SIGKILL loses nothing either, because nothing lives only in
this process; the other instances disconnect its sessions once its
heartbeat lapses (``liveness.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import ssl
from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

from pulse_trio.config import Settings
from pulse_trio.dburl import DatabaseConfig
from pulse_trio.listen import ListenError, bind_workers
from pulse_trio.live_instance import LiveInstance
from pulse_trio.stop_signals import STOP_SIGNALS
from pulse_trio.server.batcher import LeaseCommandBatcher
from pulse_trio.server.ride_along import RideAlong
from pulse_trio.server.registrations import SessionRequests
from pulse_trio.server.clock import ServiceClock
from pulse_trio.server.dispatcher import Dispatcher
from pulse_trio.server.endpoint import SessionServices, WorkerEndpoint
from pulse_trio.server.gated_accept import AcceptGate
from pulse_trio.server.hub import SessionHub
from pulse_trio.server.handshake_refusals import HandshakeRefusals
from pulse_trio.server.live import LiveService
from pulse_trio.server.live_settings import LiveSettings
from pulse_trio.server.liveness import NodeLiveness
from pulse_trio.server.metrics import ServiceMetrics
from pulse_trio.server.queue_sync import PausedQueueSync
from pulse_trio.server.retention_loop import PurgePace, RetentionPurge
from pulse_trio.server.schedule_firing import ScheduleFiring
from pulse_trio.server.settings_sync import SettingsRefused, SettingsSync
from pulse_trio.server.timers import Timers
from pulse_trio.server.token_checks import TokenChecks
from pulse_trio.server.keepalive import Keepalive
from pulse_trio.server.wire import WireConnection, serve_workers
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.engine.ids import new_node_id

log = logging.getLogger("pulse_trio.service")

SHUTDOWN_GRACE_S = 5.0
#: How long a stop then lets the store's work in flight (the sessions' disconnects, the HTTP API's
#: requests) finish before it cuts it short: a database that hangs would hold each for minutes.
STORE_GRACE_S = 2.0
HUNG_STOP = f"stopping: the database has not answered for {STORE_GRACE_S:g} s"
#: How long a stop waits for the surface beside (the HTTP API) to finish its own graceful shutdown.
BESIDE_GRACE_S = 5.0
DEFAULT_POOL_SIZE = 8


class Beside(Protocol):
    """A surface the same process serves beside the worker endpoint (the HTTP API: ``pulse_trio.serve``)."""

    def bind(self) -> None:
        """Bind its sockets, not listening yet; a ListenError stops the start before anything is written."""

    async def serve(self, instance: LiveInstance, store: Store, stop: trio.Event, *,
                    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen once the node has joined, ``task_status.started(port)``; stop gracefully once ``stop`` is set."""

    def close(self) -> None:
        """Close its sockets once the service has stopped (or failed to start)."""


@dataclasses.dataclass(frozen=True, eq=False)
class Inherited:
    """What a member of a serve group (``serve --processes``) is given by its parent instead of binding."""

    #: The worker endpoint's sockets, bound by the parent and shared by every member.
    worker_sockets: tuple[trio.socket.SocketType, ...]
    #: Says when this member may take another worker connection (``pulse_trio.group.shares``).
    gate: AcceptGate
    #: Tells the other members of new work committed here, and wakes this one's dispatcher for theirs.
    siblings: Siblings


class Siblings(Protocol):
    """The other members of a serve group, as far as new work goes (``pulse_trio.group.wake``)."""

    def notify(self) -> None:
        """New work was committed here."""

    async def listen(self, wake: Callable[[], None]) -> None:
        """Call ``wake()`` whenever another member says it committed new work, until cancelled."""


@dataclasses.dataclass(eq=False, kw_only=True)
class ServiceHandle:
    """Returned by ``nursery.start(run_service, ...)``: where it listens, its parts, and a way to stop it."""

    worker_port: int
    _stop: trio.Event
    live_settings: LiveSettings
    store: Store
    clock: ServiceClock
    hub: SessionHub
    metrics: ServiceMetrics
    batcher: LeaseCommandBatcher
    dispatcher: Dispatcher
    timers: Timers
    node: NodeLiveness
    settings_sync: SettingsSync
    queue_sync: PausedQueueSync
    retention: RetentionPurge
    #: The open worker connections.
    connections: set[WireConnection]
    http_port: int = 0
    #: What the surface beside the service (the HTTP API) may ask of it.
    instance: LiveService | None = None
    #: The recurring schedules' fire loop.
    schedules: ScheduleFiring | None = None

    @property
    def settings(self) -> Settings:
        """The settings the instance runs by now (the cluster's values plus this process's own)."""
        return self.live_settings.current

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> trio.Event:
        """Set once a stop began (SIGTERM/SIGINT or :meth:`stop`): the sessions are being closed."""
        return self._stop


def _ssl_context(settings: Settings) -> ssl.SSLContext | None:
    if settings.tls_cert is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(settings.tls_cert), str(settings.tls_key))
    return context


async def run_service(settings: Settings, database: DatabaseConfig, *, beside: Beside | None = None,
                      handle_signals: bool = True, clock: ServiceClock | None = None,
                      pool_size: int = DEFAULT_POOL_SIZE, inherited: Inherited | None = None,
                      task_status: trio.TaskStatus[ServiceHandle] = trio.TASK_STATUS_IGNORED) -> None:
    """Run one instance, and ``beside`` with it, until stopped (the database must already be migrated).

    ``inherited``: this process is a member of a serve group, whose parent bound the worker sockets.
    """
    settings.check()
    metrics = ServiceMetrics()
    store = Store(database, pool_size=pool_size, node_id=new_node_id(), on_transaction=metrics.observe_transaction)
    clock = clock or ServiceClock()  # the wall clock; scenario tests pass a virtual one
    live_settings = LiveSettings(settings)
    hub = SessionHub(tell_others=inherited.siblings.notify if inherited is not None else None)
    connections: set[WireConnection] = set()
    batcher = LeaseCommandBatcher(store, clock, hub)
    requests = SessionRequests(store)
    settings_sync = SettingsSync(store=store, clock=clock, settings=live_settings, given_ms=settings.given_ms())
    node = NodeLiveness(store=store, clock=clock, settings=live_settings, metrics=metrics, connections=connections,
                        settings_sync=settings_sync)
    sessions = SessionServices(settings=live_settings, clock=clock, hub=hub, run_in_store=store.run,
                               call_request=requests.call, submit_command=batcher.submit,
                               count_command=metrics.count_command, count_error=metrics.count_error,
                               observe_assign=metrics.observe_assign)
    stop = trio.Event()
    endpoint = WorkerEndpoint(settings=live_settings, count_frame_in=metrics.count_frame_in,
                              count_frame_out=metrics.count_frame_out, connections=connections,
                              tokens=TokenChecks(store),
                              refusals=HandshakeRefusals(metrics.count_handshake_refusal),
                              keepalive=Keepalive(live_settings), sessions=sessions, stopping=stop)
    dispatcher = Dispatcher(store=store, clock=clock, hub=hub, settings=live_settings)
    batcher.ride_along = RideAlong(hub=hub, dispatcher=dispatcher, settings=live_settings)
    queue_sync = PausedQueueSync(store=store, hub=hub)
    retention = RetentionPurge(store=store, clock=clock, metrics=metrics, interval=settings.purge_interval,
                               pace=PurgePace(busy_share=settings.purge_busy_share))
    timers = Timers(store=store, clock=clock, hub=hub, settings=live_settings, metrics=metrics, node=node)
    firing = ScheduleFiring(store=store, clock=clock, hub=hub)
    live = LiveService(clock=clock, hub=hub, metrics=metrics, store=store, settings_sync=settings_sync,
                       queue_sync=queue_sync)
    worker_sockets: list[trio.socket.SocketType] = []
    try:
        # Bound before anything is written: a taken port stops the start with a ListenError
        # before the cluster's settings or this node are recorded; they listen once it is (pulse_trio.listen).
        worker_sockets = (list(inherited.worker_sockets) if inherited is not None
                          else await bind_workers(settings.worker_listen))
        if beside is not None:
            beside.bind()
        async with trio.open_nursery() as starting:
            # A stop during the start (SIGTERM, Ctrl-C) must not wait out the store's retries on a database
            # that hangs: a thread cannot be cancelled, so its work is cut short instead.
            start_watch = _cut_short(starting, store, "stopped while starting")
            try:
                try:
                    await settings_sync.load(strict=True)  # flags the cluster refuses stop the start here
                except SettingsRefused:
                    raise
                except Exception:
                    await trio.lowlevel.checkpoint()  # a start abandoned meanwhile ends here, not as an outage
                    log.warning("cluster settings not read yet (database unavailable); the node starts once "
                                "they are", exc_info=True)
                else:
                    # This process is ALIVE (chart node) before it listens: see liveness.py. Not after a
                    # failed read: the heartbeats record it once the database answers, and trying again
                    # here would wait out the store's retries a second time before listening.
                    await node.start()
            finally:
                start_watch.cancel()
        # The stop's watchdogs run outside what they watch: a database that hangs holds threads nobody can cancel.
        async with trio.open_nursery() as guard:
            async with trio.open_nursery() as root:
                if handle_signals:
                    root.start_soon(_watch_signals, stop)
                async with trio.open_nursery() as handlers:
                    listening = trio.CancelScope()

                    async def listen(task_status: trio.TaskStatus[int]) -> None:
                        with listening:
                            await serve_workers(endpoint, handlers, _ssl_context(settings), worker_sockets,
                                                inherited.gate if inherited is not None else None,
                                                task_status=task_status)

                    port = await _listening(root.start(listen), node)
                    root.start_soon(endpoint.keepalive.run)
                    root.start_soon(batcher.run)
                    root.start_soon(requests.run)
                    root.start_soon(dispatcher.run)
                    root.start_soon(node.run_heartbeats)
                    root.start_soon(settings_sync.run)
                    root.start_soon(queue_sync.run)
                    root.start_soon(retention.run)
                    root.start_soon(timers.run)
                    root.start_soon(firing.run)
                    if inherited is not None:
                        root.start_soon(inherited.siblings.listen, hub.wake)
                    log.info("listening for workers on %s:%s", settings.worker_listen[0], port)
                    # The surface beside (the HTTP API): same nursery and store; stops on `stop`.
                    beside_done = trio.Event()

                    async def serve_beside(task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
                        try:
                            await beside.serve(live, store, stop, task_status=task_status)
                        finally:
                            beside_done.set()

                    http_port = await _listening(root.start(serve_beside), node) if beside is not None else 0
                    task_status.started(ServiceHandle(
                        worker_port=port, _stop=stop, live_settings=live_settings, store=store, clock=clock, hub=hub,
                        metrics=metrics, batcher=batcher, dispatcher=dispatcher, timers=timers, node=node,
                        settings_sync=settings_sync, queue_sync=queue_sync, retention=retention,
                        connections=connections, http_port=http_port, instance=live, schedules=firing))
                    await stop.wait()
                    log.info("shutting down: %d session(s)", len(connections))
                    firing.stop()
                    listening.cancel()
                    for connection in list(connections):
                        connection.shutdown()
                    with trio.move_on_after(SHUTDOWN_GRACE_S):
                        while connections:
                            await trio.sleep(0.01)
                    handlers.cancel_scope.cancel()
                    # Their disconnects, cut short if the database hangs.
                    cut_short = _cut_short(guard, store, HUNG_STOP, after=STORE_GRACE_S)
                cut_short.cancel()
                # STOPPED once every connection has closed (and its disconnect ran, or was cut short:
                # the stop disconnects it), on a connection of its own, within STOP_RECORD_TIMEOUT_S.
                await node.stop()
                # The HTTP API's requests and the loops' statements, if the database hangs: counted from now, while
                # the HTTP API finishes, so a stop waits the longer of the two graces, not both.
                _cut_short(guard, store, HUNG_STOP, after=STORE_GRACE_S)
                if beside is not None:  # its in-flight requests (long-polls among them) answer within its grace
                    with trio.move_on_after(BESIDE_GRACE_S):
                        await beside_done.wait()
                root.cancel_scope.cancel()
            guard.cancel_scope.cancel()
    finally:
        for sock in worker_sockets:
            sock.close()
        if beside is not None:
            beside.close()
        store.close()


async def _listening(start: Awaitable[int], node: NodeLiveness) -> int:
    """``start``'s port; when its port was found taken since the bind, the node is recorded STOPPED first.

    The node joined before listening; another process that bound the port
    too (SO_REUSEADDR lets it while nobody listens) and listened first
    leaves it unable to serve: never served, so not left ALIVE for the
    other instances to declare lost.
    """
    try:
        return await start
    except ListenError:
        await node.stop()
        raise


def _cut_short(nursery: trio.Nursery, store: Store, why: str, *, after: float | None = None) -> trio.CancelScope:
    """Cut the store's work short (:meth:`SyncStore.interrupt`) unless the scope returned is cancelled first.

    ``after`` seconds from now (a stop's grace: only a stop that waits on the
    database that long pays for it, and a healthy one never sees its last
    statements fail); or, with None, when ``nursery`` is cancelled (a start
    abandoned: its reads wait on the database through the store's retries,
    and the store is not used again).
    """
    scope = trio.CancelScope()

    def cut() -> None:
        log.warning("%s: cutting the store's work in flight short", why)
        store.interrupt()

    async def watch() -> None:
        with scope:
            if after is not None:
                await trio.sleep(after)
                cut()
                return
            try:
                await trio.sleep_forever()
            finally:
                if not scope.cancel_called:
                    cut()

    nursery.start_soon(watch)
    return scope


async def _watch_signals(stop: trio.Event) -> None:
    """The first SIGTERM, SIGINT or SIGHUP stops the instance; later ones are taken here too, until it has stopped.

    SIGHUP is what a terminal that closes sends the `serve` started in it:
    left to Python, it would end the process at once, its node left ALIVE
    and its sessions open for the others to declare lost.

    Left to Trio's handler, a second signal (Ctrl-C pressed twice, which in a
    serve group reaches every member) would raise KeyboardInterrupt in the
    middle of the orderly stop: a traceback, sessions not closed, the node
    left ALIVE until the others declare it lost.
    """
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async for signum in signals:
            if stop.is_set():
                log.warning("%s: already stopping (closing the sessions, then recording the node STOPPED)",
                            signal.Signals(signum).name)
            stop.set()
