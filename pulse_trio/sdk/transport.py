"""One session with the service over a :class:`~pulse_trio.sdk.websocket.ClientSocket`: hello, then three tasks.

* the reader reads a chunk and handles every message in it before it reads
  again: each goes through :class:`~pulse_trio.sdk.protocol.ClientProtocol`;
  an answer is handed to the callback its request was submitted with, pushes
  go to the worker's ``on_event(connection, event)`` callback. Both are
  synchronous: they only start tasks, set timers and queue frames, so the
  reader never waits on the worker;
* the writer is the only task that sends. A request only encodes its frame
  into the socket's buffer (nobody waits to hand it over), and the writer
  sends whatever has accumulated, frames and pongs, in one write each time
  it wakes, so no frame is ever half sent by a cancelled caller;
* the heartbeat: a ping whose pong is late drops the connection at once
  (no closing handshake with a peer that does not answer), so a half-open
  TCP connection is noticed well inside a lease's ttl and the leases are
  resumed on the next connection in time. It is paced by the shortest ttl
  of the leases the worker holds (the session's ttl at most): a lease told
  to :meth:`Connection.pace` quickens it at once, and the pace is read
  again before every ping.

When the connection ends, every pending request is answered with
``ConnectionLost``: the caller cannot know whether it committed, which is
why the lease runner resends it with the same revision after reconnecting.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import math
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio

from pulse_trio.contract import messages as m
from pulse_trio.contract.encoder import encode_bytes
from pulse_trio.contract.limits import SUBPROTOCOL
from pulse_trio.sdk import protocol as p
from pulse_trio.sdk import refusal
from pulse_trio.sdk.frames import LeaseFrames
from pulse_trio.sdk.websocket import ClientSocket, HandshakeRejected, HandshakeUnusable, SocketClosed, connect
from pulse_trio.sdk.errors import CommandRefused, ConnectionLost, ProtocolViolation, WorkerRefused

log = logging.getLogger("pulse_trio.sdk")

HELLO_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 2.0
#: The heartbeat pings every ttl/PINGS_PER_TTL (the ttl of the shortest lease held), kept within
#: PING_INTERVAL_S, and gives each pong two intervals. A lease is renewed a third of the way to its
#: expiry, so what is left of it when a connection goes half-open must cover noticing that,
#: reconnecting and resuming.
PINGS_PER_TTL = 8
PING_INTERVAL_S = (0.2, 10.0)
#: What ``shortest_lease`` says while no lease is held: the session's ttl paces the heartbeat.
NO_LEASE = math.inf


@dataclasses.dataclass(frozen=True, slots=True)
class Closed:
    """Not a frame: the connection ended (told to the worker like the events)."""

    reason: str


#: What a request's callback is given: the ack's body, the refusal, or ConnectionLost.
Answer = m.AckBody | CommandRefused | ConnectionLost


class _Waiter:
    """One awaited request's answer slot (for the few requests a task waits for)."""

    __slots__ = ("done", "answer")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.answer: Answer | None = None

    def resolve(self, answer: Answer) -> None:
        self.answer = answer
        self.done.set()


class Connection:
    """A welcomed session: send requests, get typed answers (use :func:`open_connection`)."""

    def __init__(self, socket: ClientSocket, welcome: m.WorkerWelcome,
                 protocol: p.ClientProtocol, on_event: Callable[[Connection, p.Event | Closed], None],
                 now: Callable[[], float] = anyio.current_time,
                 shortest_lease: Callable[[], float] = lambda: NO_LEASE) -> None:
        self.socket = socket
        self.welcome = welcome
        self.protocol = protocol
        self.now = now  # the event loop's clock
        self.closed = anyio.Event()
        self.close_reason = ""
        self._on_event = on_event
        self._callbacks: dict[str, Callable[[Answer], None]] = {}
        self._wake = anyio.Event()
        self._shortest_lease = shortest_lease  # the shortest ttl of the leases held
        self.ping_interval = ping_interval(self.lease_ttl)
        self._beat = anyio.CancelScope()  # the heartbeat's wait under way: ``pace`` may end it sooner
        self._beat_intervals = 1  # how many intervals that wait lasts
        # Server time minus local wall time at the welcome: lets lease
        # deadlines (server times) be turned into local timers.
        self.clock_offset = welcome.body.server_time - dt.datetime.now(dt.timezone.utc)

    # -- facts of the session ---------------------------------------------------
    @property
    def session_id(self) -> str:
        return self.welcome.session_id

    @property
    def instance_id(self) -> str:
        return self.welcome.body.instance_id

    @property
    def instance_secret(self) -> str:
        assert self.welcome.body.instance_secret is not None
        return self.welcome.body.instance_secret

    @property
    def lease_ttl(self) -> float:
        return self.welcome.body.lease_ttl_ms / 1000

    @property
    def max_result_bytes(self) -> int:
        return self.welcome.body.limits.max_result_bytes

    def server_now(self) -> dt.datetime:
        return dt.datetime.now(dt.timezone.utc) + self.clock_offset

    def local_deadline(self, expires_at: dt.datetime) -> float:
        """The loop clock time at which a server time ``expires_at`` is reached."""
        return self.now() + (expires_at - self.server_now()).total_seconds()

    # -- requests ---------------------------------------------------------------
    def submit(self, cls: type, fields: dict[str, Any], on_answer: Callable[[Answer], None]) -> None:
        """Queue one request; ``on_answer`` is called once with its answer, from the reader or at the close.

        Raises ConnectionLost (and sends nothing) when the connection has ended.
        """
        if self.closed.is_set():
            raise ConnectionLost(self.close_reason)
        message = self.protocol.request(cls, **fields)
        self._callbacks[message.id] = on_answer
        self.socket.send_text(encode_bytes(message))
        self._wake.set()

    def submit_lease(self, cls: type, lease: LeaseFrames, revision: int, tail: bytes,
                     on_answer: Callable[[Answer], None]) -> None:
        """Queue one lease command built from the lease's pre-encoded fields (see ``frames``); as ``submit``."""
        if self.closed.is_set():
            raise ConnectionLost(self.close_reason)
        request_id, frame = self.protocol.lease_request(cls, lease, revision, tail)
        self._callbacks[request_id] = on_answer
        self.socket.send_text(frame)
        self._wake.set()

    async def request(self, cls: type, **fields: Any) -> m.AckBody:
        """Send one request and wait for its ack body; raises CommandRefused or ConnectionLost."""
        waiter = _Waiter()
        self.submit(cls, fields, waiter.resolve)
        await waiter.done.wait()
        answer = waiter.answer
        if isinstance(answer, (CommandRefused, ConnectionLost)):
            raise answer
        assert answer is not None
        return answer

    # -- the three tasks ----------------------------------------------------------
    async def _read_loop(self) -> None:
        socket, protocol, answer, on_event = self.socket, self.protocol, self._answer, self._on_event
        reason: str | None = None  # set once nothing more will be read
        fatal: str | None = None  # a fatal error frame: the server closes next, read until it does
        try:
            while reason is None:
                for data in await socket.receive():
                    event = protocol.receive(data)
                    kind = type(event)
                    if kind is p.Answered:
                        answer(event.request, event.body)
                    elif kind is p.Offered or kind is p.CancelPushed:
                        on_event(self, event)
                    elif kind is p.Refused:
                        answer(event.request, p.refusal(event.error))
                    elif kind is p.Broken:
                        log.error("protocol violation by the server: %s; reconnecting", event.reason)
                        if event.request is not None:
                            answer(event.request, ConnectionLost(event.reason))
                        reason = event.reason
                        break
                    elif kind is p.Fatal:
                        log.warning("server: %s: %s", event.error.code, event.error.message)
                        fatal = f"{event.error.code}: {event.error.message}"
                    else:
                        log.warning("%s", event.reason)
                        on_event(self, event)
                if socket.pending:  # pongs, the echo of a close, a close after a framing error
                    self._wake.set()
                if reason is None:
                    reason = socket.ended
        except SocketClosed as exc:
            reason = str(exc)
        self._end(fatal or reason or "the server closed the connection")

    async def _write_loop(self) -> None:
        """The only sender: whatever was buffered since it last woke, in one write."""
        socket = self.socket
        try:
            while True:
                await self._wake.wait()
                self._wake = anyio.Event()
                await socket.flush()
        except SocketClosed as exc:
            self._end(str(exc))

    def pace(self, ttl: float) -> None:
        """A lease of ``ttl`` seconds is held: if it needs faster pings, the wait under way is cut to the new pace."""
        interval = ping_interval(ttl)
        if interval < self.ping_interval:
            self.ping_interval = interval
            self._beat.deadline = min(self._beat.deadline, anyio.current_time() + self._beat_intervals * interval)

    async def _heartbeat(self) -> None:
        socket = self.socket
        while True:
            self.ping_interval = ping_interval(min(self.lease_ttl, self._shortest_lease()))
            await self._beat_for(1, None)
            answered = socket.ping()
            self._wake.set()
            await self._beat_for(2, answered)
            if not answered.is_set():
                socket.gone = True
                self._end(f"no pong within {2 * self.ping_interval:g}s")
                return

    async def _beat_for(self, intervals: int, answered: anyio.Event | None) -> None:
        """Wait ``intervals`` ping intervals, or until ``answered`` is set."""
        self._beat_intervals = intervals
        with anyio.CancelScope(deadline=anyio.current_time() + intervals * self.ping_interval) as self._beat:
            if answered is None:
                await anyio.sleep_forever()
            else:
                await answered.wait()

    def _answer(self, request: p.Request, answer: Answer) -> None:
        callback = self._callbacks.pop(request.id, None)
        if callback is not None:
            callback(answer)

    def _end(self, reason: str) -> None:
        """Fail every pending request and tell the worker (idempotent)."""
        if self.closed.is_set():
            return
        self.close_reason = reason
        self.closed.set()
        callbacks, self._callbacks = self._callbacks, {}
        lost = ConnectionLost(reason)
        for callback in callbacks.values():
            callback(lost)
        self._on_event(self, Closed(reason))


def ping_interval(ttl: float) -> float:
    """The heartbeat's period for leases of ``ttl`` seconds."""
    low, high = PING_INTERVAL_S
    return min(high, max(low, ttl / PINGS_PER_TTL))


@contextlib.asynccontextmanager
async def open_connection(url: str, token: str, hello: m.WorkerHello, *, on_event: Callable[[Connection, p.Event | Closed], None],
                          ssl_context: ssl.SSLContext | None = None, strict: bool = False,
                          connect_timeout: float = 10.0,
                          now: Callable[[], float] = anyio.current_time,
                          shortest_lease: Callable[[], float] = lambda: NO_LEASE) -> AsyncIterator[Connection]:
    """Handshake, hello, welcome; yields the live connection and closes it on exit.

    ``shortest_lease`` is the shortest ttl of the leases the worker holds
    (``NO_LEASE`` without one), read before each ping.

    Raises ``WorkerRefused`` when the service refuses this worker for good
    (bad token, queue not allowed) and ``ConnectionLost`` for anything a
    reconnect may fix.
    """
    headers = [("Authorization", f"Bearer {token}")]
    try:
        socket = await connect(url, headers, ssl_context=ssl_context, timeout=connect_timeout)
    except HandshakeRejected as exc:
        redirected = exc.status in refusal.REDIRECTS
        if refusal.of_status(exc.status) is not refusal.Fault.TRANSIENT:
            detail = exc.body.decode("utf-8", "replace").strip()
            if redirected:
                detail = (f"redirected to {exc.location or '(no Location)'}; worker connections follow no redirect, "
                          f"use the URL of the worker endpoint itself{f' ({detail})' if detail else ''}")
            raise WorkerRefused(f"the service refused the handshake: HTTP {exc.status} {detail}",
                                status=exc.status, detail=detail) from None
        raise ConnectionLost(f"handshake refused: HTTP {exc.status}", retry_after=exc.retry_after) from None
    except HandshakeUnusable as exc:
        raise WorkerRefused(str(exc)) from None
    except SocketClosed as exc:
        raise ConnectionLost(str(exc)) from None
    try:
        if socket.subprotocol != SUBPROTOCOL:
            raise WorkerRefused(f"the server did not select subprotocol {SUBPROTOCOL}")
        with anyio.fail_after(HELLO_TIMEOUT_S):
            socket.send_text(encode_bytes(hello))
            await socket.flush()
            messages: list[bytes] = []
            while not messages:
                messages = await socket.receive()
        welcome = p.read_welcome(hello, messages[0], strict=strict)
        conn = Connection(socket, welcome, p.ClientProtocol(welcome, hello, strict=strict), on_event, now,
                          shortest_lease)
        socket.unread(messages[1:])
        # The caller's exception is carried past our nursery by hand, so
        # it comes out as itself rather than wrapped in an ExceptionGroup.
        failure: Exception | None = None
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(conn._read_loop)
            tasks.start_soon(conn._write_loop)
            tasks.start_soon(conn._heartbeat)
            try:
                yield conn
            except Exception as exc:
                failure = exc
            finally:
                conn._end(conn.close_reason or "closed by the worker")
                tasks.cancel_scope.cancel()
        if failure is not None:
            raise failure
    except (SocketClosed, TimeoutError, ProtocolViolation) as exc:
        raise ConnectionLost(f"{type(exc).__name__}: {exc}") from None
    finally:
        await socket.close(CLOSE_TIMEOUT_S)
