"""Once a session is closing, late answers are accepted and dropped, and pushes send nothing.

The store may finish a request after the connection failed, was shut down
or was released: the answer then returns None and counts in
``dropped_answers``, it never raises. Only a caller bug (answering an id
that is not pending, an ack body of the wrong shape) is an
``InvalidMessage``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import contract_support as cs
import session_support as ss
from pulse_trio.contract import errors as e
from pulse_trio.contract.errors import InvalidMessage
from pulse_trio.contract.limits import MAX_FRAME_BYTES, MAX_INVALID_FRAMES
from pulse_trio.session import Close, ServerSession


def test_the_issue_case_fatal_json_then_the_ack_of_a_pending_start() -> None:
    session = ss.registered()
    ss.pend(session, "task.start")
    reject = session.receive(b'{"protocol_version":"1","type":"task.renew",')
    error = ss.error_of(reject)
    assert (error.code, error.fatal, error.reply_to) == (e.INVALID_JSON, True, None)
    assert reject.close_code == e.CLOSE_INVALID_PAYLOAD
    assert session.state == "closing"
    assert session.ack("st1", ss.ack_body("task.start")) is None
    assert session.dropped_answers == 1
    assert session.pending() == {}
    assert session.state == "closing"
    session.release()
    assert session.state == "closed"


# -- every way a session ends, times every pending request, times every answer -------------------

def _invalid_json(session: ServerSession) -> object:
    return session.receive("{")


def _session_mismatch(session: ServerSession) -> object:
    return session.receive(ss.compact(ss.with_id(cs.put(cs.renew(), "session_id", cs.OTHER_SESSION), "x9")))


def _too_large(session: ServerSession) -> object:
    event = session.receive(b" " * (MAX_FRAME_BYTES + 1))
    assert event == Close(e.CLOSE_MESSAGE_TOO_BIG, "frame too large")
    return event


def _eleventh_invalid_frame(session: ServerSession) -> object:
    for i in range(MAX_INVALID_FRAMES + 1):
        event = session.receive(cs.dumps(cs.put(ss.with_id(cs.renew(), f"bad{i}"), "body.revision", "0")))
    return event


def _fail(session: ServerSession) -> object:
    return session.fail(e.INTERNAL, "the instance lost its database")


def _shutdown(session: ServerSession) -> object:
    return session.shutdown()


def _fatal_refusal(session: ServerSession) -> object:
    ss.pend(session, "task.renew", "other")
    return session.refuse("other", e.INTERNAL, "storage failure", fatal=True, retry_after_ms=1000)


def _release(session: ServerSession) -> object:
    session.release()
    return None


ENDINGS: dict[str, Callable[[ServerSession], object]] = {
    "invalid_json": _invalid_json, "session_mismatch": _session_mismatch, "too_large": _too_large,
    "eleventh_invalid_frame": _eleventh_invalid_frame, "fail": _fail, "shutdown": _shutdown,
    "fatal_refusal": _fatal_refusal, "release": _release,
}


def _ack(session: ServerSession, reply_to: str, request_type: str) -> object:
    return session.ack(reply_to, ss.ack_body(request_type))


def _refuse(session: ServerSession, reply_to: str, request_type: str) -> object:
    return session.refuse(reply_to, e.LEASE_EXPIRED, "the lease lapsed")


def _refuse_fatal(session: ServerSession, reply_to: str, request_type: str) -> object:
    return session.refuse(reply_to, e.INTERNAL, "storage failure", fatal=True, retry_after_ms=1000)


ANSWERS = {"ack": _ack, "refuse": _refuse, "refuse_fatal": _refuse_fatal}


def _ended(ending: str) -> tuple[ServerSession, object]:
    session = ss.registered()
    event = ENDINGS[ending](session)
    assert session.ending and session.state in ("closing", "closed")
    return session, event


@pytest.mark.parametrize("answer", sorted(ANSWERS))
@pytest.mark.parametrize("request_type", sorted(ss.REQUESTS))
@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_a_late_answer_is_dropped_whatever_ended_the_session(ending: str, request_type: str, answer: str) -> None:
    session = ss.registered()
    reply_to = ss.pend(session, request_type, "late")
    ENDINGS[ending](session)
    state = session.state
    assert state in ("closing", "closed")
    assert ANSWERS[answer](session, reply_to, request_type) is None
    assert session.dropped_answers == 1
    assert "late" not in session.pending()
    assert session.state == state


@pytest.mark.parametrize("ending", ["invalid_json", "fail", "shutdown", "release"])
@pytest.mark.parametrize("answer", ["welcome", "refuse"])
def test_a_late_answer_to_a_hello_is_dropped(ending: str, answer: str) -> None:
    session = ss.fresh()
    ss.request(session, ss.compact(cs.hello()))
    if ending == "fail":
        ss.error_of(session.fail(e.HELLO_REQUIRED, "no worker.hello within 10s"))
    else:
        ENDINGS[ending](session)
    if answer == "welcome":
        assert session.welcome("h1", ss.welcome_body()) is None
    else:
        assert session.refuse("h1", e.PERMISSION_DENIED, "queue 'mail' is not allowed") is None
    assert session.dropped_answers == 1
    assert not session.registered


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_nothing_goes_out_after_the_session_ended(ending: str) -> None:
    session, _ = _ended(ending)
    state = session.state
    assert session.assign(ss.assigned_task(), ss.offered_lease()) is None
    assert session.cancel(cs.TASK, cs.LEASE, ss.T0, ss.T1, "operator") is None
    assert session.fail(e.INTERNAL, "late") is None
    assert session.shutdown() is None
    session.capacity_applied(True)  # a graceful stop's last capacity frame
    session.capacity_applied(False)
    assert session.receive(ss.compact(ss.with_id(cs.renew(), "after"))) == Close(1000, "session is closing")
    assert session.receive("{") == Close(1000, "session is closing")
    assert session.state == state
    assert session.pending() == {}
    assert session.dropped_answers == 0


def test_answers_keep_going_out_while_the_session_is_open() -> None:
    session = ss.registered()
    for request_type in ss.REQUESTS:
        reply_to = ss.pend(session, request_type)
        ack = ss.sent(session.ack(reply_to, ss.ack_body(request_type)), ack_for=request_type)
        assert (ack.reply_to, ack.session_id, ack.body) == (reply_to, ss.SESSION, ss.ack_body(request_type))
    assert session.dropped_answers == 0


# -- caller bugs stay errors, in every state ------------------------------------------------------

@pytest.mark.parametrize("ending", [None, "invalid_json", "shutdown", "release"])
def test_answering_an_id_that_is_not_pending_is_a_caller_bug(ending: str | None) -> None:
    session = ss.registered()
    ss.pend(session, "task.start")
    if ending is not None:
        ENDINGS[ending](session)
    with pytest.raises(InvalidMessage):
        session.ack("never", ss.ack_body("task.start"))
    with pytest.raises(InvalidMessage):
        session.refuse("never", e.LEASE_EXPIRED, "the lease lapsed")
    with pytest.raises(InvalidMessage):
        session.welcome("st1", ss.welcome_body())  # pending, but no hello


def test_an_ack_body_of_the_wrong_shape_is_a_caller_bug() -> None:
    session = ss.registered()
    ss.pend(session, "task.start")
    with pytest.raises(InvalidMessage):
        session.ack("st1", ss.lease())
    assert session.pending() == {"st1": "task.start"}  # the request may still be answered
    ss.sent(session.ack("st1", ss.ack_body("task.start")), ack_for="task.start")


def test_answering_twice_is_a_caller_bug() -> None:
    session = ss.registered()
    ss.pend(session, "task.renew")
    ss.sent(session.ack("rn1", ss.ack_body("task.renew")), ack_for="task.renew")
    with pytest.raises(InvalidMessage):
        session.ack("rn1", ss.ack_body("task.renew"))


# -- release -----------------------------------------------------------------------------------------

def _draining() -> ServerSession:
    session = ss.registered()
    session.capacity_applied(True)
    return session


def _closing() -> ServerSession:
    session = ss.registered()
    session.receive("{")
    return session


@pytest.mark.parametrize("setup", [ss.fresh, ss.registered, _draining, _closing], ids=lambda f: f.__name__)
def test_release_closes_from_every_state_and_may_be_repeated(setup: Callable[[], ServerSession]) -> None:
    session = setup()
    for _ in range(3):
        session.release()
        assert session.state == "closed" and session.ending
    assert session.receive(ss.compact(cs.hello())) == Close(1000, "session is closing")


def test_release_with_pending_requests_drops_their_answers() -> None:
    session = ss.registered()
    ids = [ss.pend(session, request_type, f"p{i}") for i, request_type in enumerate(ss.REQUESTS)]
    session.release()
    for reply_to, request_type in zip(ids, ss.REQUESTS):
        assert session.ack(reply_to, ss.ack_body(request_type)) is None
    assert session.dropped_answers == len(ids)
    session.release()
    assert session.state == "closed"


# -- shutdown ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("setup", [ss.registered, _draining], ids=lambda f: f.__name__)
def test_shutdown_sends_server_shutting_down_and_closes_with_1001(setup: Callable[[], ServerSession]) -> None:
    session = setup()
    ss.pend(session, "task.renew")
    reject = session.shutdown()
    error = ss.error_of(reject)
    assert (error.code, error.fatal, error.reply_to, error.session_id) == (
        e.SERVER_SHUTTING_DOWN, True, None, ss.SESSION)
    assert reject.close_code == e.CLOSE_GOING_AWAY == 1001
    assert session.state == "closing"
    assert session.shutdown() is None
    assert session.ack("rn1", ss.ack_body("task.renew")) is None


def test_shutdown_before_the_welcome_carries_no_session_id() -> None:
    session = ss.fresh()
    ss.request(session, ss.compact(cs.hello()))
    error = ss.error_of(session.shutdown())
    assert (error.code, error.session_id, error.reply_to) == (e.SERVER_SHUTTING_DOWN, None, None)
    assert session.welcome("h1", ss.welcome_body()) is None
    assert session.shutdown() is None


def test_shutdown_after_a_fatal_error_sends_nothing() -> None:
    session = _closing()
    assert session.shutdown() is None
    assert session.state == "closing"
