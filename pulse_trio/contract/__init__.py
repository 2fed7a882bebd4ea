"""The pulse.worker.v1 wire contract, sans-IO (no trio, no pymysql, no jsonschema).

The pipeline of docs/protocol.md §5.1 as modules, one job each:

* ``limits``: wire constants and the frame-size gate;
* ``scanner``: strict JSON (duplicates, surrogates, depth, exact numbers);
* ``jsontext``: canonical JSON text for results and payloads;
* ``grammar``: scalar grammars, id and secret generators;
* ``bodies`` / ``messages``: frozen, validated message objects;
* ``frames``: each frame declared once (envelope, fields in wire order),
  held against the message classes at import; ``derive`` makes structs,
  fast builders and encoders from it;
* ``readers``, ``client_decoder``, ``server_decoder``: typed decoding
  (the reference path, which names the precise error);
* ``fast_client``, ``fast_server``: the compiled path for well-formed frames;
* ``encoder``: messages to canonical frames;
* ``ws_frames``: plain WebSocket text frames cut and built beside the
  ``websockets`` codec, the transport's fast path;
* ``codec``: the entry points; ``errors``: the error tree.

Beside the pipeline, ``credentials`` checks the bearer token a client sends
(the worker SDK's and the producer clients') before any request carries it,
and ``options`` their options in seconds, both when the client is made.

The published JSON Schema ships beside them as ``worker.schema.json``.
"""

from .codec import (
    FrameHeader,
    RawFrame,
    decode_client,
    decode_client_frame,
    decode_server,
    decode_server_frame,
    encode,
    scan_frame,
)
from .errors import FrameTooLarge, InvalidMessage, ProtocolError
from .jsontext import JsonText

__all__ = [
    "FrameHeader", "RawFrame", "scan_frame", "decode_client", "decode_server", "decode_client_frame",
    "decode_server_frame", "encode", "ProtocolError", "FrameTooLarge", "InvalidMessage", "JsonText",
]
