"""Messages to frames: canonical compact JSON.

Canonical means one text per message: fields in the order of
docs/protocol.md §4 (the order ``frames`` declares them in), no
insignificant whitespace, counters as decimal strings, times with exactly 6 fractional digits, optional fields omitted
when they hold their default, results and payloads spliced in verbatim.
Messages validate themselves when built, so encoding cannot fail on values.

The text comes from msgspec's compiled encoder, which escapes strings as the
standard library does with ``ensure_ascii=False`` and splices ``Raw``
fragments (results, payloads) in verbatim.
"""

from __future__ import annotations

from typing import Any, Callable

import msgspec

from . import derive
from . import frames as fr
from . import messages as m

_JSON = msgspec.json.Encoder()


def encode(message: m.Message) -> str:
    """The frame text for a message."""
    return encode_bytes(message).decode("utf-8")


def encode_bytes(message: m.Message) -> bytes:
    """The frame as UTF-8 bytes, what a WebSocket text frame carries."""
    try:
        build = _BUILDERS[type(message)]
    except KeyError:
        raise TypeError(f"not a pulse.worker.v1 message: {type(message).__name__}") from None
    return _JSON.encode(build(message))


#: Each message type's frame as a dict in wire order, made from its declaration in ``frames``.
_BUILDERS: dict[type, Callable[[Any], dict[str, Any]]] = {
    cls: derive.frame_encoder(frame) for cls, frame in fr.FRAMES.items()
}
#: The bodies of welcomes and acks, for callers that check a body on its own.
welcome_body = derive.encoder(fr.WELCOME)
lease_body = derive.encoder(fr.LEASE)
command_result_body = derive.encoder(fr.COMMAND_RESULT)
