"""Codec behaviour beyond single verdicts: precedence, headers, ack shapes, encoding."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

import contract_support as s
from pulse_trio.contract import errors as e
from pulse_trio.contract import messages as m
from pulse_trio.contract.codec import (
    decode_client, decode_client_frame, decode_server_frame, encode, scan_frame,
)
from pulse_trio.contract.errors import FrameTooLarge, InvalidMessage, ProtocolError
from pulse_trio.contract.jsontext import JsonText
from pulse_trio.contract.limits import MAX_FRAME_BYTES, check_frame_size


def _code(fn, *args, **kwargs) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        fn(*args, **kwargs)
    return info.value


# -- the size gate ----------------------------------------------------------------------


def test_frame_size_gate_counts_utf8_bytes_before_parsing() -> None:
    check_frame_size("a" * MAX_FRAME_BYTES)
    check_frame_size(b"a" * MAX_FRAME_BYTES)
    check_frame_size("\u00e9" * (MAX_FRAME_BYTES // 2))
    for frame in ("a" * (MAX_FRAME_BYTES + 1), b"a" * (MAX_FRAME_BYTES + 1), "\u00e9" * (MAX_FRAME_BYTES // 2 + 1),
                  "\U0001F600" * (MAX_FRAME_BYTES // 4 + 1)):
        with pytest.raises(FrameTooLarge) as info:
            check_frame_size(frame)
        assert info.value.fatal and info.value.close_code == 1009
    # Not even JSON: the gate runs first.
    assert isinstance(_code(scan_frame, "{" * (MAX_FRAME_BYTES + 1)), FrameTooLarge)


def test_bytes_are_decoded_as_strict_utf8() -> None:
    assert isinstance(decode_client_frame(s.dumps(s.start()).encode()), m.TaskStart)
    err = _code(decode_client_frame, b'{"a":"\xff"}')
    assert err.code == e.INVALID_JSON and err.reply_to is None


# -- precedence (docs/protocol.md §4.8) -------------------------------------------------------


def test_invalid_json_wins_and_has_no_reply_to() -> None:
    text = s.dumps(s.put(s.start(), "protocol_version", "9"))[:-1] + ',"id":"x"}'  # duplicate id + bad version
    err = _code(decode_client_frame, text)
    assert (err.code, err.fatal, err.reply_to, err.close_code) == (e.INVALID_JSON, True, None, 1007)


def test_unsupported_version_beats_invalid_frame_and_echoes_the_id() -> None:
    err = _code(decode_client_frame, s.dumps(s.put(s.put(s.start(), "protocol_version", "2"), "extra", 1)))
    assert (err.code, err.fatal, err.reply_to) == (e.UNSUPPORTED_VERSION, True, "st1")


def test_the_header_gives_the_session_layer_what_it_checks_first() -> None:
    raw = scan_frame(s.dumps(s.put(s.drop(s.start(), "body"), "session_id", s.OTHER_SESSION)))
    assert (raw.header.type, raw.header.id, raw.header.session_id, raw.header.reply_to) == (
        "task.start", "st1", s.OTHER_SESSION, None)
    # ... and only then the frame's own problems:
    err = _code(decode_client, raw)
    assert (err.code, err.reply_to) == (e.INVALID_FRAME, "st1")
    odd = scan_frame('{"protocol_version":"1","type":7,"id":"bad id","session_id":5}').header
    assert (odd.type, odd.id, odd.session_id) == (None, None, None)


def test_an_unreadable_id_is_never_echoed() -> None:
    err = _code(decode_client_frame, s.dumps(s.put(s.start(), "id", "not an id!")))
    assert err.code == e.INVALID_FRAME and err.reply_to is None


def test_result_problems_outrank_other_problems_in_the_listed_order() -> None:
    broken = s.put(s.put(s.finish("NOPE"), "extra", 1), "body.revision", "0")
    assert _code(decode_client_frame, s.dumps(s.put(broken, "body.result", None))).code == e.INVALID_RESULT
    huge_and_bad_number = s.dumps(s.put(broken, "body.result", ["r" * 262144, 1.5]))
    huge_and_bad_number = huge_and_bad_number.replace("1.5", "1e999")
    assert _code(decode_client_frame, huge_and_bad_number).code == e.RESULT_TOO_LARGE
    bad_number = s.dumps(s.put(broken, "body.result", [1.5])).replace("1.5", "1e999")
    err = _code(decode_client_frame, bad_number)
    assert (err.code, err.fatal, err.reply_to) == (e.INVALID_RESULT, False, "f1")


def test_error_messages_name_the_field() -> None:
    cases = {
        s.dumps(s.rename(s.hello(), "body.subscriptions[0].queue", "Queue")): "body.subscriptions[0]: unknown field 'Queue'",
        s.dumps(s.drop(s.capacity(), "body.drain")): "body: missing required field 'drain'",
        s.dumps(s.put(s.capacity(), "body.sequence", "01")): "body.sequence: must be a canonical decimal string",
        s.dumps(s.put(s.capacity(), "body.capacity", 10001)): "body.capacity: must be an int in 0..10000",
        s.dumps(s.finish("FAILED", retryable="yes")): "body.retryable: must be true or false",
        s.dumps(s.put(s.hello(), "body.subscriptions[1].kinds", ["x", 3])): "body.subscriptions[1].kinds[1]",
    }
    for text, expected in cases.items():
        assert _code(decode_client_frame, text).message.startswith(expected)
    server = s.dumps(s.put(s.assign(), "body.task.priority", 0))
    assert _code(decode_server_frame, server).message.startswith("body.task.priority: must be 1..9")


def test_secrets_are_never_echoed_in_error_messages() -> None:
    wrong = s.SECRET_B[:-1] + "B"
    err = _code(decode_client_frame, s.dumps(s.put(s.start(), "body.lease_secret", wrong)))
    assert wrong not in err.message and "lease_secret" in err.message


# -- ack bodies ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name, request_type, body_type", [
    ("ack_capacity", "worker.capacity", m.Welcome),
    ("ack_resume", "worker.resume", m.Lease),
    ("ack_renew", "task.renew", m.CommandResult),
    ("ack_finish", "task.finish", m.CommandResult),
])
def test_ack_bodies_decode_by_shape_and_by_pending_request(name: str, request_type: str, body_type: type) -> None:
    text = s.dumps(s.SERVER_EXAMPLES[name]())
    assert type(decode_server_frame(text).body) is body_type
    assert type(decode_server_frame(text, ack_for=request_type).body) is body_type
    for other, other_type in m.ACK_BODY_FOR.items():
        if other_type is not body_type:
            err = _code(decode_server_frame, text, ack_for=other)
            assert err.code == e.INVALID_FRAME and f"the ack to {other}" in err.message


def test_ack_for_is_checked_and_ignored_for_frames_that_are_not_acks() -> None:
    with pytest.raises(ValueError):
        decode_server_frame(s.dumps(s.ack_renew()), ack_for="worker.hello")
    assert isinstance(decode_server_frame(s.dumps(s.error()), ack_for="task.renew"), m.Error)


def test_a_finish_receipt_without_lease_never_grants_execution() -> None:
    ack = decode_server_frame(s.dumps(s.ack_finish()), ack_for="task.finish")
    assert ack.body.lease is None and ack.body.receipt.duplicate is True


# -- forward compatibility in the SDK ---------------------------------------------------------------


def test_non_strict_server_decoding_ignores_unknown_fields_only() -> None:
    newer = s.put(s.put(s.put(s.assign(), "trace", "x"), "body.task.region", "eu"), "body.lease.hint", 1)
    with pytest.raises(ProtocolError):
        decode_server_frame(s.dumps(newer))
    assert decode_server_frame(s.dumps(newer), strict=False) == decode_server_frame(s.dumps(s.assign()))
    with pytest.raises(ProtocolError):
        decode_server_frame(s.dumps(s.drop(newer, "body.lease.epoch")), strict=False)
    ack = s.put(s.ack_capacity(), "body.instance_secret", s.SECRET_C)
    assert decode_server_frame(s.dumps(ack), strict=False).body.instance_secret is None


# -- values ------------------------------------------------------------------------------------------


def test_decoded_values_are_python_native() -> None:
    finish = decode_client_frame(s.dumps(s.finish("FAILED", retryable=True)))
    assert finish.revision == 3 and finish.retryable is True and finish.result == '{"sent":true,"amount":12.5}'
    assign = decode_server_frame(s.dumps(s.assign()))
    assert assign.task.concurrency_token == 1093 and assign.task.priority == 7
    assert assign.task.created_at == datetime(2026, 12, 2, 12, tzinfo=timezone.utc)
    assert assign.task.payload == '{"invoice":991,"total":1.1}'
    assert decode_server_frame(s.dumps(s.assign_minimal())).task.priority == 0


@pytest.mark.parametrize("name", sorted({**s.CLIENT_EXAMPLES, **s.SERVER_EXAMPLES}))
def test_encoding_a_decoded_example_gives_back_its_canonical_text(name: str) -> None:
    build = {**s.CLIENT_EXAMPLES, **s.SERVER_EXAMPLES}[name]
    text = s.dumps(build())
    decode = decode_client_frame if name in s.CLIENT_EXAMPLES else decode_server_frame
    assert encode(decode(text)) == text


def test_encoding_omits_defaults_and_writes_required_zeroes() -> None:
    capacity = m.WorkerCapacity(id="c1", session_id=s.SESSION, sequence=1, capacity=0, drain=False)
    assert encode(capacity) == ('{"protocol_version":"1","type":"worker.capacity","id":"c1",'
                                f'"session_id":"{s.SESSION}","body":{{"sequence":"1","capacity":0,"drain":false}}}}')
    hello = m.WorkerHello(id="h1", worker_name="w", subscriptions=[m.Subscription("q")])
    assert encode(hello) == ('{"protocol_version":"1","type":"worker.hello","id":"h1",'
                             '"body":{"worker_name":"w","subscriptions":[{"queue":"q"}]}}')
    error = m.Error(id="s-1", code="hello_required", message="", fatal=True)
    assert encode(error) == ('{"protocol_version":"1","type":"error","id":"s-1",'
                             '"error":{"code":"hello_required","message":"","fatal":true}}')


def test_results_are_carried_as_exact_text() -> None:
    finish = m.TaskFinish(id="f", session_id=s.SESSION, task_id=s.TASK, lease_id=s.LEASE, lease_secret=s.SECRET_B,
                          revision=1, status="SUCCEEDED", result=' {"price": 1.10, "big": 1e300} ')
    assert finish.result == '{"price":1.10,"big":1e300}' and type(finish.result) is JsonText
    assert decode_client_frame(encode(finish)) == finish


# -- constructors refuse what the contract forbids ------------------------------------------------


def _finish(**changes):
    fields = dict(id="f", session_id=s.SESSION, task_id=s.TASK, lease_id=s.LEASE, lease_secret=s.SECRET_B,
                  revision=1, status="SUCCEEDED", result="{}")
    fields.update(changes)
    return m.TaskFinish(**fields)


@pytest.mark.parametrize("changes, field", [
    ({"result": "null"}, "result"),
    ({"result": "{"}, "result"),
    ({"result": '{"a":1,"a":2}'}, "result"),
    ({"result": '"' + "x" * 262143 + '"'}, "result"),
    ({"result": {"a": 1}}, "result"),
    ({"error_code": "x"}, "error_code"),
    ({"status": "FAILED"}, "error_code"),
    ({"status": "UNKNOWN", "error_code": "x", "retryable": True}, "retryable"),
    ({"status": "DONE"}, "status"),
    ({"revision": 0}, "revision"),
    ({"revision": 2**64}, "revision"),
    ({"lease_secret": "short"}, "lease_secret"),
    ({"session_id": "ses_x"}, "session_id"),
    ({"id": ""}, "id"),
    ({"error_message": "\ud800"}, "error_message"),
])
def test_finish_constructor_refusals(changes: dict, field: str) -> None:
    with pytest.raises(InvalidMessage) as info:
        _finish(**changes)
    assert info.value.field == field


def test_body_constructor_refusals() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    task = dict(task_id=s.TASK, queue="q", kind="k", payload="{}", attempt=1, max_attempts=1, idempotency_key="i",
                created_at=t0, due_at=t0)
    with pytest.raises(InvalidMessage, match="retry_of"):
        m.AssignedTask(**task, retry_of=s.TASK)
    with pytest.raises(InvalidMessage, match="concurrency"):
        m.AssignedTask(**task, concurrency_key="k")
    with pytest.raises(InvalidMessage, match="priority"):
        m.AssignedTask(**task, priority=10)
    with pytest.raises(InvalidMessage, match="created_at"):
        m.AssignedTask(**dict(task, created_at=datetime(2026, 1, 1)))
    lease = m.Lease(lease_id=s.LEASE, task_id=s.TASK, revision=1, epoch=1, state="OFFERED", expires_at=t0)
    with pytest.raises(InvalidMessage, match="lease_secret"):
        m.TaskAssign(id="a", session_id=s.SESSION, task=m.AssignedTask(**task), lease=lease)
    with pytest.raises(InvalidMessage, match="lease_secret"):
        m.CommandResult(receipt=m.Receipt("task.start", s.TASK, s.LEASE, 1, t0, False),
                        lease=m.Lease(s.LEASE, s.TASK, 2, 1, "RUNNING", t0, lease_secret=s.SECRET_B))
    with pytest.raises(InvalidMessage, match="repeat a queue"):
        m.WorkerHello(id="h", worker_name="w", subscriptions=[m.Subscription("q"), m.Subscription("q", ["k"])])
    with pytest.raises(InvalidMessage, match="worker_name"):
        m.WorkerHello(id="h", worker_name="tab\there", subscriptions=[m.Subscription("q")])
    with pytest.raises(InvalidMessage, match="session_id"):
        m.Ack(id="a", session_id=None, reply_to="r", body=lease)  # type: ignore[arg-type]


def test_messages_are_frozen_slotted_values() -> None:
    msg = m.WorkerHello(id="h1", worker_name="w", subscriptions=[m.Subscription("q", ["a", "b"])])
    assert msg.subscriptions == (m.Subscription("q", ("a", "b")),)
    assert hash(msg) == hash(m.WorkerHello(id="h1", worker_name="w", subscriptions=(m.Subscription("q", ("a", "b")),)))
    with pytest.raises(AttributeError):
        msg.id = "h2"  # type: ignore[misc]
    assert not hasattr(msg, "__dict__")


def test_protocol_error_codes_and_fatality() -> None:
    assert e.FATAL[e.INVALID_FRAME] is False and e.FATAL[e.SESSION_MISMATCH] is True
    assert ProtocolError(e.PERMISSION_DENIED, "queue x", fatal=False).fatal is False
    assert ProtocolError(e.SERVER_SHUTTING_DOWN, "bye").close_code == 1001
    assert ProtocolError(e.LEASE_EXPIRED, "late").close_code is None
    with pytest.raises(ValueError):
        ProtocolError("nope", "unknown code")
    assert len(e.ERROR_CODES) == 19
