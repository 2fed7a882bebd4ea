"""A WebSocket peer on websockets' sans-IO ``ServerProtocol``, for frames no well-behaved server sends.

The SDK's socket must cope with fragmented messages, pings, invalid UTF-8,
binary and oversized messages, a closing handshake from either side and a
peer that stops answering pings. Here a test writes each of those over a
real TCP (or TLS) socket, frame by frame. ``RawPeer`` also has the
``get_message`` / ``send_message`` pair that :class:`scripted_server.Peer`
uses, so a scripted session (hello, welcome, offers) can run over it.
"""

from __future__ import annotations

import ssl

import trio
from websockets.frames import Opcode
from websockets.http11 import Request
from websockets.protocol import CLOSED, OPEN
from websockets.server import ServerProtocol

from sdk_support import serve_locally

from pulse_trio.contract.limits import SUBPROTOCOL

CHUNK = 65536


class RawPeer:
    """One accepted connection; every method that sends writes the codec's whole buffer at once."""

    def __init__(self, stream: trio.abc.Stream, codec: ServerProtocol, request: Request) -> None:
        self.stream = stream
        self.codec = codec
        self.request = request
        self.answer_pings = True
        self.pings = 0
        self.pongs: list[bytes] = []
        self.close_code: int | None = None  # what the worker's close frame said
        self.gone = trio.Event()  # the worker's side of the TCP connection closed
        self._messages, self._inbox = trio.open_memory_channel[str](64)
        self._sending = trio.Lock()

    @property
    def authorization(self) -> str | None:
        return self.request.headers.get("Authorization")

    async def get_message(self) -> str:
        return await self._inbox.receive()

    async def send_message(self, text: str) -> None:
        self.codec.send_text(text.encode())
        await self.flush()

    async def send_fragments(self, *parts: bytes) -> None:
        """One text message in ``len(parts)`` frames."""
        self.codec.send_text(parts[0], fin=len(parts) == 1)
        for n, part in enumerate(parts[1:], start=2):
            self.codec.send_continuation(part, fin=n == len(parts))

    def send_raw_text(self, data: bytes) -> None:
        """A text frame with any payload at all (the codec does not check what it sends)."""
        self.codec.send_text(data)

    def send_binary(self, data: bytes) -> None:
        self.codec.send_binary(data)

    def ping(self, data: bytes = b"peer") -> None:
        self.codec.send_ping(data)

    async def close(self, code: int, reason: str = "") -> None:
        self.codec.send_close(code, reason)
        await self.flush()

    async def flush(self) -> None:
        async with self._sending:  # the test and the peer's reader may both write
            data = b"".join(self.codec.data_to_send())
            if data:
                try:
                    await self.stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass

    async def run(self) -> None:
        """Read until the worker is gone: queue its messages, note its close, answer pings unless told not to."""
        try:
            while self.codec.state is not CLOSED:
                try:
                    data = await self.stream.receive_some(CHUNK)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                if data:
                    self.codec.receive_data(data)
                else:
                    self.codec.receive_eof()
                pinged = False
                for frame in self.codec.events_received():
                    if frame.opcode is Opcode.TEXT:
                        self._messages.send_nowait(frame.data.decode())
                    elif frame.opcode is Opcode.PING:
                        self.pings += 1
                        pinged = True
                    elif frame.opcode is Opcode.PONG:
                        self.pongs.append(frame.data)
                    elif frame.opcode is Opcode.CLOSE and self.codec.close_rcvd is not None:
                        self.close_code = self.codec.close_rcvd.code
                if pinged and not self.answer_pings:
                    self.codec.data_to_send()  # the pongs the codec queued are never sent
                await self.flush()
                if not data or self.codec.eof_sent:  # a server closes TCP once the closing handshake is done
                    break
        finally:
            self.gone.set()
            await trio.aclose_forcefully(self.stream)


class RawServer:
    """Accepts connections (upgrading them, or refusing with ``reject``) and hands each to the test."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self.port = 0
        self.ssl_context = ssl_context
        self.reject: tuple[int, str] | None = None  # (status, body) to refuse every upgrade with
        self.reject_headers: list[tuple[str, str]] = []  # added to that refusal (Location, Retry-After)
        #: The Sec-WebSocket-Protocol of the 101 instead of the negotiated one ("" leaves it out).
        self.subprotocol: str | None = None
        self.request_times: list[float] = []  # when each upgrade request was read, on the test's Trio clock
        self.silent = False  # upgrade, then never read again (a peer that vanished)
        self._send, self._receive = trio.open_memory_channel[RawPeer](4)

    def url(self, path: str = "/v1/worker") -> str:
        scheme = "wss" if self.ssl_context is not None else "ws"
        return f"{scheme}://localhost:{self.port}{path}"

    async def serve(self, task_status: trio.TaskStatus[RawServer] = trio.TASK_STATUS_IGNORED) -> None:
        await serve_locally(self, self._accept, task_status)

    async def next_peer(self, timeout: float = 5.0) -> RawPeer:
        with trio.fail_after(timeout):
            return await self._receive.receive()

    async def _accept(self, tcp: trio.SocketStream) -> None:
        stream: trio.abc.Stream = tcp
        if self.ssl_context is not None:
            stream = trio.SSLStream(tcp, self.ssl_context, server_side=True)
        codec = ServerProtocol(subprotocols=[SUBPROTOCOL])
        request = None
        try:
            while request is None:
                data = await stream.receive_some(CHUNK)
                if not data:
                    return
                codec.receive_data(data)
                request = next((e for e in codec.events_received() if isinstance(e, Request)), None)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        self.request_times.append(trio.current_time())
        if self.reject is not None:
            response = codec.reject(*self.reject)
            for name, value in self.reject_headers:
                response.headers[name] = value
        else:
            response = codec.accept(request)
            if self.subprotocol is not None:
                del response.headers["Sec-WebSocket-Protocol"]
                if self.subprotocol:
                    response.headers["Sec-WebSocket-Protocol"] = self.subprotocol
        codec.send_response(response)
        peer = RawPeer(stream, codec, request)
        await peer.flush()
        if codec.state is not OPEN:
            await trio.aclose_forcefully(stream)
            return
        await self._send.send(peer)
        if self.silent:
            await trio.sleep_forever()
        await peer.run()
