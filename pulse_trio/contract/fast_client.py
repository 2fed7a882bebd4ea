"""The fast path for worker → server frames: compiled decoding of well-formed frames.

:func:`try_decode_client` returns the message a valid frame stands for, or
None; None means "ask the reference decoder" (``codec.scan_frame`` then
``codec.decode_client``), which gives every malformed frame its exact code
and message. So the fast path may decline anything, but it must never
accept a frame the reference decoder would refuse. It gets there with:

* msgspec structs made from the frames' declarations (``frames``, through
  ``derive``), closed (``forbid_unknown_fields``), with ``UNSET`` for
  optional fields so ``null`` is refused and presence is known. msgspec is as strict as the standard library's parser about the
  grammar (no NaN, no trailing data, no control characters, no lone
  surrogate escape), and its integer fields refuse ``1.0`` and ``true``;
* the one rule msgspec does not check, duplicate keys, checked by counting:
  outside the ``result`` fragment, a frame with no backslash has no quote
  inside its strings, so every colon there is a key's or one inside a
  string value. The colons must add up to exactly the keys the struct
  holds plus the colons of its string values; a repeated key (whose first
  value msgspec dropped) always leaves one colon over;
* the ``result`` fragment, the only open JSON in a worker frame, through the
  strict scanner and the result rules, as the reference decoder does;
* the message constructors, which check every grammar and range.

The UTF-8 of the frame has been checked by the WebSocket layer (close 1007).
"""

from __future__ import annotations

from typing import Union

import msgspec

from . import derive
from . import frames as fr
from . import messages as m
from .jsontext import JsonText, canonical_fragment, dumps, utf8_size
from .limits import MAX_RESULT_BYTES, MAX_RESULT_DEPTH
from .scanner import ScanError, scan


def try_decode_client(data: bytes) -> m.ClientMessage | None:
    """The message of a valid worker frame, or None (use the reference decoder)."""
    try:
        frame = _DECODER.decode(data)
        return _BUILD[type(frame)](frame, data)
    except (*derive.UNREADABLE, ValueError, TypeError, ScanError):
        # msgspec's ValidationError is a DecodeError; InvalidMessage and derive.Decline are ValueErrors.
        return None


def keys_add_up(data: bytes, keys: int, strings: int, fragment: bytes = b"") -> bool:
    """True when no key can be repeated: see the module docstring."""
    if data.count(b"\\") != fragment.count(b"\\"):
        return False
    return data.count(b":") - fragment.count(b":") == keys + strings


def _result(fragment: bytes) -> JsonText:
    """The result as canonical text when every result rule holds, else Decline."""
    if fragment == b"null":
        raise derive.Decline
    quick = canonical_fragment(fragment, max_depth=MAX_RESULT_DEPTH)
    if quick is not None:
        if utf8_size(quick) > MAX_RESULT_BYTES:
            raise derive.Decline
        return quick
    value = scan(fragment.decode("utf-8"), max_depth=MAX_RESULT_DEPTH)
    if value is None:
        raise derive.Decline
    text, problem = dumps(value, check_numbers=True)
    if problem is not None or utf8_size(text) > MAX_RESULT_BYTES:
        raise derive.Decline
    return JsonText(text)


#: Each worker frame's struct and builder, made from its declaration in ``frames``.
_BUILD = {
    derive.frame_struct(frame, derive.struct(frame.body)): derive.fast_frame(frame, {"result": _result}, keys_add_up)
    for cls, frame in fr.FRAMES.items() if cls.TYPE in m.CLIENT_TYPES
}
_DECODER = msgspec.json.Decoder(Union[tuple(_BUILD)])
