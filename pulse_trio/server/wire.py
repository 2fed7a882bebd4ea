"""The worker endpoint's sockets: TCP (or TLS), the WebSocket codec, frames to the session.

Each connection runs over ``websockets``' sans-IO ``ServerProtocol`` (RFC
6455: the opening handshake with the subprotocol, masking, fragmentation,
ping/pong, close codes and the message size limit); after the handshake,
plain text frames are cut and built beside it (``contract.ws_frames``) and
it judges every other frame, byte for byte. Two tasks run in the connection's
nursery, and the session's third:

* the reader receives a chunk, lets the frame cutter cut it into frames, and hands
  every complete text message in it to the :class:`LiveSession` before
  it awaits the socket again;
* the writer sleeps until something is due, then sends everything that
  accumulated (answers, pushes, pongs, the close) in one ``send_all``;
* the session's results task (:meth:`LiveSession.apply_results`) applies
  what other tasks posted to the session's inbox (``session_inbox.py``):
  the outcomes of its lease commands, offers, lease ends, cancel notices,
  drains, the shutdown. No task but the reader and this one changes the session.

So a frame costs no task, channel or lock of its own: the codec's buffer is
the outbox, and a batch of acks committed together leaves in one write.
The three tasks end with the nursery; the session is released after it.

Keepalive is one task for the whole endpoint (:class:`~pulse_trio.server.keepalive.Keepalive`), not one
per connection, and an idle connection's ping costs no task switch: each
connection has a fixed slot among ``KEEPALIVE_SLOTS``, one slot is
pinged every ``interval / KEEPALIVE_SLOTS`` (so 10 000 sessions are not
pinged in one burst), and the ping is a constant two-byte frame written
straight to the socket when the writer has nothing in hand (through the
codec and the writer otherwise, and always under TLS).

Refusals happen before a WebSocket exists and are plain HTTP: 404 for
another path, 400 without the ``pulse.worker.v1`` subprotocol, 401 without
a valid worker token, 503 while the token cannot be looked up; each is
counted by its cause and logged, a line per cause per minute at most
(``handshake_refusals.py``). The whole handshake (TLS included) has the hello's
time limit, so a slow-loris client is dropped as soon as a silent one.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import ssl
from typing import TYPE_CHECKING

import trio
from websockets.frames import CloseCode, Opcode
from websockets.headers import parse_subprotocol
from websockets.http11 import Request
from websockets.protocol import CLOSED, OPEN
from websockets.server import ServerProtocol

from pulse_trio.contract import errors as e
from pulse_trio.contract.credentials import HiddenCredentials
from pulse_trio.contract.limits import MAX_CAPACITY, MAX_FRAME_BYTES, SUBPROTOCOL
from pulse_trio.contract.ws_frames import FrameCutter, queue_text
from pulse_trio.store.engine.facade import database_away
from pulse_trio.server.gated_accept import AcceptGate, GatedListener, counted
from pulse_trio.server.handshake import (BAD_REQUEST, NO_TOKEN, STORAGE_UNAVAILABLE, bearer_token, check_request,
                                        token_refusal)
from pulse_trio.server.handshake_refusals import CodecRefusalLines, peer_of
from pulse_trio.listen import bind_workers, listen_workers
from pulse_trio.server.live_session import LiveSession, in_flight_limit

if TYPE_CHECKING:
    from pulse_trio.server.endpoint import WorkerEndpoint
    from pulse_trio.tokens import TokenInfo

log = logging.getLogger("pulse_trio.connection")
_CODEC_LOG = logging.getLogger("pulse_trio.websocket")
_CODEC_LOG.addFilter(HiddenCredentials())  # its DEBUG lines would show the token
_CODEC_LOG.addFilter(CodecRefusalLines())  # a refusal is logged by the endpoint, bounded

RECEIVE_CHUNK = 65536
# The codec refuses a frame whose header announces more than this, before its
# payload arrives; a message just over the contract's limit is read whole and
# refused with a closing handshake (1009), so the peer's send completes.
CODEC_MAX_BYTES = 2 * MAX_FRAME_BYTES
CLOSE_TIMEOUT_S = 2.0
# A control frame's payload is at most 125 bytes (RFC 6455 §5.5); a server's adds a 2-byte header.
CONTROL_PAYLOAD_BYTES = 125
MAX_REASON_BYTES = CONTROL_PAYLOAD_BYTES - 2  # a close frame's payload begins with the 2-byte code
# Every frame the outbox can hold is bounded by the protocol: at most
# `capacity` offers outstanding, at most in_flight_limit(capacity) answers, a few pushes.
OUTBOX_FRAMES = MAX_CAPACITY + in_flight_limit(MAX_CAPACITY) + 16
# The frames the codec queues itself (a pong for every ping read) wait beside the outbox while the
# writer is blocked: no more than one text frame's worth of the largest, or the peer is dropped.
CONTROL_FRAMES = MAX_FRAME_BYTES // (2 + CONTROL_PAYLOAD_BYTES)
# A server's frames are not masked (RFC 6455 §5.1): a ping with no payload is always these two bytes.
PING_FRAME = b"\x89\x00"


async def serve_workers(endpoint: WorkerEndpoint, handler_nursery: trio.Nursery, ssl_context: ssl.SSLContext | None,
                        bound_sockets: list[trio.socket.SocketType] | None = None, gate: AcceptGate | None = None,
                        *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Accept worker connections until cancelled; ``task_status`` gets the port.

    ``bound_sockets`` are bound already (``listen.bind_workers``, or
    inherited from a serve group's parent); without them ``--worker-listen``
    is bound here. Either way they listen from now. With a ``gate`` (a serve
    group) a connection is taken only while this process holds no more than
    its share.
    """
    worker_listen = endpoint.settings.current.worker_listen
    if bound_sockets is None:
        bound_sockets = await bind_workers(worker_listen)
    listeners: list[trio.abc.Listener[trio.SocketStream]] = list(listen_workers(bound_sockets, worker_listen))
    bound = bound_sockets[0].getsockname()[1]
    handler = functools.partial(_connection, endpoint=endpoint, ssl_context=ssl_context)
    if gate is not None:
        listeners = [GatedListener(listener, gate) for listener in listeners]
        handler = counted(handler, gate)
    await trio.serve_listeners(handler, listeners, handler_nursery=handler_nursery,
                               task_status=_Started(task_status, bound))


class _Started:
    """serve_listeners reports its listeners; the service wants the port."""

    def __init__(self, task_status: trio.TaskStatus[int], port: int) -> None:
        self._task_status, self._port = task_status, port

    def started(self, value: object = None) -> None:
        self._task_status.started(self._port)


async def _connection(stream: trio.SocketStream, *, endpoint: WorkerEndpoint,
                      ssl_context: ssl.SSLContext | None) -> None:
    """One connection, from handshake to close; its failures stay its own."""
    connection = WireConnection(stream, endpoint, ssl_context)
    try:
        await connection.run()
    except Exception:
        # A bug in one connection must not take the instance (and every
        # other session) down with it: log it and drop just this socket.
        log.exception("connection handler failed")


class WireConnection:
    """The socket loop of one worker connection; the :class:`Outbox` of its session."""

    def __init__(self, stream: trio.abc.Stream, endpoint: WorkerEndpoint,
                 ssl_context: ssl.SSLContext | None) -> None:
        self.stream: trio.abc.Stream = stream
        self.endpoint = endpoint
        self._ssl_context = ssl_context
        # Called for every frame: bound once here, not looked up through the endpoint each time.
        self._count_frame_in = endpoint.count_frame_in
        self._count_frame_out = endpoint.count_frame_out
        self.ws = ServerProtocol(subprotocols=[SUBPROTOCOL], max_size=CODEC_MAX_BYTES, logger=_CODEC_LOG)
        #: After the handshake, plain text frames are cut beside the codec; it gets every other frame.
        self.frames = FrameCutter(self.ws, masked=True)
        self.session: LiveSession | None = None
        self._wake = trio.Event()
        self._queued = 0
        self._closing = False
        self._close_deadline: float | None = None  # set once, when the closing begins
        self._flushed_eof = trio.Event()
        #: A fragmented message so far: appended to in place, so each fragment costs its own bytes only
        #: (the codec bounds the bytes, not the fragments: empty ones are free to send).
        self._fragments: bytearray | None = None
        self._early: list = []  # frames that arrived with the upgrade request
        self._pinged_at: float | None = None
        self._scope: trio.CancelScope | None = None
        #: The reader's wait for the next chunk: a closing begun by another task brings its deadline forward.
        self._read_scope: trio.CancelScope | None = None
        self._parked = False  # the reader waits on the session (the store): it reads no pong meanwhile
        self.keepalive_slot = 0
        self._writing = False  # the writer is inside send_all
        self._unsent = b""  # the rest of a ping written straight to the socket in part, sent before the codec's data

    # -- the Outbox --------------------------------------------------------------
    def send(self, frame: bytes) -> bool:
        """Queue a text frame for the writer; False if the connection is ending."""
        if self._closing or self.ws.state is not OPEN:
            return False
        if self._queued >= OUTBOX_FRAMES:  # cannot happen within the protocol's bounds
            log.error("outbox full for %s; closing", self.session.session_id if self.session else "?")
            self._abort()
            return False
        queue_text(self.ws, frame)
        self._queued += 1
        self._count_frame_out(len(frame))
        self._wake.set()
        return True

    def close(self, code: int, reason: str) -> None:
        """Start the closing handshake after what is queued; the reader waits for the peer's close."""
        if self._closing:
            return
        self._begin_closing()
        if self.ws.state is OPEN:
            self.ws.send_close(code, reason.encode("utf-8")[:MAX_REASON_BYTES].decode("utf-8", "ignore"))
        self._wake.set()

    @property
    def closing(self) -> bool:
        return self._closing

    def _begin_closing(self) -> None:
        """No new frame goes out, and the peer has CLOSE_TIMEOUT_S from now to close.

        The session's free slots are none from now on (``LiveSession.ending``):
        it is filed again in the hub at once, so no claim offers it work it
        could never receive.
        """
        self._closing = True
        self._close_deadline = trio.current_time() + CLOSE_TIMEOUT_S
        if self._read_scope is not None:  # a reader waiting with no deadline would wait for the peer forever
            self._read_scope.deadline = min(self._read_scope.deadline, self._close_deadline)
        if self.session is not None:
            self.endpoint.sessions.hub.refresh(self.session)

    # -- what the rest of the service asks ------------------------------------------
    def shutdown(self) -> None:
        """server_shutting_down, then close (the instance is stopping): posted, the session's own task sends it."""
        if self.session is not None:
            self.session.inbox.shutdown()

    def keepalive(self, now: float, interval: float) -> None:
        if self._closing or self.ws.state is not OPEN or self.session is None:
            return
        if self._parked:  # pongs that came meanwhile are unread: none is missing, and the next ping waits
            self._pinged_at = None
            return
        if self._pinged_at is not None:
            if now - self._pinged_at >= 3 * interval:
                # The transport's own decision: the session's state is not touched (it ends with the close).
                log.info("pong missing for 3 intervals; closing %s", self.session.session_id)
                self.close(e.CLOSE_POLICY_VIOLATION, "pong missing")
            return
        self._pinged_at = now
        if not (self._writing or self._wake.is_set() or self.ws.writes) and isinstance(self.stream, trio.SocketStream):
            # Nothing is queued or being written, so the frame cannot land inside
            # another: write it now instead of waking the writer for two bytes.
            fd = self.stream.socket.fileno()
            if fd == -1:
                return
            try:
                sent = os.write(fd, PING_FRAME)
            except BlockingIOError:
                sent = 0
            except OSError:
                return  # the socket failed; the reader sees it
            if sent == len(PING_FRAME):
                return
            self._unsent = PING_FRAME[sent:]
        else:
            self.ws.send_ping(b"")
        self._wake.set()

    # -- lifecycle -----------------------------------------------------------------
    async def run(self) -> None:
        try:
            token = await self._handshake()
            if token is None:
                return
            self.session = LiveSession(self.endpoint.sessions, token, self)
            self.endpoint.connections.add(self)
            self.endpoint.keepalive.add(self)
            if self.endpoint.stopping.is_set():  # the stop told the connections open then: not this one
                self.shutdown()
            try:
                async with trio.open_nursery() as nursery:
                    self._scope = nursery.cancel_scope
                    nursery.start_soon(self._write_loop)
                    nursery.start_soon(self.session.apply_results)
                    await self._read_loop()
                    if not self.ws.eof_sent:  # the peer vanished, or never finished closing
                        self.ws.fail(CloseCode.ABNORMAL_CLOSURE)
                    self._wake.set()
                    # Let the writer flush the last answers and the close; bounded.
                    with trio.move_on_after(CLOSE_TIMEOUT_S):
                        await self._flushed_eof.wait()
                    nursery.cancel_scope.cancel()
            finally:
                self.endpoint.connections.discard(self)
                self.endpoint.keepalive.discard(self)
                with trio.CancelScope(shield=True):
                    await self.session.release()
        finally:
            with trio.CancelScope(shield=True):
                with trio.move_on_after(1):
                    await trio.aclose_forcefully(self.stream)

    def _abort(self) -> None:
        self._begin_closing()
        if self._scope is not None:
            self._scope.cancel()

    # -- the opening handshake --------------------------------------------------------
    async def _handshake(self):
        """Read and answer the upgrade request; the worker token on success, else None."""
        request: Request | None = None
        received = bytearray()  # what the codec was fed: the cutter takes over where the request ends
        with trio.move_on_after(self.endpoint.settings.current.hello_timeout):
            try:
                if self._ssl_context is not None:
                    self.stream = trio.SSLStream(self.stream, self._ssl_context, server_side=True)
                    await self.stream.do_handshake()
                while request is None:
                    data = await self.stream.receive_some(RECEIVE_CHUNK)
                    if not data:
                        return None
                    received += data
                    self.ws.receive_data(data)
                    for event in self.ws.events_received():
                        if isinstance(event, Request):
                            request = event
                        else:
                            self._early.append(event)
                    if request is None and self.ws.writes:  # the codec answered a malformed request
                        self._refused(BAD_REQUEST)
                        await self._flush_handshake()
                        return None
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return None
        if request is None:
            return None
        headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in request.headers.raw_items()]
        offered = tuple(p for value in request.headers.get_all("Sec-WebSocket-Protocol")
                        for p in _subprotocols(value))
        refusal = check_request(request.path, offered)
        info: TokenInfo | str = NO_TOKEN
        if refusal is None:
            token = bearer_token(headers)
            try:
                if token:
                    info = await self.endpoint.tokens.check(token)
            except Exception as exc:  # answered as a storage failure later would be: 503, come back later
                if database_away(exc):
                    # Every reconnecting worker comes here during an outage: the refusal's line is bounded.
                    log.debug("worker token not checked: %r", exc)
                else:  # a lookup that fails otherwise (a grant or a table gone, a bug): what failed, every time
                    log.exception("worker token not checked")
                refusal = STORAGE_UNAVAILABLE
            if refusal is None and type(info) is str:
                refusal = token_refusal(info)
        if refusal is not None:
            response = self.ws.reject(refusal.status, refusal.reason + "\n")
            for name, value in refusal.headers:
                response.headers[name] = value
            self.ws.send_response(response)
            self._refused(refusal.cause)
            await self._flush_handshake()
            return None
        response = self.ws.accept(request)
        self.ws.send_response(response)
        if response.status_code != 101:
            self._refused(BAD_REQUEST)
            await self._flush_handshake()
            return None
        self.frames.after_handshake(bytes(received))
        try:
            await self.stream.send_all(b"".join(self.ws.data_to_send()))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return None
        return info

    def _refused(self, cause: str) -> None:
        self.endpoint.refusals.refused(cause, peer_of(self.stream), trio.current_time())

    async def _flush_handshake(self) -> None:
        data = b"".join(self.ws.data_to_send())
        with trio.move_on_after(CLOSE_TIMEOUT_S):
            try:
                if data:
                    await self.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    # -- reading -------------------------------------------------------------------
    async def _read_loop(self) -> None:
        """Read until the closing handshake is done, the peer is gone, or a deadline passes."""
        service = self.session
        assert service is not None
        hello_deadline = trio.current_time() + self.endpoint.settings.current.hello_timeout
        events, self._early = self._early, []
        while True:
            if events and not self._closing:
                if not await self._handle(events) and not self._closing and self.ws.state is OPEN:
                    self.close(e.CLOSE_POLICY_VIOLATION, "closing")
            for frame in events:
                if frame.opcode is Opcode.PONG:
                    self._pinged_at = None
            if self.ws.writes:  # pongs, the echo of a close, a close after a framing error
                if len(self.ws.writes) - self._queued > CONTROL_FRAMES:
                    # A peer that pings and never reads: its pongs would grow without bound. Dropped
                    # as a full outbox is; a close frame would only wait behind them.
                    log.warning("pongs unsent past the limit for %s; closing", service.session_id)
                    self._abort()
                    return
                self._wake.set()
            if self.ws.state is CLOSED or self.ws.eof_sent:
                return
            if self._closing:  # fixed when the closing began: frames the peer keeps sending do not extend it
                deadline: float | None = self._close_deadline
            elif service.protocol.state == "awaiting_hello":
                deadline = hello_deadline
            else:
                deadline = None
            data: bytes | None = None
            try:
                with trio.CancelScope(deadline=math.inf if deadline is None else deadline) as self._read_scope:
                    data = await self.stream.receive_some(RECEIVE_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            finally:
                self._read_scope = None
            if data is None:  # a deadline passed
                if self._closing:
                    return  # the peer never completed the closing handshake
                service.hello_timed_out()
                events = []
                continue
            events = self.frames.receive(data) if data else self.frames.receive_eof()

    async def _handle(self, events: list) -> bool:
        """Every frame of one chunk, in order; False once nothing more will be read."""
        service, count_in = self.session, self._count_frame_in
        for frame in events:
            opcode = frame.opcode
            if opcode is Opcode.TEXT or opcode is Opcode.CONT:
                if self._closing:
                    continue  # after our close frame, data is discarded (RFC 6455 §1.4)
                if not frame.fin:
                    if self._fragments is None:
                        self._fragments = bytearray()
                    self._fragments += frame.data
                    continue
                data = frame.data
                if self._fragments is not None:
                    self._fragments += data
                    data, self._fragments = bytes(self._fragments), None
                if len(data) > MAX_FRAME_BYTES:
                    self.close(e.CLOSE_MESSAGE_TOO_BIG, f"frame larger than {MAX_FRAME_BYTES} bytes")
                    return False
                if not data.isascii():
                    try:
                        data.decode("utf-8")
                    except UnicodeDecodeError:
                        self.ws.fail(e.CLOSE_INVALID_PAYLOAD, "text frame is not valid UTF-8")
                        self._wake.set()
                        return False
                count_in(len(data))
                self._parked = True
                try:
                    received = await service.receive(data)
                finally:
                    self._parked = False
                if not received:
                    return False
            elif opcode is Opcode.BINARY:
                self.close(e.CLOSE_UNSUPPORTED_DATA, f"binary frames are not part of {SUBPROTOCOL}")
                return False
        return True

    # -- writing -------------------------------------------------------------------
    async def _write_loop(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                chunks = self.ws.data_to_send()
                self._queued = 0
                eof = b"" in chunks
                if eof:
                    chunks = chunks[:chunks.index(b"")]
                if self._unsent:
                    chunks.insert(0, self._unsent)
                    self._unsent = b""
                if chunks:
                    self._writing = True
                    await self.stream.send_all(b"".join(chunks))
                    self._writing = False
                if eof:
                    break
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        self._flushed_eof.set()
        self._abort()


def _subprotocols(value: str) -> list[str]:
    try:
        return list(parse_subprotocol(value))
    except Exception:  # a malformed header offers nothing
        return []
