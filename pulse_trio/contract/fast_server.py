"""The fast path for server → worker frames: acks, offers and cancel pushes.

The mirror of :mod:`fast_client`, for the SDK: :func:`try_decode_server`
returns the message a well-formed frame stands for, or None, and None means
"ask the reference decoder" (``codec.decode_server``). The same three
rules make it safe: closed msgspec structs (made from the frames'
declarations in ``frames``) with ``UNSET`` for optional fields, a colon
count that rules out repeated keys outside the payload (see
:mod:`fast_client`), and the strict scanner for the payload, the only
open JSON a server sends. Welcomes and errors, which come once a session
or rarely, always take the reference path.

An ack's body has the shape of the request it answers, which only the
caller's table of pending requests knows: ``ack_for(reply_to)`` names the
request type, or None to leave the frame to the reference decoder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Union

import msgspec
from msgspec import Raw

from . import derive
from . import frames as fr
from . import messages as m
from .fast_client import keys_add_up
from .jsontext import JsonText, canonical_fragment, dumps
from .limits import MAX_PAYLOAD_DEPTH
from .scanner import ScanError, scan

#: The body of a lease command's ack, declared once: the SDK reads acks with it too (sdk/frames.py).
CommandResultBody = derive.struct(fr.COMMAND_RESULT)


def try_decode_server(data: bytes, ack_for: Callable[[str], str | None]) -> m.ServerMessage | None:
    """The message of a well-formed ack, offer or cancel push, or None (use the reference decoder)."""
    try:
        frame = _DECODER.decode(data)
        if type(frame) is _Ack:
            return _ack(frame, data, ack_for(frame.reply_to))
        return _BUILD[type(frame)](frame, data)
    except (*derive.UNREADABLE, ValueError, TypeError, ScanError):
        # msgspec's ValidationError is a DecodeError; InvalidMessage and derive.Decline are ValueErrors.
        return None


def payload_text(fragment: bytes) -> JsonText:
    """The payload as canonical text when the number rules hold, else Decline (the SDK's offer path reads it too)."""
    quick = canonical_fragment(fragment, max_depth=MAX_PAYLOAD_DEPTH)
    if quick is not None:
        return quick
    text, problem = dumps(scan(fragment.decode("utf-8"), max_depth=MAX_PAYLOAD_DEPTH), check_numbers=True)
    if problem is not None:
        raise derive.Decline
    return JsonText(text)


_ACK_FRAME = fr.FRAMES[m.Ack]
_Ack = derive.frame_struct(_ACK_FRAME, Raw)
_ACK_KEYS, _ = derive.envelope_count(_ACK_FRAME)
#: An ack's body by the request it answers (any lease command: a command result): decoder, builder.
_ACK_BODY = {
    request: (msgspec.json.Decoder(derive.struct(fr.ACK_BODIES[cls])),
              derive.fast_builder(fr.ACK_BODIES[cls], False, {}))
    for request, cls in m.ACK_BODY_FOR.items()
}
_COMMAND_ACK = _ACK_BODY["task.finish"]
#: task.assign and task.cancel: their structs and builders, from their declarations.
_BUILD = {
    derive.frame_struct(frame, derive.struct(frame.body)): derive.fast_frame(frame, {"payload": payload_text}, keys_add_up)
    for frame in (fr.FRAMES[m.TaskAssign], fr.FRAMES[m.TaskCancel])
}
_DECODER = msgspec.json.Decoder(Union[(_Ack, *_BUILD)])


def _ack(frame, data: bytes, request_type: str | None) -> m.Ack | None:
    if request_type is None:
        return None
    decoder, build = _ACK_BODY.get(request_type, _COMMAND_ACK)
    count = derive.Count(_ACK_KEYS, frame.id.count(":") + frame.session_id.count(":") + frame.reply_to.count(":"))
    body = build(decoder.decode(bytes(frame.body)), count)
    if not keys_add_up(data, count.keys, count.colons):
        return None
    return m.Ack(id=frame.id, session_id=frame.session_id, reply_to=frame.reply_to, body=body)
