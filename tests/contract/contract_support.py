"""Shared material for the contract tests: the schema, validators, examples.

The schema is loaded the way an installed package would load it (package
data through importlib.resources), never from a URL. Examples are plain
dicts in wire form, one canonical valid frame per message type; tests
mutate deep copies with ``put`` / ``drop`` / ``rename``.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import json
import re
from typing import Any

from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SCHEMA_ID = "https://pulse-trio.dev/schemas/worker/v1/worker.schema.json"


@functools.cache
def schema() -> dict[str, Any]:
    text = importlib.resources.files("pulse_trio.contract").joinpath("worker.schema.json").read_text("utf-8")
    return json.loads(text)


@functools.cache
def validator(definition: str | None = None) -> Draft202012Validator:
    """A format-asserting validator for the root or one ``$defs`` entry."""
    registry = Registry().with_resource(SCHEMA_ID, Resource.from_contents(schema()))
    target = schema() if definition is None else {"$ref": f"{SCHEMA_ID}#/$defs/{definition}"}
    return Draft202012Validator(target, registry=registry, format_checker=Draft202012Validator.FORMAT_CHECKER)


def direction_def(direction: str) -> str:
    return {"client": "clientFrame", "server": "serverFrame"}[direction]


def schema_verdict(text: str, definition: str) -> str:
    """'valid', 'invalid', or 'unparsed' when a lenient json.loads refuses the text."""
    try:
        instance = json.loads(text)
    except (ValueError, RecursionError):
        return "unparsed"
    return "valid" if validator(definition).is_valid(instance) else "invalid"


# -- fixed identities ---------------------------------------------------------

SESSION = "ses_01KBFEY3G0B1BKY7SP31HF1KWA"
OTHER_SESSION = "ses_01KBFEY3G0B1BKY7SP31HF1KWB"
INSTANCE = "ins_01KBFEY3G08GKV6GQS8WWD954X"
OLD_INSTANCE = "ins_01KBFEY3G08GKV6GQS8WWD9000"
TASK = "tsk_01KBFEY3G0XBZ69EGN1CRY6PPB"
OTHER_TASK = "tsk_01KBFEY3G0XBZ69EGN1CRY6PPC"
LEASE = "lse_01KBFEY3G05SYNQT44FQ3AKSZY"
SECRET_A = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE"
SECRET_B = "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI"
SECRET_C = "AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM"
T0 = "2026-12-02T12:00:00.000000Z"
T1 = "2026-12-02T12:00:30.000000Z"
T2 = "2026-12-02T12:01:00.000000Z"


def _frame(type_: str, id_: str, body: dict, *, session: bool = True, reply_to: str | None = None) -> dict:
    frame: dict[str, Any] = {"protocol_version": "1", "type": type_, "id": id_}
    if session:
        frame["session_id"] = SESSION
    if reply_to is not None:
        frame["reply_to"] = reply_to
    frame["body"] = body
    return frame


def hello() -> dict:
    return _frame("worker.hello", "h1", {
        "worker_name": "billing-7",
        "subscriptions": [{"queue": "billing", "kinds": ["invoice.send"]}, {"queue": "mail"}],
        "cancellation_notifications": True,
        "concurrency_keys": True,
        "client": {"name": "pulse-trio-sdk", "version": "0.1.0"},
    }, session=False)


def capacity() -> dict:
    return _frame("worker.capacity", "c1", {"sequence": "1", "capacity": 8, "drain": False})


def resume() -> dict:
    return _frame("worker.resume", "r1", {
        "instance_id": OLD_INSTANCE, "instance_secret": SECRET_A,
        "task_id": TASK, "lease_id": LEASE, "lease_secret": SECRET_B,
    })


def start() -> dict:
    return _frame("task.start", "st1", {"task_id": TASK, "lease_id": LEASE, "lease_secret": SECRET_B, "revision": "1"})


def renew() -> dict:
    return _frame("task.renew", "rn1", {"task_id": TASK, "lease_id": LEASE, "lease_secret": SECRET_B, "revision": "2"})


def finish(status: str = "SUCCEEDED", **extra: Any) -> dict:
    body = {"task_id": TASK, "lease_id": LEASE, "lease_secret": SECRET_B, "revision": "3",
            "status": status, "result": {"sent": True, "amount": 12.50}}
    if status != "SUCCEEDED":
        body["error_code"] = "smtp.refused"
    body.update(extra)
    return _frame("task.finish", "f1", body)


def welcome_body(secret: bool = True, sequence: str | None = None, capacity: int = 0) -> dict:
    body: dict[str, Any] = {"instance_id": INSTANCE}
    if secret:
        body["instance_secret"] = SECRET_C
    body["epoch"] = "42"
    if sequence is not None:
        body["sequence"] = sequence
    body.update({
        "capacity": capacity, "drain": False, "active_leases": 0,
        "lease_ttl_ms": 30000, "start_timeout_ms": 30000,
        "limits": {"max_frame_bytes": 524288, "max_result_bytes": 262144},
        "server_time": T0,
    })
    return body


def welcome() -> dict:
    return _frame("worker.welcome", "s-1", welcome_body(), reply_to="h1")


def lease_body(secret: bool = False, state: str = "RUNNING", revision: str = "4") -> dict:
    body: dict[str, Any] = {"lease_id": LEASE, "task_id": TASK}
    if secret:
        body["lease_secret"] = SECRET_B
    body.update({"revision": revision, "epoch": "42", "state": state, "expires_at": T1})
    return body


def receipt(command: str = "task.renew") -> dict:
    return {"command": command, "task_id": TASK, "lease_id": LEASE, "revision": "3",
            "committed_at": T0, "duplicate": False}


def ack_capacity() -> dict:
    return _frame("ack", "s-2", welcome_body(secret=False, sequence="1", capacity=8), reply_to="c1")


def ack_resume() -> dict:
    return _frame("ack", "s-3", dict(lease_body(), cancel_requested_at=T0), reply_to="r1")


def ack_renew() -> dict:
    return _frame("ack", "s-4", {"receipt": receipt(), "lease": lease_body()}, reply_to="rn1")


def ack_finish() -> dict:
    return _frame("ack", "s-5", {"receipt": dict(receipt("task.finish"), duplicate=True)}, reply_to="f1")


def assign() -> dict:
    return _frame("task.assign", "s-17", {
        "task": {
            "task_id": TASK, "queue": "billing", "kind": "invoice.send",
            "payload": {"invoice": 991, "total": 1.10}, "attempt": 2, "max_attempts": 5,
            "idempotency_key": "invoice-991", "created_at": T0, "due_at": T0, "priority": 7,
            "concurrency_key": "customer:42", "concurrency_token": "1093",
            "effect_uncertain": True, "retry_of": OTHER_TASK,
        },
        "lease": lease_body(secret=True, state="OFFERED", revision="1"),
    })


def assign_minimal() -> dict:
    frame = assign()
    for key in ("priority", "concurrency_key", "concurrency_token", "effect_uncertain", "retry_of"):
        del frame["body"]["task"][key]
    return frame


def cancel() -> dict:
    return _frame("task.cancel", "s-31", {"task_id": TASK, "lease_id": LEASE, "cancel_requested_at": T0,
                                          "grace_expires_at": T1, "reason": "operator"})


def error(**envelope: Any) -> dict:
    frame: dict[str, Any] = {"protocol_version": "1", "type": "error", "id": "s-9",
                             "session_id": SESSION, "reply_to": "rn1",
                             "error": {"code": "lease_expired", "message": "the lease lapsed", "fatal": False}}
    frame.update(envelope)
    return {k: v for k, v in frame.items() if v is not None}


CLIENT_EXAMPLES = {
    "hello": hello, "capacity": capacity, "resume": resume, "start": start, "renew": renew, "finish": finish,
}
SERVER_EXAMPLES = {
    "welcome": welcome, "ack_capacity": ack_capacity, "ack_resume": ack_resume, "ack_renew": ack_renew,
    "ack_finish": ack_finish, "assign": assign, "assign_minimal": assign_minimal, "cancel": cancel, "error": error,
}
#: The specific ``$defs`` entry each example must satisfy.
EXAMPLE_DEFS = {
    "hello": "helloFrame", "capacity": "capacityFrame", "resume": "resumeFrame", "start": "startFrame",
    "renew": "renewFrame", "finish": "finishFrame", "welcome": "welcomeFrame", "ack_capacity": "ackFrame",
    "ack_resume": "ackFrame", "ack_renew": "ackFrame", "ack_finish": "ackFrame", "assign": "assignmentFrame",
    "assign_minimal": "assignmentFrame", "cancel": "cancellationFrame", "error": "errorFrame",
}


# -- mutation helpers -----------------------------------------------------------

_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _steps(path: str) -> list[str | int]:
    return [int(i) if i else key for key, i in _STEP.findall(path)]


def _parent(frame: dict, path: str) -> tuple[Any, str | int]:
    *head, last = _steps(path)
    node: Any = frame
    for step in head:
        node = node[step]
    return node, last


def put(frame: dict, path: str, value: Any) -> dict:
    """A copy of ``frame`` with ``path`` (``body.subscriptions[0].queue``) set."""
    frame = copy.deepcopy(frame)
    node, last = _parent(frame, path)
    node[last] = value
    return frame


def drop(frame: dict, path: str) -> dict:
    frame = copy.deepcopy(frame)
    node, last = _parent(frame, path)
    del node[last]
    return frame


def rename(frame: dict, path: str, new_key: str) -> dict:
    """Rename a key in place, keeping its position (an alias, as old builds sent)."""
    frame = copy.deepcopy(frame)
    node, last = _parent(frame, path)
    items = [(new_key if k == last else k, v) for k, v in node.items()]
    node.clear()
    node.update(items)
    return frame


def dumps(frame: Any) -> str:
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":"))


# -- random structural mutations of the examples (hypothesis) ---------------------

VALUES: list[Any] = [
    None, True, False, 0, 1, -1, 7, 10, 10000, 10001, 2**31, "", "x", "1", "0", "01", "42", "18446744073709551616",
    SECRET_A, SECRET_A[:-1] + "B", SESSION, OTHER_SESSION, TASK, OTHER_TASK, LEASE, INSTANCE,
    T0, "2026-02-30T00:00:00Z", "2026-12-02T12:00:00+00:00", [], {}, ["x"], ["invoice.send", "invoice.send"],
    [{"queue": "q"}], {"queue": "q"}, "FAILED", "SUCCEEDED", "CANCELLED", "OFFERED", "RUNNING", "task.renew",
    "billing", "mail", "boom", "Boom", "h1", "worker.hello", "ack", {"name": "n", "version": "v"},
]
KEYS = ["Queue", "queueName", "extra", "reply_to", "session_id", "error", "body", "lease_secret", "instance_secret",
        "sequence", "priority", "retryable", "error_code", "kinds", "lease", "cancel_requested_at", "result"]

def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, prefix + (i,))
    return found


def _containers(node: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix] if isinstance(node, dict) else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _containers(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _containers(value, prefix + (i,))
    return found


def _at(frame: Any, path: tuple) -> Any:
    for step in path:
        frame = frame[step]
    return frame


@st.composite
def mutated(draw, examples: dict) -> tuple[str, dict]:
    name = draw(st.sampled_from(sorted(examples)))
    frame = copy.deepcopy(examples[name]())
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["set", "drop", "rename", "add"]))
        paths = _paths(frame)
        if op in ("set", "drop", "rename") and paths:
            path = draw(st.sampled_from(paths))
            parent = _at(frame, path[:-1])
            if op == "set":
                parent[path[-1]] = copy.deepcopy(draw(st.sampled_from(VALUES)))
            elif op == "drop":
                del parent[path[-1]]
            elif isinstance(parent, dict):
                new = draw(st.sampled_from(KEYS))
                items = [(new if k == path[-1] else k, v) for k, v in parent.items()]
                parent.clear()
                parent.update(items)
        else:
            target = _at(frame, draw(st.sampled_from(_containers(frame))))
            target[draw(st.sampled_from(KEYS))] = copy.deepcopy(draw(st.sampled_from(VALUES)))
    return name, frame


# -- textual mutations (raw text only: what a parsed frame cannot show) ------------------

#: What a textual mutation inserts: whitespace, JSON punctuation, escapes, members, a BOM, a lone surrogate.
INSERTIONS = [" ", "\n", "\t", '"', "\\", ":", ",", "{", "}", "[", "]", "\\u0041", "\\\"", "\ufeff", "x", "0",
              '"id":"z",', '"id":"z:z",', ',"id":"z"', '"revision":"1",', '"result":1,', "null", "\ud800"]
#: A member whose value is a plain string, number or boolean: one a mutation may repeat.
MEMBER = re.compile(r'"[a-z_]+":("[^"\\]*"|-?\d+|true|false)')


def mutate_text(text: str, draw) -> str:
    """``text`` with 1..3 textual changes: a member repeated right after itself, or an insertion anywhere."""
    for _ in range(draw(st.integers(1, 3))):
        members = list(MEMBER.finditer(text))
        if members and draw(st.booleans()):
            member = draw(st.sampled_from(members))
            text = text[:member.end()] + "," + member.group(0) + text[member.end():]
        else:
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(st.sampled_from(INSERTIONS)) + text[at:]
    return text
