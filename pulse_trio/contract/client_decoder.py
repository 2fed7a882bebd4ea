"""Worker → server frames to messages (what the server reads).

Closed everywhere: an unknown field, an alias, or a response-only field
(``reply_to``, ``error``, even empty or null) is an invalid frame. The
shapes and fields come from the frames' declarations (``frames``); what is
written here is the order of the checks, which decides the error a frame
with several faults gets (docs/protocol.md §4.8).
"""

from __future__ import annotations

from typing import Any

from . import frames as fr
from . import messages as m
from . import readers as r

_IN_BODY = r.envelope_or("body")
#: A hello's subscriptions and client are read before its id and its other fields, a subscription's
#: kinds before its queue.
_HELLO_FIRST = ("subscriptions", "client")
_FIRST = {"subscription": ("kinds",)}


def decode_tree(tree: dict[str, Any]) -> m.ClientMessage:
    """Raises ``readers.Bad``; result problems first, as docs/protocol.md §4.8 orders them."""
    result = None
    body = tree.get("body")
    if tree.get("type") == "task.finish" and type(body) is dict and "result" in body:
        result = r.json_value(body["result"], "body.result", nullable=False)
    cls = r.message_type(tree, m.CLIENT_TYPES, m.SERVER_TYPES, "by a worker")
    for key in ("reply_to", "error"):
        if key in tree:
            raise r.Bad(key, "response-only field, never sent in a request")
    frame = fr.FRAMES[cls]
    if cls is m.WorkerHello and "session_id" in tree:
        raise r.Bad("session_id", "not sent in worker.hello")
    r.envelope(frame).check(tree, "frame")
    if cls is m.WorkerHello:
        body = r.shape(frame.body).check(tree["body"], "body")
        head = _fields(frame, body, None, _HELLO_FIRST)
        ident = r.string(tree, "id", "frame")
        rest = _fields(frame, body, None, tuple(f.name for f in frame.body.fields if f.name not in _HELLO_FIRST))
        return r.build(cls, _IN_BODY, id=ident, **head, **rest)
    envelope = {"id": r.string(tree, "id", "frame"), "session_id": r.string(tree, "session_id", "frame")}
    body = r.shape(frame.body).check(tree["body"], "body")
    return r.build(cls, _IN_BODY, **envelope, **_fields(frame, body, result))


def _fields(frame: fr.Frame, body: dict[str, Any], result: Any, only: tuple[str, ...] | None = None) -> dict:
    return r.fields(frame.body, body, "body", True, cls=frame.cls, first=_FIRST, given={"result": result},
                    only=only)
