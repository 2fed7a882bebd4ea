"""Frames ⇄ messages: the entry points of the wire contract.

Decoding (docs/protocol.md §5.1, layers 1, 2 and 4) is two steps, so the session
layer can apply the error precedence of docs/protocol.md §4.8 between them:

1. ``scan_frame(text)``: size gate, strict scanner, version check. Raises
   ``invalid_json`` or ``unsupported_version`` (and ``FrameTooLarge``);
   returns a ``RawFrame`` whose ``header`` holds what the session checks
   need (type, id, session_id, reply_to), each only if readable.
2. Here the session layer answers ``hello_required`` / ``session_mismatch``
   from the header, then calls ``decode_client(raw)`` / ``decode_server(raw)``:
   result and payload problems first (``invalid_result``,
   ``result_too_large``), then every other schema or grammar rule
   (``invalid_frame``), the message naming the offending field.

``decode_client_frame`` / ``decode_server_frame`` run both steps. The rules
re-implement the JSON Schema in plain Python (the server must not need
jsonschema at run time); the contract tests prove both give one verdict.
Every ``ProtocolError`` from step 2 carries ``reply_to`` = the frame's id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import client_decoder, server_decoder
from . import errors as e
from . import grammar as g
from . import messages as m
from .encoder import encode
from .errors import ProtocolError
from .limits import PROTOCOL_VERSION, check_frame_size
from .readers import Bad, show
from .scanner import ScanError, scan

__all__ = [
    "FrameHeader", "RawFrame", "scan_frame", "decode_client", "decode_server",
    "decode_client_frame", "decode_server_frame", "encode",
]


@dataclass(frozen=True, slots=True)
class FrameHeader:
    """Envelope fields as far as they could be read (None when not)."""

    type: str | None  # the raw string, known type or not
    id: str | None  # only when it matches the message-id grammar: safe to echo as reply_to
    session_id: str | None  # the raw string, whatever its grammar (compare it, don't trust it)
    reply_to: str | None  # only when it matches the message-id grammar


@dataclass(frozen=True, slots=True, eq=False)
class RawFrame:
    """A strictly scanned frame of protocol version "1", not yet typed."""

    header: FrameHeader
    tree: dict[str, Any]


def scan_frame(text: str | bytes) -> RawFrame:
    """Size gate, strict JSON, version; raises ProtocolError."""
    check_frame_size(text)
    if not isinstance(text, str):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(e.INVALID_JSON, f"frame is not UTF-8: {exc.reason}") from None
    try:
        tree = scan(text)
    except ScanError as exc:
        raise ProtocolError(e.INVALID_JSON, f"frame is not strict JSON: {exc}") from None
    if type(tree) is not dict:
        raise ProtocolError(e.UNSUPPORTED_VERSION, 'a frame is a JSON object with protocol_version "1"')
    header = FrameHeader(
        type=_string_or_none(tree.get("type")),
        id=_message_id_or_none(tree.get("id")),
        session_id=_string_or_none(tree.get("session_id")),
        reply_to=_message_id_or_none(tree.get("reply_to")),
    )
    version = tree.get("protocol_version")
    if type(version) is not str or version != PROTOCOL_VERSION:
        raise ProtocolError(
            e.UNSUPPORTED_VERSION,
            f'protocol_version: only "1" is supported, got {show(version)}',
            reply_to=header.id,
        )
    return RawFrame(header, tree)


def decode_client(raw: RawFrame) -> m.ClientMessage:
    """Type a scanned worker frame (the server side); raises ProtocolError."""
    try:
        return client_decoder.decode_tree(raw.tree)
    except Bad as bad:
        raise ProtocolError(bad.code, bad.text, reply_to=raw.header.id) from None


def decode_server(raw: RawFrame, *, ack_for: str | None = None, strict: bool = True) -> m.ServerMessage:
    """Type a scanned server frame (the SDK side); raises ProtocolError.

    ``ack_for`` is the type of the pending request an ack answers (from the
    caller's pending-request table): the body must then have that request's
    shape (``messages.ACK_BODY_FOR``). Without it the shape is recognised
    by its fields. ``strict=False`` ignores unknown fields.
    """
    if ack_for is not None and ack_for not in m.ACK_BODY_FOR:
        raise ValueError(f"{ack_for!r} is not a request that is answered by an ack")
    try:
        return server_decoder.decode_tree(raw.tree, ack_for, strict)
    except Bad as bad:
        raise ProtocolError(bad.code, bad.text, reply_to=raw.header.id) from None


def decode_client_frame(text: str | bytes) -> m.ClientMessage:
    """Worker → server frame text to a message, all layers; raises ProtocolError."""
    return decode_client(scan_frame(text))


def decode_server_frame(text: str | bytes, *, ack_for: str | None = None, strict: bool = True) -> m.ServerMessage:
    """Server → worker frame text to a message, all layers; raises ProtocolError."""
    return decode_server(scan_frame(text), ack_for=ack_for, strict=strict)


def _string_or_none(value: Any) -> str | None:
    return value if type(value) is str else None


def _message_id_or_none(value: Any) -> str | None:
    return value if type(value) is str and g.is_message_id(value) else None
