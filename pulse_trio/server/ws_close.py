"""Fail a WebSocket with the right close code when wsproto cannot parse a frame.

worker-protocol.md §5: a text frame with invalid UTF-8 is closed with 1007
by the WebSocket layer (RFC 6455 §8.1; likewise 1002 for other framing
errors). wsproto reports such a frame as a ``CloseConnection`` event with
that code while its state stays ``OPEN``, and trio-websocket 0.12 treats
every ``CloseConnection`` as the peer's close: a server then drops TCP
without ever sending a close frame, so the peer sees 1006 instead of 1007.

This wraps trio-websocket's close handler for server connections: an event
that arrives in state ``OPEN`` (a real close frame from the peer moves
wsproto to ``REMOTE_CLOSING`` first) is answered with a close frame of its
code before trio-websocket closes the stream. Installed once, on import,
by :mod:`pulse_trio.server.connection`.
"""

from __future__ import annotations

import trio_websocket
from trio_websocket import _impl
from wsproto.connection import ConnectionState
from wsproto.events import CloseConnection

MAX_REASON_BYTES = 123  # a close frame's payload is at most 125 bytes, 2 of them the code

_original = _impl.WebSocketConnection._handle_close_connection_event


async def _handle_close_connection_event(self: trio_websocket.WebSocketConnection,
                                         event: CloseConnection) -> None:
    if self.is_server and self._wsproto.state == ConnectionState.OPEN:
        reason = (event.reason or "").encode("utf-8")[:MAX_REASON_BYTES].decode("utf-8", "ignore")
        try:
            await self._send(CloseConnection(code=event.code, reason=reason))
        except trio_websocket.ConnectionClosed:
            pass  # the peer is gone already; nothing to tell it
    await _original(self, event)


def install() -> None:
    if getattr(_impl.WebSocketConnection._handle_close_connection_event, "__pulse_patched__", False):
        return
    _handle_close_connection_event.__pulse_patched__ = True  # type: ignore[attr-defined]
    _impl.WebSocketConnection._handle_close_connection_event = _handle_close_connection_event  # type: ignore[method-assign]
