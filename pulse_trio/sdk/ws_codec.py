"""``websockets``' client codec with a lean path for the one frame a worker sends per command: text.

RFC 6455 wants every client frame masked with a key "derived from a strong
source of entropy". The library draws each key with its own ``getrandom``
call and serializes every frame through its general path (checks for the
reserved bits, the extensions, a ``BytesIO``); under load a worker spent
about a tenth of its time there. :class:`Codec` serializes unfragmented and
fragmented text frames itself when no extension was negotiated (the
service negotiates none), with keys cut from one ``os.urandom`` read per
1 024 frames, and leaves every other frame (pings, pongs, the close) and
everything else the protocol does to the library. The frames are the same
bytes the library would write for the same key (``tests/sdk/test_ws_codec.py``).
"""

from __future__ import annotations

import os
import struct

from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode, apply_mask

KEYS_PER_READ = 1024


class MaskKeys:
    """Four-byte masking keys from the OS's random source, read in blocks."""

    __slots__ = ("_block", "_at")

    def __init__(self) -> None:
        self._block = b""
        self._at = 0

    def take(self) -> bytes:
        at = self._at
        if at >= len(self._block):
            self._block, at = os.urandom(4 * KEYS_PER_READ), 0
        self._at = at + 4
        return self._block[at:at + 4]


def masked_text_frame(data: bytes, fin: bool, key: bytes) -> bytes:
    """One masked text frame (FIN as given, no reserved bits): header, key, masked payload."""
    head = 0x81 if fin else 0x01
    length = len(data)
    if length < 126:
        header = bytes((head, 0x80 | length))
    elif length < 65536:
        header = struct.pack("!BBH", head, 0xFE, length)
    else:
        header = struct.pack("!BBQ", head, 0xFF, length)
    return header + key + apply_mask(data, key)


class Codec(ClientProtocol):
    """The library's ``ClientProtocol``; text frames without extensions take :func:`masked_text_frame`."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._keys = MaskKeys()

    def send_frame(self, frame: Frame) -> None:
        if frame.opcode is Opcode.TEXT and not self.extensions and not self.debug:
            self.writes.append(masked_text_frame(frame.data, frame.fin, self._keys.take()))
            return
        super().send_frame(frame)


__all__ = ["Codec", "MaskKeys", "masked_text_frame"]
