"""The worker: one connection at a time, leases that outlive connections.

Structure (every task in a task group)::

    Worker.run
    ├── signal watcher (optional): 1st SIGINT/SIGTERM/SIGHUP drains, 2nd stops hard
    ├── lease clock: one task for every lease's renewal and watchdog timer
    ├── threads: at a hard stop, abandons the ``def`` handlers still in their thread
    ├── handlers: a pool of tasks, each running one started lease's handler
    │   at a time (``pool``: as many kept idle as the capacity; a new one when
    │   all are busy); a LeaseRunner's commands need none: the connection's
    │   reader completes them
    └── connection loop: connect → reattach every lease → declare capacity
        → serve until the socket ends or the drain is done → back off → again
        (the connection's reader, writer and heartbeat: see ``transport``)

Leases belong to the worker, not to a connection: a dropped socket leaves
every handler running while the loop reconnects with exponential backoff
and jitter, re-attaches each lease (``worker.resume`` with the previous
instance's secrets) and only then declares capacity, so resumed leases are
counted before new work is offered.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import random
import signal
import socket
import ssl
from collections.abc import Callable, Coroutine, Sequence
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.abc

from pulse_trio import __version__
from pulse_trio.contract import limits as lim
from pulse_trio.contract import messages as m
from pulse_trio.contract.credentials import check_token
from pulse_trio.contract.options import check_seconds
from pulse_trio.sdk import protocol as p
from pulse_trio.sdk import refusal
from pulse_trio.sdk.clock import LeaseClock, loop_clock
from pulse_trio.sdk.endpoint import check_url
from pulse_trio.sdk.errors import CommandRefused, ConnectionLost, WorkerRefused
from pulse_trio.sdk.lease import FINISHING, Credentials, LeaseRunner
from pulse_trio.sdk.pool import HandlerPool
from pulse_trio.sdk.stats import WorkerStats
from pulse_trio.sdk.threads import HandlerThreads
from pulse_trio.sdk.registry import Registry
from pulse_trio.sdk.transport import NO_LEASE, Closed, Connection, open_connection

log = logging.getLogger("pulse_trio.sdk")

DEFAULT_URL = f"ws://127.0.0.1:7380{lim.ENDPOINT_PATH}"
#: Seconds between two asks whether an operator drained this worker (docs/worker.md §9).
DRAIN_CHECK_S = 10.0


@dataclasses.dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with jitter: attempt n waits in [d/2, d], d = min(maximum, initial × factor^n)."""

    initial: float = 0.2
    factor: float = 2.0
    maximum: float = 10.0

    def __post_init__(self) -> None:
        """Refuse a backoff that would not back off: a zero or shrinking delay reconnects in a tight loop."""
        check_seconds("Backoff initial", self.initial)
        check_seconds("Backoff maximum", self.maximum)
        factor = self.factor
        if isinstance(factor, bool) or not (isinstance(factor, (int, float)) and 1 <= factor < math.inf):
            raise ValueError(f"Backoff factor must be a finite number of at least 1, got {factor!r:.40}")

    def delay(self, attempt: int) -> float:
        try:
            ceiling = min(self.maximum, self.initial * self.factor ** min(attempt, 64))
        except OverflowError:  # a large factor: the maximum long since
            ceiling = self.maximum
        return ceiling / 2 + random.uniform(0, ceiling / 2)


def check_capacity(capacity: object) -> None:
    """ValueError unless ``capacity`` is what ``worker.capacity`` can declare: an int (not a bool) 0..MAX_CAPACITY.

    Checked before anything is set, so a refused value leaves the worker as
    it was instead of being declared later and ending the session.
    """
    if type(capacity) is not int or not 0 <= capacity <= lim.MAX_CAPACITY:
        raise ValueError(f"capacity must be an int 0..{lim.MAX_CAPACITY}, got {capacity!r:.40}")


#: How many tasks one warning names per group; the rest are counted (a worker may hold thousands of leases).
LISTED_TASKS = 20


#: What a lease left unreported at a refusal for good means to an operator, in the order the warning names them.
FINISH_UNANSWERED, RETURNED, STOPPED, NOT_CALLED = UNREPORTED_GROUPS = (
    "finish sent, unanswered (may be recorded)", "handler returned, outcome lost", "handler stopped while it ran",
    "handler not called")


def _unreported_group(runner: LeaseRunner) -> str:
    if runner.finish_unanswered:
        return FINISH_UNANSWERED
    if not runner.handler_called:
        return NOT_CALLED
    return RETURNED if runner.phase is FINISHING else STOPPED


def _listed(labels: list[str]) -> str:
    more = len(labels) - LISTED_TASKS
    return ", ".join(labels[:LISTED_TASKS]) + (f" and {more} more" if more > 0 else "")


def default_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"[: lim.MAX_LABEL_CHARS]


class Worker:
    """Runs a registry's handlers for tasks the service offers.

    ``capacity`` is how many tasks run at once. ``concurrency_keys`` declares
    that this worker may be given keyed tasks; without it a keyed offer is
    refused. ``strict`` also refuses unknown fields in server frames (by
    default they are ignored, for forward compatibility).
    """

    def __init__(self, url: str | Sequence[str], token: str, registry: Registry, *, capacity: int = 1, name: str | None = None,
                 concurrency_keys: bool = False, cancellation_notifications: bool = True,
                 ssl_context: ssl.SSLContext | None = None, strict: bool = False,
                 backoff: Backoff | None = None, connect_timeout: float = 10.0,
                 drain_check: float = DRAIN_CHECK_S) -> None:
        if not len(registry):
            raise ValueError("the registry has no handlers")
        check_capacity(capacity)
        check_seconds("connect_timeout", connect_timeout)
        check_seconds("drain_check", drain_check)
        #: Every server URL this worker may use, tried in turn: the next one after each
        #: failed connect or lost session (instances of one service, any of them will do).
        self.urls: tuple[str, ...] = (url,) if isinstance(url, str) else tuple(url)
        if not self.urls:
            raise ValueError("give at least one server URL")
        for one in self.urls:
            check_url(one)
            if ssl_context is not None and urlsplit(one).scheme == "ws":
                raise ValueError(f"{one!r} is ws://, yet a TLS context is given (ssl_context=, --ca-file): it "
                                 "would go unused and the token out in the clear; use wss://")
        check_token(token, "worker")
        self.url, self._token, self.registry, self.capacity = self.urls[0], token, registry, capacity
        self._url_at = 0  # the position of ``url`` in ``urls``
        self.hello = m.WorkerHello(
            id="h1", worker_name=name or default_name(), subscriptions=registry.subscriptions(),
            cancellation_notifications=cancellation_notifications, concurrency_keys=concurrency_keys,
            client=m.ClientInfo("pulse-trio-sdk", __version__))
        self._ssl, self._strict, self._connect_timeout = ssl_context, strict, connect_timeout
        self._drain_check = drain_check
        self.backoff = backoff or Backoff()
        self.stats = WorkerStats()
        self.threads = HandlerThreads(capacity, self.stats)
        self.pool = HandlerPool(capacity)
        self.clock = LeaseClock()
        self.runners: dict[str, LeaseRunner] = {}
        self.credentials: Credentials | None = None
        self._ready: Connection | None = None
        self._ready_changed: anyio.Event | None = None
        self._changed: anyio.Event | None = None
        self._draining = False
        self._sequence = 0
        self._declared_capacity: int | None = None  # what the last worker.capacity said
        self._capacity_lock: anyio.Lock | None = None
        self._declared_drain: Connection | None = None
        self._tasks: anyio.abc.TaskGroup | None = None
        self._root: anyio.CancelScope | None = None
        self._first: anyio.Event | None = None
        self._stop_requested = False
        self.stopped = False  # stop() was called: run() returned without draining
        self._refused: WorkerRefused | None = None  # refused for good: run() stops what runs as stop() does
        self.drained_by_operator = False  # the service said an operator drained this worker

    # -- public controls -----------------------------------------------------------
    def drain(self) -> None:
        """Stop taking work, finish the running tasks, then let ``run`` return."""
        if not self._draining:
            log.info("draining: no new tasks; %d running", len(self.runners))
            self._draining = True
            self._poke()

    def stop(self) -> None:
        """Stop now: handlers are cancelled and nothing is finished (leases expire on the server)."""
        self.stopped = self._stop_requested = True
        if self._root is not None:
            self._root.cancel()

    def set_capacity(self, capacity: int) -> None:
        """Run up to ``capacity`` tasks at once from now on; declared to the service at once when connected.

        Lowering it stops no running handler: the service offers no new
        task until fewer than ``capacity`` run. The pool of handler tasks
        and the threads for ``def`` handlers follow it.
        """
        check_capacity(capacity)
        self.capacity = capacity
        self.threads.resize(capacity)
        self.pool.resize(capacity)
        self._poke()

    @property
    def offered_capacity(self) -> int:
        """What ``worker.capacity`` declares: ``capacity`` less the threads stuck in handlers of lost leases.

        Such a thread still holds one of the ``capacity`` threads, but the
        service no longer counts its lease: were the slot declared, a task
        offered for it would be started and then wait for a thread.
        """
        return max(0, self.capacity - self.stats.stuck_threads)

    @property
    def draining(self) -> bool:
        return self._draining

    @property
    def connected(self) -> bool:
        return self._ready is not None and not self._ready.closed.is_set()

    async def wait_connected(self) -> Connection:
        return await self.connection()

    async def run(self, *, handle_signals: bool = False,
                  task_status: anyio.abc.TaskStatus[Worker] = anyio.TASK_STATUS_IGNORED) -> None:
        """Work until drained (or stopped); ``task_status`` is started once first connected.

        Runs under any AnyIO backend: ``asyncio.run(worker.run())``,
        ``anyio.run(worker.run, backend="trio")``, ``trio.run(worker.run)``,
        or as a task of the caller's own task group or nursery.
        Raises ``WorkerRefused`` when the service refuses this worker for good.
        """
        if self._root is not None:
            raise RuntimeError("this Worker is already running (a Worker runs once at a time)")
        self._refused = None
        self.clock.now = loop_clock()
        self.threads.open()
        self._ready_changed, self._changed, self._first = anyio.Event(), anyio.Event(), anyio.Event()
        self._capacity_lock = anyio.Lock()
        try:
            with anyio.CancelScope() as root:
                self._root = root
                if self._stop_requested:
                    root.cancel()
                async with anyio.create_task_group() as tasks:
                    self._tasks = tasks
                    self.pool.attach(tasks)
                    if handle_signals:
                        tasks.start_soon(self._watch_signals)
                    tasks.start_soon(self.clock.run)
                    tasks.start_soon(self.threads.abandon_on_stop)
                    tasks.start_soon(self._report_started, task_status)
                    try:
                        await self._connection_loop()
                    except WorkerRefused as exc:  # raised as itself, not inside an ExceptionGroup
                        self._refused = exc
                        self._say_unreported()
                    tasks.cancel_scope.cancel()
        finally:
            self._tasks = self._root = None
            self.pool.attach(None)
        if self._refused is not None:
            raise self._refused

    def _say_unreported(self) -> None:
        """At a refusal for good: the leases this worker leaves without a report, by task, in one line.

        Nothing of them can be reported without a session, and ``run()`` stops
        them as ``stop()`` does. Grouped by what an operator must do about each:
        a finish sent but unanswered may have been recorded (look before running
        it again); a handler that returned had its effect and lost its outcome;
        one stopped while it ran may have had part of it; one never called had
        none (its task goes back to the queue or ends as a lost lease's does).
        """
        if not self.runners:
            return
        groups: dict[str, list[str]] = {group: [] for group in UNREPORTED_GROUPS}
        for runner in self.runners.values():
            groups[_unreported_group(runner)].append(runner.label)
        log.warning("refused for good: %d lease(s) left unreported; %s", len(self.runners),
                    "; ".join(f"{group}: {_listed(labels)}" for group, labels in groups.items() if labels))

    # -- the connection loop ---------------------------------------------------------
    async def _connection_loop(self) -> None:
        attempt = 0  # consecutive failures (connections that did not stay up): the backoff exponent
        refused_at: set[int] = set()  # the positions of the URLs that refused since a session last opened
        while not self._done():
            retry_after, connected_at = 0.0, None
            try:
                async with open_connection(self.url, self._token, self.hello, on_event=self._on_event,
                                           ssl_context=self._ssl, strict=self._strict,
                                           connect_timeout=self._connect_timeout, now=self.clock.now,
                                           shortest_lease=self.shortest_lease_ttl) as conn:
                    connected_at = anyio.current_time()
                    refused_at.clear()
                    await self._open_session(conn)
                    await self._serve(conn)
            except WorkerRefused as exc:
                refused_at.add(self._url_at)
                if refusal.of_refused(exc) is refusal.Fault.TOKEN or len(refused_at) == len(self.urls):
                    raise
                # This URL's own fault: the next URL may serve, and the leases running here are resumed there.
                self.stats.failed_connects += 1
                log.warning("%s refused this worker; trying the next URL: %s", self.url, exc)
            except (ConnectionLost, CommandRefused) as exc:
                if connected_at is None:
                    self.stats.failed_connects += 1
                # What the service asked for (an error's retry_after_ms, may be days; a handshake's
                # Retry-After), within the backoff's maximum: a worker is not parked longer than it allows.
                if isinstance(exc, CommandRefused) and exc.retry_after_ms:
                    retry_after = min(exc.retry_after_ms / 1000, self.backoff.maximum)
                elif isinstance(exc, ConnectionLost):
                    retry_after = min(exc.retry_after, self.backoff.maximum)
                if not self._done():
                    log.warning("disconnected: %s", exc)
            finally:
                self._publish(None)
            if self._done():
                return
            self._url_at = (self._url_at + 1) % len(self.urls)  # by position: a URL may be listed twice
            self.url = self.urls[self._url_at]
            if connected_at is not None and anyio.current_time() - connected_at >= self.backoff.maximum:
                attempt = 0  # it stayed up: a welcome followed by a drop does not reset the backoff
            delay = max(retry_after, self.backoff.delay(attempt))
            attempt += 1
            log.info("reconnecting in %.2fs (%d running)", delay, len(self.runners))
            await self._wait_to_reconnect(delay)

    async def _wait_to_reconnect(self, delay: float) -> None:
        """Sleep ``delay`` seconds, or less when a drain leaves nothing to reconnect for (``run`` then returns)."""
        with anyio.move_on_after(delay):
            while not self._done():
                changed = self._changed
                assert changed is not None
                await changed.wait()
                self._changed = anyio.Event()

    async def _open_session(self, conn: Connection) -> None:
        previous = self.credentials
        self.credentials = Credentials(conn.instance_id, conn.instance_secret)
        self.stats.connects += 1
        log.info("connected to %s: session %s, instance %s", self.url, conn.session_id, conn.instance_id)
        if self.runners:
            log.info("resuming %d lease(s) from %s", len(self.runners),
                     previous.instance_id if previous else "an earlier instance")
            async with anyio.create_task_group() as tasks:
                for runner in list(self.runners.values()):
                    tasks.start_soon(runner.reattach, conn, self.credentials)
        await self._declare(conn)
        self._publish(conn)

    async def _serve(self, conn: Connection) -> None:
        """Until the socket ends, or the drain is declared and every lease is done."""
        drain_declared = self._declared_drain is conn  # a reconnect while draining declares it at once
        now = self.clock.now
        check_at = now() + self._drain_check  # fixed times: a busy worker's events do not defer it
        while True:
            changed = self._changed
            assert changed is not None
            if conn.closed.is_set():
                raise ConnectionLost(conn.close_reason)
            if not self._draining and self._declared_capacity != self.offered_capacity:
                await self._declare(conn)  # set_capacity() changed it, or a thread got stuck or came back
                continue
            if self._draining:
                if not drain_declared:
                    await self._declare(conn)
                    drain_declared = True
                if not self.runners:
                    log.info("drained: %d started, %d finished; closing", self.stats.started, self.stats.finished)
                    return
            if now() >= check_at:
                check_at = now() + self._drain_check
                if not self._draining:
                    await self._check_drain(conn)
                continue
            with anyio.move_on_after(check_at - now()):
                await changed.wait()
                self._changed = anyio.Event()

    async def _declare(self, conn: Connection) -> None:
        """worker.capacity with the next sequence (one at a time, so sequences go out in order)."""
        assert self._capacity_lock is not None
        async with self._capacity_lock:
            self._sequence += 1
            drain, capacity = self._draining, self.offered_capacity
            body = await conn.request(m.WorkerCapacity, sequence=self._sequence, capacity=capacity,
                                      drain=drain)
            self._declared_capacity = capacity
            assert isinstance(body, m.Welcome)
            if drain:
                self._declared_drain = conn
            if body.sequence != self._sequence:
                log.warning("capacity %d was stale (server holds sequence %s)", self._sequence, body.sequence)
            self._learn(body, conn)

    async def _check_drain(self, conn: Connection) -> None:
        """Ask for the session's stored state: worker.capacity repeating the last sequence changes nothing.

        Its ack shows ``drain: true`` once an operator drained this instance
        (or the instance whose leases this session resumed).
        """
        assert self._capacity_lock is not None
        async with self._capacity_lock:
            if self._sequence == 0 or conn.closed.is_set():
                return
            try:
                declared = (self._declared_capacity if self._declared_capacity is not None
                            else self.offered_capacity)
                body = await conn.request(m.WorkerCapacity, sequence=self._sequence, capacity=declared,
                                          drain=self._draining)
            except CommandRefused as exc:
                if exc.fatal:
                    raise
                log.info("drain check refused (%s); asking again later", exc.code)
                return
            assert isinstance(body, m.Welcome)
            self._learn(body, conn)

    def _learn(self, body: m.Welcome, conn: Connection) -> None:
        """The service shows drain although this worker never declared it: an operator drained it."""
        if body.drain and not self._draining:
            self.drained_by_operator = True
            log.warning("instance %s was drained by an operator: no new tasks; finishing %d running, then "
                        "stopping", conn.instance_id, len(self.runners))
            self._draining = True
            self._poke()

    def _done(self) -> bool:
        return self._draining and not self.runners

    # -- what the connection tells us ------------------------------------------------------
    def _on_event(self, conn: Connection, event: p.Event | Closed) -> None:
        if isinstance(event, p.Offered):
            self._offered(conn, event.message)
        elif isinstance(event, p.CancelPushed):
            runner = self.runners.get(event.message.lease_id)
            if runner is not None and runner.task.task_id == event.message.task_id:
                runner.request_cancel(event.message.reason or "")
        elif isinstance(event, p.Dropped) and event.offer:
            self.stats.rejected_offers += 1
        elif isinstance(event, Closed):
            self._poke()

    def _offered(self, conn: Connection, offer: m.TaskAssign) -> None:
        lease_id = offer.lease.lease_id
        handler = self.registry.get(offer.task.queue, offer.task.kind)
        if lease_id in self.runners or handler is None or self._tasks is None:
            if handler is None:  # unreachable: subscriptions name only registered kinds
                log.warning("no handler for %s/%s; offer %s left to lapse", offer.task.queue, offer.task.kind,
                            lease_id)
            return
        self.stats.offers += 1
        owner = self.credentials  # the session's, made when it opened
        if owner is None or owner.instance_id != conn.instance_id:
            owner = Credentials(conn.instance_id, conn.instance_secret)
        runner = LeaseRunner(self, offer, handler, conn, owner)
        self.runners[lease_id] = runner
        self.stats.running += 1
        runner.begin()

    # -- for the runners ---------------------------------------------------------------
    def ready_connection(self, *, not_: Connection | None = None) -> Connection | None:
        """The live, ready connection if there is one now (never ``not_``)."""
        conn = self._ready
        if conn is not None and conn is not not_ and not conn.closed.is_set():
            return conn
        return None

    def shortest_lease_ttl(self) -> float:
        """The shortest ttl granted to a lease this worker holds: what paces the heartbeat."""
        return min((runner.ttl for runner in self.runners.values()), default=NO_LEASE)

    def stopped_hard(self) -> bool:
        """Whether :meth:`stop` was called, or ``run()`` was refused for good: either way the worker's scope,
        around every handler, is cancelled, and a handler that returns anyway is not finished."""
        return self.stopped or self._refused is not None

    def spawn(self, fn: Callable[[], Coroutine[Any, Any, object]]) -> None:
        """Run a handler's job in a task of the pool (see ``pool``)."""
        self.pool.run(fn)

    def thread_stuck(self, stuck: bool) -> None:
        """A lost lease's ``def`` handler is still in its thread (True), or has left it (False)."""
        self.stats.stuck_threads += 1 if stuck else -1
        self._poke()

    def retire(self, runner: LeaseRunner) -> None:
        """The runner is done (finished, lost or never started): forget it."""
        if self.runners.get(runner.lease_id) is runner:
            del self.runners[runner.lease_id]
            self.stats.running -= 1
            if self._draining:  # only a drain waits for the last runner; else nothing needs waking per task
                self._poke()

    async def connection(self, *, not_: Connection | None = None) -> Connection:
        """The live, ready connection (waits through reconnects); never ``not_``."""
        while True:
            changed = self._ready_changed
            assert changed is not None, "the worker is not running"
            conn = self.ready_connection(not_=not_)
            if conn is not None:
                return conn
            await changed.wait()

    def _publish(self, conn: Connection | None) -> None:
        if self._ready is not conn:
            self._ready = conn
            if self._ready_changed is not None:
                self._ready_changed.set()
            self._ready_changed = anyio.Event()
            if conn is not None and self._first is not None:
                self._first.set()
                for runner in list(self.runners.values()):
                    runner.connected(conn)

    def _poke(self) -> None:
        if self._changed is not None:
            self._changed.set()

    async def _report_started(self, task_status: anyio.abc.TaskStatus[Worker]) -> None:
        assert self._first is not None
        await self._first.wait()
        task_status.started(self)

    async def _watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
            async for signum in signals:
                if not self._draining:
                    log.info("%s: draining (send it again to stop at once)", signal.Signals(signum).name)
                    self.drain()
                else:
                    log.warning("%s again: stopping now; unfinished leases will expire",
                                signal.Signals(signum).name)
                    self.stop()
