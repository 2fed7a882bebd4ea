"""The hello, the welcome, and what a session numbers and stamps on its frames."""

from __future__ import annotations

import itertools

import pytest

import contract_support as cs
import session_support as ss
from pulse_trio.contract import errors as e
from pulse_trio.contract import messages as m
from pulse_trio.contract.encoder import encode, encode_bytes
from pulse_trio.session import Request, ServerSession


def test_hello_then_welcome() -> None:
    session = ss.fresh()
    assert session.state == "awaiting_hello" and not session.registered
    hello = ss.request(session, ss.compact(cs.hello()))
    assert type(hello) is m.WorkerHello and hello.worker_name == "billing-7"
    assert session.pending() == {"h1": "worker.hello"}
    welcome = ss.sent(session.welcome("h1", ss.welcome_body()))
    assert type(welcome) is m.WorkerWelcome
    assert (welcome.id, welcome.session_id, welcome.reply_to) == ("s-1", ss.SESSION, "h1")
    assert welcome.body == ss.welcome_body()
    assert session.state == "active" and session.registered and session.pending() == {}


def test_frames_built_by_the_encoder_are_requests() -> None:
    session = ss.fresh()
    hello = m.WorkerHello(id="h1", worker_name="w", subscriptions=(m.Subscription("billing"),))
    event = session.receive(encode_bytes(hello))
    assert event == Request(hello)
    session.welcome("h1", ss.welcome_body())
    start = m.TaskStart(id="st1", session_id=ss.SESSION, task_id=cs.TASK, lease_id=cs.LEASE,
                        lease_secret=cs.SECRET_B, revision=1)
    assert session.receive(encode(start)) == Request(start)


def test_a_second_hello_is_refused_and_changes_nothing() -> None:
    session = ss.registered()
    ss.pend(session, "task.start")
    for text in (ss.compact(ss.with_id(cs.hello(), "h2")), ss.escaped(ss.with_id(cs.hello(), "h2"))):
        error = ss.error_of(session.receive(text))
        assert (error.code, error.fatal, error.reply_to, error.session_id) == (
            e.INVALID_TRANSITION, False, "h2", ss.SESSION)
        assert session.state == "active" and session.pending() == {"st1": "task.start"}
    ss.sent(session.ack("st1", ss.ack_body("task.start")), ack_for="task.start")


def test_a_hello_while_one_is_pending_is_refused() -> None:
    """Only one hello may be registered: a second one waiting could yield a second welcome."""
    session = ss.fresh()
    ss.request(session, ss.compact(cs.hello()))
    error = ss.error_of(session.receive(ss.compact(ss.with_id(cs.hello(), "h2"))))
    assert (error.code, error.fatal, error.reply_to, error.session_id) == (e.INVALID_TRANSITION, False, "h2", None)
    assert session.pending() == {"h1": "worker.hello"}
    ss.sent(session.welcome("h1", ss.welcome_body()))
    assert session.state == "active"


def test_the_first_frame_must_be_a_hello() -> None:
    session = ss.fresh()
    reject = session.receive(ss.compact(cs.capacity()))
    error = ss.error_of(reject)
    assert (error.code, error.fatal, error.reply_to, error.session_id) == (e.HELLO_REQUIRED, True, "c1", None)
    assert reject.close_code == e.CLOSE_POLICY_VIOLATION
    assert session.state == "closing"


def test_a_frame_after_the_hello_but_before_the_welcome_needs_the_hello_answered() -> None:
    session = ss.fresh()
    ss.request(session, ss.compact(cs.hello()))
    error = ss.error_of(session.receive(ss.compact(cs.start())))
    assert (error.code, error.fatal, error.session_id) == (e.HELLO_REQUIRED, True, None)


def test_a_hello_timeout_is_fatal_and_unsolicited() -> None:
    session = ss.fresh()
    reject = session.fail(e.HELLO_REQUIRED, "no worker.hello within 10s")
    error = ss.error_of(reject)
    assert (error.code, error.fatal, error.reply_to, error.session_id) == (e.HELLO_REQUIRED, True, None, None)
    assert session.state == "closing"


def test_a_non_fatal_refusal_of_the_hello_lets_the_worker_try_again() -> None:
    session = ss.fresh()
    ss.request(session, ss.compact(cs.hello()))
    error = ss.error_of(session.refuse("h1", e.INVALID_TRANSITION, "not now"))
    assert (error.fatal, error.reply_to, error.session_id) == (False, "h1", None)
    assert session.state == "awaiting_hello"
    ss.request(session, ss.compact(cs.hello()))
    ss.sent(session.welcome("h1", ss.welcome_body()))
    assert session.registered


@pytest.mark.parametrize("code", [e.PERMISSION_DENIED, e.SERVER_SHUTTING_DOWN, e.INTERNAL])
def test_a_fatal_refusal_of_the_hello_closes(code: str) -> None:
    session = ss.fresh()
    ss.request(session, ss.compact(cs.hello()))
    reject = session.refuse("h1", code, "refused", fatal=True, retry_after_ms=1000 if code == e.INTERNAL else None)
    error = ss.error_of(reject)
    assert (error.code, error.fatal, error.reply_to, error.session_id) == (code, True, "h1", None)
    assert session.state == "closing" and not session.registered


# -- frame ids ----------------------------------------------------------------------------------

def _every_kind_of_frame(session: ServerSession) -> list[bytes]:
    frames = []
    ss.request(session, ss.compact(cs.hello()))
    frames.append(session.welcome("h1", ss.welcome_body()))
    for i, request_type in enumerate(itertools.islice(itertools.cycle(ss.REQUESTS), 40)):
        reply_to = ss.pend(session, request_type, f"r{i}")
        if i % 3:
            frames.append(session.ack(reply_to, ss.ack_body(request_type)))
        else:
            frames.append(session.refuse(reply_to, e.LEASE_NOT_FOUND, "no such lease").frame)
        frames.append(session.assign(ss.assigned_task(), ss.offered_lease()))
        frames.append(session.cancel(cs.TASK, cs.LEASE, ss.T0, ss.T1, None))
        frames.append(session.receive(cs.dumps(cs.put(cs.finish(), "body.result", None))).frame)
        frames.append(session.receive(ss.compact(cs.hello())).frame)
    frames.append(session.shutdown().frame)
    return frames


def test_frame_ids_are_unique_and_numbered() -> None:
    frames = _every_kind_of_frame(ss.fresh())
    ids = [ss.sent(frame).id for frame in frames]
    assert ids == [f"s-{n}" for n in range(1, len(frames) + 1)]


def test_an_injected_frame_id_source_is_used_for_every_frame() -> None:
    minted = (f"srv.{n}" for n in itertools.count())
    frames = _every_kind_of_frame(ServerSession(ss.SESSION, new_frame_id=lambda: next(minted)))
    ids = [ss.sent(frame).id for frame in frames]
    assert len(set(ids)) == len(ids) and all(i.startswith("srv.") for i in ids)
