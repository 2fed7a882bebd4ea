"""A client WebSocket over an AnyIO byte stream (TCP, or TLS for ``wss://``), through ``websockets``' sans-IO ``ClientProtocol``.

The codec does RFC 6455 (the opening handshake with the subprotocol,
masking, ping answers, the closing handshake, the message size limit),
except that plain text frames are cut and built beside it
(``contract.ws_frames``: every other frame reaches it byte for byte); this module
does the I/O around it, without tasks of its own, so that its owner
(:mod:`pulse_trio.sdk.transport`) decides who reads and who writes:

* :meth:`ClientSocket.receive` reads one chunk and returns every complete
  text message in it, reassembled from fragments and checked to be UTF-8,
  so a chunk full of frames costs one read and no hop per frame;
* :meth:`ClientSocket.send_text` only encodes a frame into the codec's
  buffer, and :meth:`ClientSocket.flush` writes everything buffered, frames
  and automatic pongs alike, in one ``send_all``;
* :meth:`ClientSocket.close` runs the closing handshake with a time limit,
  or none at all once the peer is ``gone``.

An HTTP answer instead of the upgrade is raised as :class:`HandshakeRejected`
(the HTTP status and body), an upgrade no reconnect can make usable as
:class:`HandshakeUnusable`; everything else that ends a socket is
:class:`SocketClosed`, with a reason for the log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import ssl
from collections.abc import AsyncIterator

import anyio
import anyio.abc
from anyio.streams.tls import TLSStream
from websockets.client import ClientProtocol
from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.protocol import CLOSED, OPEN
from websockets.uri import WebSocketURI, parse_uri

from pulse_trio.contract import errors as e
from pulse_trio.contract.credentials import HiddenCredentials
from pulse_trio.contract.limits import MAX_FRAME_BYTES, SUBPROTOCOL
from pulse_trio.contract.ws_frames import FrameCutter, MaskKeys, queue_text

_CODEC_LOG = logging.getLogger("pulse_trio.sdk.websocket")
_CODEC_LOG.addFilter(HiddenCredentials())  # its DEBUG lines would show the token

RECEIVE_CHUNK = 65536
CLOSE_NORMAL = 1000
#: What a stream raises when it breaks under us (a TLS failure, a reset the backend did not wrap).
BROKEN = (anyio.BrokenResourceError, anyio.ClosedResourceError, ssl.SSLError, OSError)


class SocketClosed(Exception):
    """The socket ended, or never opened: a reconnect may fix it."""


class HandshakeUnusable(SocketClosed):
    """The socket never opened, and reconnecting to the same server will not open it either."""


class HandshakeRejected(Exception):
    """The server answered the upgrade request with an HTTP status instead of 101."""

    def __init__(self, status: int, body: bytes, location: str | None = None, retry_after: float = 0.0) -> None:
        """``location``: where a redirect points; ``retry_after``: the seconds a Retry-After asked for (or 0)."""
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body
        self.location = location
        self.retry_after = retry_after


class ClientSocket:
    """An open WebSocket: one reader and one writer may use it at a time (see the module docstring)."""

    def __init__(self, stream: anyio.abc.ByteStream, codec: ClientProtocol, early: list[Frame],
                 received: bytes) -> None:
        """``received``: every byte of the handshake response read, so the frame cutter knows where frames start."""
        self.stream = stream
        self.codec = codec
        #: Plain text frames are cut and built beside the codec; it gets every other frame (ws_frames).
        self.frames = FrameCutter(codec, masked=False)
        self.frames.after_handshake(received)
        self._keys = MaskKeys()
        self.subprotocol = codec.subprotocol
        self.ended: str | None = None  # why it ended, once it did
        #: The peer cannot hear us: the stream broke, or (the owner's verdict) a ping went unanswered.
        self.gone = False
        self._early = early  # frames that came with the handshake response
        self._partial: bytearray | None = None  # a fragmented message so far
        self._unread: list[bytes] = []
        self._ping: tuple[bytes, anyio.Event] | None = None  # the ping awaiting its pong

    # -- reading ---------------------------------------------------------------------
    async def receive(self) -> list[bytes]:
        """The complete text messages of the next chunk (maybe none); SocketClosed once the socket ended."""
        if self._unread:
            messages, self._unread = self._unread, []
            return messages
        if self._early:
            frames, self._early = self._early, []
            return self._messages(frames)
        if self.ended is not None:
            raise SocketClosed(self.ended)
        try:
            data = await self.stream.receive(RECEIVE_CHUNK)
        except anyio.EndOfStream:
            data = b""
        except BROKEN as exc:
            self.gone = True
            self._end(f"the connection broke: {exc.__cause__ or exc}")
            data = b""
        return self._messages(self.frames.receive(data) if data else self.frames.receive_eof())

    def _messages(self, frames: list[Frame]) -> list[bytes]:
        messages: list[bytes] = []
        codec = self.codec
        for frame in frames:
            opcode = frame.opcode
            if opcode is Opcode.TEXT or opcode is Opcode.CONT:  # the codec keeps the fragments in order
                data = frame.data
                if self._partial is not None:
                    self._partial += data
                    if not frame.fin:
                        continue
                    data, self._partial = bytes(self._partial), None
                elif not frame.fin:
                    self._partial = bytearray(data)
                    continue
                if not _is_utf8(data):
                    self._fail(e.CLOSE_INVALID_PAYLOAD, "text frame is not valid UTF-8")
                    break
                messages.append(data)
            elif opcode is Opcode.BINARY:
                self._fail(e.CLOSE_UNSUPPORTED_DATA, f"binary frames are not part of {SUBPROTOCOL}")
                break
            elif opcode is Opcode.PONG and self._ping is not None and frame.data == self._ping[0]:
                self._ping[1].set()
                self._ping = None
        if self.ended is None and codec.state is not OPEN:
            self._end(self._why_closed())
        return messages

    def unread(self, messages: list[bytes]) -> None:
        """Give back messages taken with :meth:`receive` but not handled: the next call returns them."""
        self._unread = messages + self._unread

    def _why_closed(self) -> str:
        codec = self.codec
        if codec.close_rcvd is not None:
            close = codec.close_rcvd
            return f"closed ({close.code}): {close.reason}" if close.reason else "the server closed the connection"
        if codec.parser_exc is not None:
            sent = codec.close_sent
            code = f" ({sent.code})" if sent is not None else ""
            return f"the server broke the WebSocket framing{code}: {codec.parser_exc}"
        return "the server closed the connection"

    def _fail(self, code: int, reason: str) -> None:
        self.codec.fail(code, reason)
        self._end(f"closed ({code}): {reason}")

    def _end(self, reason: str) -> None:
        if self.ended is None:
            self.ended = reason

    # -- writing ---------------------------------------------------------------------
    def send_text(self, data: bytes) -> None:
        """Encode one text message into the outgoing buffer (:meth:`flush` writes it)."""
        if self.codec.state is OPEN:
            queue_text(self.codec, data, self._keys.next())

    def ping(self) -> anyio.Event:
        """Buffer a ping; the event is set when its pong arrives (a later ping replaces it)."""
        answered = anyio.Event()
        if self.codec.state is OPEN:
            payload = os.urandom(4)
            self.codec.send_ping(payload)
            self._ping = (payload, answered)
        return answered

    @property
    def pending(self) -> bool:
        """Whether anything waits to be written (frames, pongs, the close)."""
        return bool(self.codec.writes)

    async def flush(self) -> None:
        """Write everything buffered in one send; SocketClosed if the stream broke."""
        chunks = [chunk for chunk in self.codec.data_to_send() if chunk]  # b"" stands for EOF: close() does it
        if not chunks:
            return
        try:
            await self.stream.send(b"".join(chunks))
        except BROKEN as exc:
            self.gone = True
            self._end(f"the connection broke while sending: {exc.__cause__ or exc}")
            raise SocketClosed(self.ended) from None

    # -- closing ---------------------------------------------------------------------
    async def close(self, timeout: float, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        """The closing handshake within ``timeout`` seconds (the server closes TCP first), then the stream.

        Shielded, so a worker that is being cancelled still says goodbye; the
        time limit keeps a vanished server from holding it up. A peer that is
        ``gone`` gets no goodbye: it would only use up the time limit, while
        the leases wait for the next connection to resume them.
        """
        with anyio.CancelScope(shield=True):
            if not self.gone:
                with anyio.move_on_after(timeout):
                    await self._closing_handshake(code, reason)
            self._end("closed by the worker")
            await anyio.aclose_forcefully(self.stream)

    async def _closing_handshake(self, code: int, reason: str) -> None:
        codec = self.codec
        try:
            if codec.state is OPEN:
                codec.send_close(code, reason)
            await self.flush()
            while codec.state is not CLOSED:
                try:
                    data = await self.stream.receive(RECEIVE_CHUNK)
                except anyio.EndOfStream:
                    data = b""
                if data:
                    self.frames.receive(data)
                else:
                    self.frames.receive_eof()
                await self.flush()
        except (SocketClosed, *BROKEN):
            pass


async def connect(url: str, headers: list[tuple[str, str]], *, ssl_context: ssl.SSLContext | None,
                  timeout: float) -> ClientSocket:
    """TCP (and TLS for ``wss://``), then the upgrade offering :data:`SUBPROTOCOL`, within ``timeout``."""
    try:
        uri = parse_uri(url)
    except InvalidURI as exc:
        raise SocketClosed(str(exc)) from None
    with anyio.move_on_after(timeout):
        try:
            stream: anyio.abc.ByteStream = await anyio.connect_tcp(uri.host, uri.port)
        except OSError as exc:
            raise SocketClosed(f"cannot connect to {uri.host}:{uri.port}: {exc}") from None
        async with _closed_on_failure(stream, "the connection broke during the handshake"):
            if uri.secure:
                # Not standard-compatible: a server that drops TCP without a TLS close_notify
                # ends the stream like any other EOF (the WebSocket close says the rest).
                stream = await TLSStream.wrap(stream, hostname=uri.host,
                                              ssl_context=ssl_context or ssl.create_default_context(),
                                              standard_compatible=False)
            return await _upgrade(stream, uri, headers)
    raise SocketClosed(f"no connection within {timeout:g}s")


async def _upgrade(stream: anyio.abc.ByteStream, uri: WebSocketURI, headers: list[tuple[str, str]]) -> ClientSocket:
    codec = ClientProtocol(uri, subprotocols=[SUBPROTOCOL], max_size=MAX_FRAME_BYTES, logger=_CODEC_LOG)
    request = codec.connect()
    for name, value in headers:
        if name in request.headers:  # the codec's own (Basic from user info): setting one only adds another
            del request.headers[name]
        request.headers[name] = value
    codec.send_request(request)
    await stream.send(b"".join(codec.data_to_send()))
    early: list[Frame] = []
    response: Response | None = None
    received = bytearray()
    while response is None:
        try:
            data = await stream.receive(RECEIVE_CHUNK)
        except anyio.EndOfStream:
            data = b""
        received += data
        if data:
            codec.receive_data(data)
        else:
            codec.receive_eof()
        for event in codec.events_received():
            if isinstance(event, Response):
                response = event
            else:
                early.append(event)
        if response is None and (not data or codec.handshake_exc is not None):
            raise SocketClosed(f"no handshake response: {codec.handshake_exc or 'the server closed'}")
    failure = codec.handshake_exc
    if isinstance(failure, InvalidStatus):
        answer = failure.response
        location = ", ".join(answer.headers.get_all("Location")) or None  # get() raises on a repeated one
        raise HandshakeRejected(answer.status_code, bytes(answer.body), location,
                                _seconds(answer.headers.get_all("Retry-After")))
    chosen = response.headers.get_all("Sec-WebSocket-Protocol")
    if failure is not None and chosen and chosen != [SUBPROTOCOL]:
        # The server's choice, as fixed as a missing subprotocol (which the session refuses).
        raise HandshakeUnusable(f"the server did not select subprotocol {SUBPROTOCOL}: it selected "
                                f"{', '.join(chosen)!r}")
    if isinstance(failure, InvalidHandshake):
        raise SocketClosed(f"invalid handshake response: {failure}")
    return ClientSocket(stream, codec, early, bytes(received))


@contextlib.asynccontextmanager
async def _closed_on_failure(stream: anyio.abc.ByteStream, what: str) -> AsyncIterator[None]:
    """Close ``stream`` if the block fails; a broken stream becomes SocketClosed saying ``what``.

    A certificate that fails verification becomes HandshakeUnusable.
    """
    try:
        yield
    except BROKEN as exc:
        await anyio.aclose_forcefully(stream)
        cause = exc.__cause__ or exc
        if isinstance(cause, ssl.SSLCertVerificationError):  # the same certificate is shown next time
            raise HandshakeUnusable(f"the TLS handshake refused the server's certificate: {cause} (one from a "
                                    "private CA needs ssl_context=, --ca-file in the CLI)") from None
        raise SocketClosed(f"{what}: {cause}") from None
    except BaseException:
        await anyio.aclose_forcefully(stream)
        raise


def _seconds(retry_after: list[str]) -> float:
    """A single Retry-After in seconds, else 0 (an HTTP date, a repeated or unreadable one: the backoff alone)."""
    if len(retry_after) == 1 and re.fullmatch(r"[0-9]{1,9}", retry_after[0].strip()):
        return float(retry_after[0].strip())
    return 0.0


def _is_utf8(data: bytes) -> bool:
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
