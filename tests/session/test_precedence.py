"""How the session judges a frame: the error precedence of docs/protocol.md §4.8.

A well-formed frame takes the compiled fast path, any other the reference
decoder; the session must answer both alike, so each verdict on a
well-formed frame is checked on both spellings of it. Malformed frames
only ever take the reference path, and there the first rule of the
precedence list that applies must answer.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import contract_support as cs
import session_support as ss
from pulse_trio.contract import errors as e
from pulse_trio.contract.limits import MAX_INVALID_FRAMES
from pulse_trio.session import Reject, Request, ServerSession


def _judge(setup: Callable[[], ServerSession], frame: dict) -> tuple[object, object]:
    """The events two equal sessions give for the compact and the escaped spelling of one frame."""
    fast, reference = setup(), setup()
    return fast.receive(ss.compact(frame)), reference.receive(ss.escaped(frame))


def _hello_pending() -> ServerSession:
    session = ss.fresh()
    ss.request(session, ss.compact(cs.hello()))
    return session


def _start_pending() -> ServerSession:
    session = ss.registered()
    ss.pend(session, "task.start")
    return session


SAME_VERDICT = {
    # name: (session before the frame, the frame, the code it gets or None for a Request)
    "hello first": (ss.fresh, cs.hello, None),
    "start before hello": (ss.fresh, cs.start, e.HELLO_REQUIRED),
    "capacity before hello": (ss.fresh, cs.capacity, e.HELLO_REQUIRED),
    "second hello": (ss.registered, lambda: ss.with_id(cs.hello(), "h2"), e.INVALID_TRANSITION),
    "second hello reusing the id": (ss.registered, cs.hello, e.INVALID_TRANSITION),
    "hello while one is pending": (_hello_pending, lambda: ss.with_id(cs.hello(), "h2"), e.INVALID_TRANSITION),
    "foreign session": (ss.registered, lambda: cs.put(cs.start(), "session_id", cs.OTHER_SESSION),
                        e.SESSION_MISMATCH),
    "duplicate pending id": (_start_pending, cs.start, e.DUPLICATE_MESSAGE_ID),
    "pending id on another type": (_start_pending, lambda: ss.with_id(cs.renew(), "st1"), e.DUPLICATE_MESSAGE_ID),
    **{f"{name} request": (ss.registered, build, None) for name, build in ss.REQUESTS.items()},
    "failed finish": (ss.registered, lambda: cs.finish("FAILED", error_message="it: broke", retryable=True), None),
}


@pytest.mark.parametrize("name", sorted(SAME_VERDICT))
def test_fast_and_reference_paths_give_identical_events(name: str) -> None:
    setup, build, code = SAME_VERDICT[name]
    fast, reference = _judge(setup, build())
    assert fast == reference
    if code is None:
        assert type(fast) is Request and fast.message.id == build()["id"]
    else:
        error = ss.error_of(fast)
        assert error.code == code and error.fatal == e.FATAL[code]
        assert error.reply_to == build()["id"]


def test_both_paths_leave_equal_sessions_after_a_history() -> None:
    frames = [cs.hello(), ss.with_id(cs.hello(), "h2"), cs.start(), cs.capacity(), cs.start(),
              cs.put(cs.renew(), "session_id", cs.OTHER_SESSION)]
    fast, reference = ss.fresh(), ss.fresh()
    for i, frame in enumerate(frames):
        assert fast.receive(ss.compact(frame)) == reference.receive(ss.escaped(frame)), frame
        assert fast.pending() == reference.pending() and fast.state == reference.state
        if i == 1:
            assert fast.welcome("h1", ss.welcome_body()) == reference.welcome("h1", ss.welcome_body())
    assert fast.pending() == {"st1": "task.start", "c1": "worker.capacity"}
    assert fast.state == "closing"


# -- the precedence list, rule by rule ---------------------------------------------------

def _reject(session: ServerSession, text: str) -> tuple[str, bool, str | None, int | None]:
    reject = session.receive(text)
    error = ss.error_of(reject)
    return error.code, error.fatal, error.reply_to, reject.close_code


def test_invalid_json_wins_over_everything() -> None:
    # A repeated key, in a frame that also is no hello and has no session_id.
    text = '{"protocol_version":"1","type":"task.start","type":"task.start","id":"st1","body":{}}'
    assert _reject(ss.fresh(), text) == (e.INVALID_JSON, True, None, e.CLOSE_INVALID_PAYLOAD)
    assert _reject(ss.registered(), text) == (e.INVALID_JSON, True, None, e.CLOSE_INVALID_PAYLOAD)


def test_unsupported_version_comes_next_and_echoes_the_id() -> None:
    frame = cs.put(cs.drop(cs.start(), "session_id"), "protocol_version", "2")
    assert _reject(ss.fresh(), cs.dumps(frame)) == (e.UNSUPPORTED_VERSION, True, "st1", e.CLOSE_POLICY_VIOLATION)
    assert _reject(ss.registered(), cs.dumps(cs.drop(cs.start(), "protocol_version"))) == (
        e.UNSUPPORTED_VERSION, True, "st1", e.CLOSE_POLICY_VIOLATION)
    assert _reject(ss.registered(), "[]") == (e.UNSUPPORTED_VERSION, True, None, e.CLOSE_POLICY_VIOLATION)


def test_hello_required_wins_over_the_session_id_and_the_schema() -> None:
    frame = cs.put(cs.drop(cs.start(), "session_id"), "body.extra", 1)
    assert _reject(ss.fresh(), cs.dumps(frame)) == (e.HELLO_REQUIRED, True, "st1", e.CLOSE_POLICY_VIOLATION)


def test_a_second_hello_wins_over_the_schema() -> None:
    frame = cs.rename(ss.with_id(cs.hello(), "h2"), "body.subscriptions[0].queue", "Queue")
    session = ss.registered()
    assert _reject(session, cs.dumps(frame)) == (e.INVALID_TRANSITION, False, "h2", None)
    assert session.state == "active"


@pytest.mark.parametrize("session_id", [None, cs.OTHER_SESSION, 7, ""])
def test_session_mismatch_wins_over_the_schema(session_id: object) -> None:
    frame = cs.put(cs.put(cs.start(), "body.lease_secret", "not a secret"), "body.extra", 1)
    frame = cs.drop(frame, "session_id") if session_id is None else cs.put(frame, "session_id", session_id)
    session = ss.registered()
    assert _reject(session, cs.dumps(frame)) == (e.SESSION_MISMATCH, True, "st1", e.CLOSE_POLICY_VIOLATION)
    assert session.state == "closing"


def test_result_problems_win_over_the_schema_in_their_own_order() -> None:
    session = ss.registered()
    bogus = cs.put(cs.finish(), "body.status", "BOGUS")
    assert _reject(session, cs.dumps(cs.put(bogus, "body.result", None)))[:2] == (e.INVALID_RESULT, False)
    big = cs.put(bogus, "body.result", "x" * 300_000)
    assert _reject(session, cs.dumps(big))[:2] == (e.RESULT_TOO_LARGE, False)
    huge_number = cs.dumps(cs.put(bogus, "body.result", 0)).replace('"result":0', '"result":1e400')
    assert _reject(session, huge_number)[:2] == (e.INVALID_RESULT, False)
    assert _reject(session, cs.dumps(bogus))[:2] == (e.INVALID_FRAME, False)
    assert session.state == "active"


def test_invalid_frame_names_the_field() -> None:
    session = ss.fresh()
    reject = session.receive(cs.dumps(cs.rename(cs.hello(), "body.subscriptions[0].queue", "Queue")))
    error = ss.error_of(reject)
    assert (error.code, error.fatal, error.reply_to) == (e.INVALID_FRAME, False, "h1")
    assert "body.subscriptions[0]" in error.message and "'Queue'" in error.message
    assert session.state == "awaiting_hello"
    ss.request(session, ss.compact(cs.hello()))  # a corrected hello may follow on the same connection


def test_duplicate_ids_come_after_the_schema() -> None:
    session = _start_pending()
    broken = cs.put(cs.start(), "body.revision", "0")
    assert _reject(session, cs.dumps(broken)) == (e.INVALID_FRAME, False, "st1", None)
    assert _reject(session, ss.compact(cs.start())) == (e.DUPLICATE_MESSAGE_ID, False, "st1", None)
    assert session.pending() == {"st1": "task.start"}


# -- duplicate ids ---------------------------------------------------------------------------

def test_an_id_may_be_reused_once_its_request_is_answered() -> None:
    session = ss.registered()
    ss.pend(session, "task.start", "x1")
    assert _reject(session, ss.compact(ss.with_id(cs.renew(), "x1")))[:2] == (e.DUPLICATE_MESSAGE_ID, False)
    ss.sent(session.ack("x1", ss.ack_body("task.start")), ack_for="task.start")
    assert ss.pend(session, "task.renew", "x1") == "x1"
    reject = session.refuse("x1", e.LEASE_EXPIRED, "the lease lapsed")
    assert ss.error_of(reject).reply_to == "x1"
    assert ss.pend(session, "task.finish", "x1") == "x1"
    assert session.pending() == {"x1": "task.finish"}


def test_ids_are_unique_among_pending_requests_of_every_type() -> None:
    session = ss.registered()
    for i, request_type in enumerate(ss.REQUESTS):
        ss.pend(session, request_type, f"p{i}")
    for i, request_type in enumerate(ss.REQUESTS):
        for other in ss.REQUESTS:
            frame = ss.with_id(ss.REQUESTS[other](), f"p{i}")
            assert _reject(session, ss.compact(frame))[:2] == (e.DUPLICATE_MESSAGE_ID, False)
    assert session.state == "active" and len(session.pending()) == len(ss.REQUESTS)


# -- session_id on the wire -------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    '{"protocol_version": "1",',  # invalid_json
    cs.dumps(cs.put(cs.hello(), "protocol_version", 1)),  # unsupported_version
    cs.dumps(cs.start()),  # hello_required
])
def test_fatal_errors_before_registration_carry_no_session_id(text: str) -> None:
    error = ss.error_of(ss.fresh().receive(text))
    assert error.fatal and error.session_id is None


def test_errors_before_the_welcome_carry_no_session_id() -> None:
    session = _hello_pending()
    bad_hello = cs.put(ss.with_id(cs.hello(), "h2"), "body.worker_name", "")
    assert ss.error_of(session.receive(cs.dumps(bad_hello))).session_id is None
    assert ss.error_of(session.refuse("h1", e.PERMISSION_DENIED, "queue 'mail' is not allowed")).session_id is None
    assert session.state == "closing"


def test_errors_after_the_welcome_carry_the_session_id() -> None:
    session = ss.registered()
    assert ss.error_of(session.receive(cs.dumps(cs.put(cs.start(), "body.revision", "01")))).session_id == ss.SESSION
    assert ss.error_of(session.receive("not json")).session_id == ss.SESSION


# -- the invalid-frame counter ------------------------------------------------------------------

def _invalid(i: int) -> str:
    return cs.dumps(cs.put(ss.with_id(cs.renew(), f"bad{i}"), "body.revision", "0"))


@pytest.mark.parametrize("escaped", [False, True])
def test_ten_invalid_frames_are_answered_and_the_eleventh_is_fatal(escaped: bool) -> None:
    session = ss.registered()
    for i in range(MAX_INVALID_FRAMES):
        assert _reject(session, _invalid(i)) == (e.INVALID_FRAME, False, f"bad{i}", None)
        # Other non-fatal answers and valid requests between them do not reset or feed the count.
        assert _reject(session, cs.dumps(cs.put(cs.finish(), "body.result", None)))[:2] == (e.INVALID_RESULT, False)
        assert _reject(session, ss.compact(cs.hello()))[:2] == (e.INVALID_TRANSITION, False)
        frame = ss.with_id(cs.renew(), f"ok{i}")
        ss.request(session, ss.escaped(frame) if escaped else ss.compact(frame))
    assert session.state == "active"
    assert _reject(session, _invalid(99)) == (e.INVALID_FRAME, True, "bad99", e.CLOSE_POLICY_VIOLATION)
    assert session.state == "closing"


def test_invalid_hellos_count_towards_the_limit() -> None:
    session = ss.fresh()
    for i in range(MAX_INVALID_FRAMES):
        frame = cs.put(ss.with_id(cs.hello(), f"h{i}"), "body.subscriptions", [])
        assert _reject(session, cs.dumps(frame))[:2] == (e.INVALID_FRAME, False)
    ss.request(session, ss.compact(cs.hello()))
    ss.sent(session.welcome("h1", ss.welcome_body()))
    assert _reject(session, _invalid(0))[:2] == (e.INVALID_FRAME, True)


def test_reject_tells_the_transport_what_the_frame_says() -> None:
    reject = ss.registered().receive(_invalid(0))
    assert type(reject) is Reject and reject.code == e.INVALID_FRAME and reject.close_code is None
