"""Random mutations of valid frames: the schema and the decoder must agree.

Where the hand-written table picks cases, this explores: every mutation of
a valid example (a field set to another value, removed, renamed, added) is
judged by both, and the verdicts must match except for the rules the table
marks runtime-only, which only the decoder can see.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

import contract_support as s
from pulse_trio.contract.codec import decode_client_frame, decode_server_frame
from pulse_trio.contract.errors import ProtocolError

#: Message fragments of the rules the schema cannot express (see the table).
RUNTIME_ONLY_RULES = ("must not repeat a queue", "must not be the task's own id", "must equal task.task_id")


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
@given(s.mutated(s.CLIENT_EXAMPLES))
def test_mutated_client_frames_get_one_verdict(case) -> None:
    _agree(case[1], "client")


@SETTINGS
@given(s.mutated(s.SERVER_EXAMPLES))
def test_mutated_server_frames_get_one_verdict(case) -> None:
    _agree(case[1], "server")


@SETTINGS
@given(s.mutated(s.SERVER_EXAMPLES))
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
