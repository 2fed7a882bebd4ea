"""Plain WebSocket text frames, cut and built beside ``websockets``' sans-IO codec.

Almost every frame of a busy connection is a single, unfragmented text
frame: one offer, one ack, one lease command. The codec parses each through
a chain of generators and builds each through a general serializer, which
is most of what a frame costs once the JSON is compiled. Here:

* :class:`FrameCutter` takes a connection's incoming bytes after the
  opening handshake and cuts them into whole frames. A final, unextended
  text frame with the masking the side expects, within the codec's size
  limit, on an open connection with no fragmented message under way, is
  unmasked here (with the codec's own ``apply_mask``) and returned as the
  codec would return it. Every other frame (control frames, fragments,
  binary, reserved bits, wrong masking, oversize) goes to the codec from
  its first byte to its last, as those bytes arrive, so the codec judges
  it exactly as before and as early: pongs, the closing handshake, every
  close code. The cutter counts what it handed over, so it knows where the
  codec's parser stands and takes over again at the next frame boundary. A
  frame's start that waits for more bytes is appended to, never copied
  whole again. Once the codec leaves the open state, or the handshake came
  with frame bytes already behind it, the codec gets everything.
* :func:`text_frame` builds the bytes ``Frame(TEXT, data).serialize()``
  would, masked with a key from :class:`MaskKeys` on the client side, and
  :func:`queue_text` queues them in the codec's own output list, so pongs
  and the closing handshake keep their order around them.

Both sides' tests feed random frame sequences in random chunks to a cutter
and to a bare codec and compare what comes out (``tests/contract/test_ws_frames.py``).
"""

from __future__ import annotations

import os

from websockets.frames import Frame, Opcode, apply_mask  # the codec's own: its C speedup when built, else Python
from websockets.protocol import OPEN, Protocol

_FIN_TEXT = 0x81  # FIN, no reserved bit, opcode 1
_MASK_BIT = 0x80
_TEXT = Opcode.TEXT
_HANDSHAKE_END = b"\r\n\r\n"


class FrameCutter:
    """A connection's incoming bytes to frames: plain text frames here, the rest through the codec."""

    __slots__ = ("codec", "_mask_bit", "_max", "_tail", "_fed", "_owed", "_on")

    def __init__(self, codec: Protocol, *, masked: bool) -> None:
        """``masked``: frames arrive masked (a server's cutter); the codec has done the handshake."""
        self.codec = codec
        self._mask_bit = _MASK_BIT if masked else 0
        self._max = _allowance(codec)  # no fragmented message under way: the codec's limit for a plain frame
        self._tail = bytearray()  # the start of a frame whose header or payload is still to come
        self._fed = 0  # how many bytes of the tail the codec has (the start of a header it judges)
        self._owed = 0  # the rest of a frame the codec has begun: bytes still to hand it
        self._on = False

    def after_handshake(self, received: bytes) -> None:
        """Take over if ``received`` (every byte the codec was fed so far) ends where the handshake does.

        A peer that sent frames in the same read as its handshake (which RFC
        6455 forbids a client, and this server never does) leaves the codec
        in the middle of its stream: the codec keeps the connection then.
        """
        end = received.find(_HANDSHAKE_END)
        self._on = end >= 0 and end + len(_HANDSHAKE_END) == len(received) and self.codec.state is OPEN

    @property
    def cutting(self) -> bool:
        """Whether plain text frames are cut here."""
        return self._on

    def receive(self, data: bytes) -> list[Frame]:
        """The frames (and the codec's other events) that ``data`` completes, in order."""
        codec = self.codec
        if not self._on:
            codec.receive_data(data)
            return codec.events_received()
        events: list[Frame] = []
        if self._owed:
            given = data[:self._owed]
            self._owed -= len(given)
            codec.receive_data(given)
            events += codec.events_received()
            if codec.state is not OPEN:
                return self._hand_over(events, data[len(given):])
            if self._owed:
                return events
            data = data[len(given):]
        if self._tail:  # a frame begun in an earlier read: appended to, never copied whole again
            self._tail += data
            buf: bytes | bytearray = self._tail
        else:
            buf = data
        fed = self._fed  # how much of the tail the codec already has (a header it has begun to judge)
        size = len(buf)
        pos = 0
        mask_bit, most = self._mask_bit, self._max
        while size - pos >= 2:
            first, second = buf[pos], buf[pos + 1]
            length = second & 0x7F
            head = pos + 2
            if length == 126:
                head += 2
            elif length == 127:
                head += 8
            known = head <= size  # the length is known
            if known and length >= 126:
                length = int.from_bytes(buf[pos + 2:head], "big")
            if second & _MASK_BIT:
                head += 4
            end = head + length
            if (first == _FIN_TEXT and second & _MASK_BIT == mask_bit and codec.current_size is None
                    and codec.state is OPEN and not codec.extensions and (not known or length <= most)):
                if end > size:  # its header or payload is still to come (a plain frame waits whole)
                    break
                payload = buf[head:end]
                if mask_bit:
                    payload = apply_mask(payload, buf[head - 4:head])
                elif type(payload) is not bytes:
                    payload = bytes(payload)
                events.append(Frame(_TEXT, payload))
                pos = end
                continue
            # Any other frame: the codec judges it as its bytes arrive, from the first two on.
            whole = head <= size  # its header is complete
            codec.receive_data(buf[pos + fed:end if whole else size])
            fed = 0
            events += codec.events_received()
            if codec.state is not OPEN:
                return self._hand_over(events, buf[end:] if whole else b"")
            if not whole:
                self._keep(buf, pos, size - pos)
                return events
            if end > size:
                self._owed = end - size
                self._keep(buf, size, 0)
                return events
            pos = end
        self._keep(buf, pos, 0)
        return events

    def _keep(self, buf: bytes | bytearray, pos: int, fed: int) -> None:
        """Keep ``buf[pos:]`` as the tail: the start of a frame still to come, ``fed`` bytes of it given to the codec."""
        if buf is self._tail:
            del buf[:pos]
        elif pos < len(buf):
            self._tail = bytearray(buf[pos:])
        self._fed = fed

    def receive_eof(self) -> list[Frame]:
        """The end of the stream: the codec sees any incomplete frame first, then the end."""
        codec = self.codec
        if len(self._tail) > self._fed:
            codec.receive_data(bytes(self._tail[self._fed:]))
        self._tail, self._fed, self._owed, self._on = bytearray(), 0, 0, False
        codec.receive_eof()
        return codec.events_received()

    def _hand_over(self, events: list[Frame], rest: bytes | bytearray) -> list[Frame]:
        """From here on the codec gets every byte, starting with ``rest``."""
        self._tail, self._fed, self._owed, self._on = bytearray(), 0, 0, False
        if rest:
            self.codec.receive_data(rest)
            events += self.codec.events_received()
        return events


def _allowance(codec: Protocol) -> float:
    """The largest frame the codec takes when no fragmented message is under way."""
    limits = [size for size in (codec.max_message_size, codec.max_fragment_size) if size is not None]
    return min(limits) if limits else float("inf")


def text_frame(data: bytes, mask: bytes | None = None) -> bytes:
    """One final text frame: what ``Frame(TEXT, data).serialize(mask=...)`` gives for this key."""
    n = len(data)
    bit = _MASK_BIT if mask is not None else 0
    if n < 126:
        head = bytes((_FIN_TEXT, bit | n))
    elif n < 65536:
        head = bytes((_FIN_TEXT, bit | 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((_FIN_TEXT, bit | 127)) + n.to_bytes(8, "big")
    if mask is None:
        return head + data
    return head + mask + apply_mask(data, mask)


def queue_text(codec: Protocol, data: bytes, mask: bytes | None = None) -> None:
    """Queue one text frame on an open ``codec``, in its own output list (``data_to_send`` returns it in order)."""
    codec.writes.append(text_frame(data, mask))


class MaskKeys:
    """Masking keys for a client's frames, drawn from the OS's random source a block at a time.

    RFC 6455 asks for unpredictable keys from a strong source; one
    ``os.urandom`` read per 1 024 keys keeps that, without a system call per
    frame.
    """

    __slots__ = ("_block", "_at")

    BLOCK = 4 * 1024

    def __init__(self) -> None:
        self._block = b""
        self._at = 0

    def next(self) -> bytes:
        at = self._at
        if at >= len(self._block):
            self._block, at = os.urandom(self.BLOCK), 0
        self._at = at + 4
        return self._block[at:at + 4]
