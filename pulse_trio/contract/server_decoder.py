"""Server → worker frames to messages (what the SDK reads).

``strict`` (the default) is closed like the schema; ``strict=False`` ignores
unknown fields so an older SDK keeps working against a newer server
(docs/protocol.md §6). Required fields and value rules hold either way.
The shapes and fields come from the frames' declarations (``frames``); what
is written here is the order of the checks, which decides the error a frame
with several faults gets (docs/protocol.md §4.8).
"""

from __future__ import annotations

from typing import Any

from . import frames as fr
from . import messages as m
from . import readers as r

_IN_BODY = r.envelope_or("body")
_IN_ERROR = r.envelope_or("error")


def decode_tree(tree: dict[str, Any], ack_for: str | None, strict: bool) -> m.ServerMessage:
    """Raises ``readers.Bad``; payload number problems first, as docs/protocol.md §4.8 orders them."""
    payload = None
    body = tree.get("body")
    if tree.get("type") == "task.assign" and type(body) is dict:
        task = body.get("task")
        if type(task) is dict and "payload" in task:
            payload = r.json_value(task["payload"], "body.task.payload", nullable=True)
    cls = r.message_type(tree, m.SERVER_TYPES, m.CLIENT_TYPES, "by the server")
    frame = fr.FRAMES[cls]
    r.envelope(frame).check(tree, "frame", strict)
    if cls is m.Error:
        return _error(tree, strict)
    envelope = {key: r.string(tree, key, "frame") for key in r.envelope(frame).required
                if key in ("id", "session_id", "reply_to")}
    body = tree["body"]
    if cls is m.WorkerWelcome:
        return r.build(cls, _IN_BODY, **envelope, body=_welcome(body, "body", strict, secret=True))
    if cls is m.Ack:
        return r.build(cls, _IN_BODY, **envelope, body=_ack_body(body, ack_for, strict))
    body = r.shape(frame.body).check(body, "body", strict)
    fields = r.fields(frame.body, body, "body", strict, cls=cls, given={"payload": payload})
    return r.build(cls, _IN_BODY, **envelope, **fields)


def _error(tree: dict[str, Any], strict: bool) -> m.Error:
    err = r.shape(fr.ERROR_BODY).check(tree["error"], "error", strict)
    ident = r.string(tree, "id", "frame")
    fields = r.fields(fr.ERROR_BODY, err, "error", strict, cls=m.Error)
    envelope = {key: r.string(tree, key, "frame") for key in r.envelope(fr.FRAMES[m.Error]).optional if key in tree}
    return r.build(m.Error, _IN_ERROR, id=ident, **fields, **envelope)


def _ack_body(body: Any, ack_for: str | None, strict: bool) -> m.AckBody:
    """The expected shape when the pending request is known, else by its fields."""
    if ack_for is not None:
        shape = m.ACK_BODY_FOR[ack_for]
    elif type(body) is dict and "receipt" in body:
        shape = m.CommandResult
    elif type(body) is dict and "instance_id" in body:
        shape = m.Welcome
    elif type(body) is dict and "lease_id" in body:
        shape = m.Lease
    else:
        raise r.Bad("body", "must be a welcome, lease or commandResult shape")
    try:
        if shape is m.Welcome:
            return _welcome(body, "body", strict, secret=False)
        obj = fr.ACK_BODIES[shape]
        body = r.shape(obj).check(body, "body", strict)
        return r.build(obj.cls, r.under("body"), **r.fields(obj, body, "body", strict))
    except r.Bad as bad:
        if ack_for is not None:
            bad.text += f" (the ack to {ack_for} carries a {shape.__name__})"
        raise


def _welcome(body: Any, path: str, strict: bool, *, secret: bool) -> m.Welcome:
    """A welcome: its limits' shape is checked before its fields are read."""
    body = r.shape(fr.WELCOME, secret).check(body, path, strict)
    r.shape(fr.LIMITS).check(body["limits"], f"{path}.limits", strict)
    return r.build(m.Welcome, r.under(path), **r.fields(fr.WELCOME, body, path, strict, variant=secret))
