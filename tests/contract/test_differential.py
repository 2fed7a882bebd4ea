"""Random mutations of valid frames: the schema and the decoder must agree.

Where the hand-written table picks cases, this explores: every mutation of
a valid example (a field set to another value, removed, renamed, added) is
judged by both, and the verdicts must match except for the rules the table
marks runtime-only, which only the decoder can see.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contract_support as s
from pulse_trio.contract.codec import decode_client_frame, decode_server_frame
from pulse_trio.contract.errors import ProtocolError

VALUES: list[Any] = [
    None, True, False, 0, 1, -1, 7, 10, 10000, 10001, 2**31, "", "x", "1", "0", "01", "42", "18446744073709551616",
    s.SECRET_A, s.SECRET_A[:-1] + "B", s.SESSION, s.OTHER_SESSION, s.TASK, s.OTHER_TASK, s.LEASE, s.INSTANCE,
    s.T0, "2026-02-30T00:00:00Z", "2026-12-02T12:00:00+00:00", [], {}, ["x"], ["invoice.send", "invoice.send"],
    [{"queue": "q"}], {"queue": "q"}, "FAILED", "SUCCEEDED", "CANCELLED", "OFFERED", "RUNNING", "task.renew",
    "billing", "mail", "boom", "Boom", "h1", "worker.hello", "ack", {"name": "n", "version": "v"},
]
KEYS = ["Queue", "queueName", "extra", "reply_to", "session_id", "error", "body", "lease_secret", "instance_secret",
        "sequence", "priority", "retryable", "error_code", "kinds", "lease", "cancel_requested_at", "result"]

#: Message fragments of the rules the schema cannot express (see the table).
RUNTIME_ONLY_RULES = ("must not repeat a queue", "must not be the task's own id", "must equal task.task_id")


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


def _agree(frame: dict, direction: str) -> None:
    schema_ok = s.validator(s.direction_def(direction)).is_valid(frame)
    decode = decode_client_frame if direction == "client" else decode_server_frame
    try:
        decode(s.dumps(frame))
    except ProtocolError as exc:
        if schema_ok:
            assert any(rule in exc.message for rule in RUNTIME_ONLY_RULES), (exc.message, frame)
    else:
        assert schema_ok, frame


SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(mutated(s.CLIENT_EXAMPLES))
def test_mutated_client_frames_get_one_verdict(case) -> None:
    _agree(case[1], "client")


@SETTINGS
@given(mutated(s.SERVER_EXAMPLES))
def test_mutated_server_frames_get_one_verdict(case) -> None:
    _agree(case[1], "server")


@SETTINGS
@given(mutated(s.SERVER_EXAMPLES))
def test_server_frames_are_never_client_frames(case) -> None:
    frame = case[1]
    if frame.get("type") in ("worker.hello", "worker.capacity", "worker.resume", "task.start", "task.renew",
                             "task.finish"):
        return  # the mutation itself turned it into a client type
    assert not s.validator("clientFrame").is_valid(frame)
    try:
        decode_client_frame(s.dumps(frame))
    except ProtocolError:
        pass
    else:
        raise AssertionError(frame)
