"""Refused worker handshakes: each counted by its cause, at most one log line per cause per interval.

A fleet started with a revoked or mistyped token, or someone guessing
tokens, refuses hundreds of handshakes a second. The counter
(``pulse_worker_handshakes_refused_total``) counts every one; the log says
each cause once per :data:`LOG_INTERVAL_S`, with the peer of the refusal
that opened the interval, and its next line for that cause says how many
it left out since. A flood therefore costs a few lines a minute, and a
flood that stops is still whole in the counter. Nothing the client chose is
written: the cause is one of a fixed set and the peer is the socket's own
address; the token, its digest and the request's headers never are. The
WebSocket codec's own line for each refusal (at INFO, one per handshake)
is dropped (:class:`CodecRefusalLines`): this one replaces it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

log = logging.getLogger("pulse_trio.connection")

#: Seconds between two lines of one cause; the refusals in between are counted, not written.
LOG_INTERVAL_S = 60.0


class HandshakeRefusals:
    """Counts a refusal (``count(cause)``) and logs it, one line per cause per interval."""

    __slots__ = ("_count", "_interval", "_quiet_until", "_left_out")

    def __init__(self, count: Callable[[str], None], interval: float = LOG_INTERVAL_S) -> None:
        self._count, self._interval = count, interval
        self._quiet_until: dict[str, float] = {}  # cause -> when its next line may be written
        self._left_out: dict[str, int] = {}  # cause -> refusals not written since its last line

    def refused(self, cause: str, peer: str, now: float) -> None:
        """One refused handshake; ``now`` is a monotonic time in seconds (the caller's clock)."""
        self._count(cause)
        if now < self._quiet_until.get(cause, -float("inf")):
            self._left_out[cause] = self._left_out.get(cause, 0) + 1
            return
        self._quiet_until[cause] = now + self._interval
        left_out = self._left_out.pop(cause, 0)
        more = f"; {left_out} more for this cause since its last line" if left_out else ""
        log.warning("worker handshake refused: %s from %s%s", cause, peer, more,
                    extra={"reason": cause, "peer": peer, "suppressed": left_out})


class CodecRefusalLines(logging.Filter):
    """Drops the ``websockets`` codec's INFO line for each refused handshake, which a flood would multiply."""

    _TEMPLATES = frozenset({"HTTP response sent (%d %s)", "connection rejected (%d %s)"})

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg not in self._TEMPLATES


def peer_of(stream: trio.abc.Stream) -> str:
    """``host:port`` of the socket under ``stream`` (TLS or not): the load balancer's when one is in front."""
    while isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    if not isinstance(stream, trio.SocketStream):
        return "unknown"
    try:
        address = stream.socket.getpeername()
    except OSError:  # the peer is already gone
        return "unknown"
    host, port = address[0], address[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


__all__ = ["LOG_INTERVAL_S", "CodecRefusalLines", "HandshakeRefusals", "peer_of"]
