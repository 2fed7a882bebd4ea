"""Worker → server frames to messages (what the server reads).

Closed everywhere: an unknown field, an alias, or a response-only field
(``reply_to``, ``error``, even empty or null) is an invalid frame.
"""

from __future__ import annotations

from typing import Any

from . import messages as m
from . import readers as r
from .limits import MAX_KINDS, MAX_SUBSCRIPTIONS

_HELLO = r.Shape(("protocol_version", "type", "id", "body"))
_REQUEST = r.Shape(("protocol_version", "type", "id", "session_id", "body"))
_HELLO_BODY = r.Shape(("worker_name", "subscriptions"), ("cancellation_notifications", "concurrency_keys", "client"))
_SUBSCRIPTION = r.Shape(("queue",), ("kinds",))
_CLIENT_INFO = r.Shape(("name", "version"))
_CAPACITY_BODY = r.Shape(("sequence", "capacity", "drain"))
_RESUME_BODY = r.Shape(("instance_id", "instance_secret", "task_id", "lease_id", "lease_secret"))
_COMMAND_BODY = r.Shape(("task_id", "lease_id", "lease_secret", "revision"))
_FINISH_BODY = r.Shape(_COMMAND_BODY.required + ("status", "result"), ("error_code", "error_message", "retryable"))
_IN_BODY = r.envelope_or("body")


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
    if cls is m.WorkerHello:
        if "session_id" in tree:
            raise r.Bad("session_id", "not sent in worker.hello")
        return _hello(_HELLO.check(tree, "frame"))
    _REQUEST.check(tree, "frame")
    envelope = {"id": r.string(tree, "id", "frame"), "session_id": r.string(tree, "session_id", "frame")}
    if cls is m.WorkerCapacity:
        body = _CAPACITY_BODY.check(tree["body"], "body")
        return r.build(
            cls, _IN_BODY, **envelope,
            sequence=r.counter(body, "sequence", "body"),
            capacity=r.integer(body, "capacity", "body"),
            drain=r.boolean(body, "drain", "body"),
        )
    if cls is m.WorkerResume:
        body = _RESUME_BODY.check(tree["body"], "body")
        return r.build(cls, _IN_BODY, **envelope, **{k: r.string(body, k, "body") for k in _RESUME_BODY.required})
    body = (_FINISH_BODY if cls is m.TaskFinish else _COMMAND_BODY).check(tree["body"], "body")
    fields = {k: r.string(body, k, "body") for k in ("task_id", "lease_id", "lease_secret")}
    fields["revision"] = r.counter(body, "revision", "body")
    if cls is m.TaskFinish:
        fields.update(
            status=r.string(body, "status", "body"),
            result=result,
            error_code=r.optional(body, "error_code", "body", r.string, ""),
            error_message=r.optional(body, "error_message", "body", r.string, ""),
            retryable=r.optional(body, "retryable", "body", r.boolean, False),
        )
    return r.build(cls, _IN_BODY, **envelope, **fields)


def _hello(tree: dict[str, Any]) -> m.WorkerHello:
    body = _HELLO_BODY.check(tree["body"], "body")
    subscriptions = []
    for i, item in enumerate(r.array(body, "subscriptions", "body", MAX_SUBSCRIPTIONS)):
        path = f"body.subscriptions[{i}]"
        item = _SUBSCRIPTION.check(item, path)
        kinds = None
        if "kinds" in item:
            kinds = r.array(item, "kinds", path, MAX_KINDS)
            for j, kind in enumerate(kinds):
                if type(kind) is not str:
                    raise r.Bad(f"{path}.kinds[{j}]", f"must be a string, got {r.show(kind)}")
        queue = r.string(item, "queue", path)
        subscriptions.append(r.build(m.Subscription, r.under(path), queue=queue, kinds=kinds))
    client = None
    if "client" in body:
        info = _CLIENT_INFO.check(body["client"], "body.client")
        client = r.build(
            m.ClientInfo, r.under("body.client"),
            name=r.string(info, "name", "body.client"), version=r.string(info, "version", "body.client"),
        )
    return r.build(
        m.WorkerHello, _IN_BODY,
        id=r.string(tree, "id", "frame"),
        worker_name=r.string(body, "worker_name", "body"),
        subscriptions=tuple(subscriptions),
        cancellation_notifications=r.optional(body, "cancellation_notifications", "body", r.boolean, False),
        concurrency_keys=r.optional(body, "concurrency_keys", "body", r.boolean, False),
        client=client,
    )
