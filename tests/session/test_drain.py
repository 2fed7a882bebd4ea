"""Drain: no offers while draining, everything else goes on; drain=false resumes."""

from __future__ import annotations

import contract_support as cs
import session_support as ss
from pulse_trio.contract import messages as m
from pulse_trio.session import ServerSession


def _capacity(session: ServerSession, sequence: int, drain: bool) -> m.Ack:
    """One worker.capacity frame, applied as the store committed it, and its ack."""
    frame = cs.put(cs.put(ss.with_id(cs.capacity(), f"c{sequence}"), "body.sequence", str(sequence)),
                   "body.drain", drain)
    reply_to = ss.request(session, ss.compact(frame)).id
    session.capacity_applied(drain)
    body = ss.welcome_body(secret=False, capacity=8, drain=drain, sequence=sequence)
    ack = ss.sent(session.ack(reply_to, body), ack_for="worker.capacity")
    assert (ack.reply_to, ack.body.drain, ack.body.sequence) == (reply_to, drain, sequence)
    return ack


def _assign(session: ServerSession) -> bytes | None:
    return session.assign(ss.assigned_task(), ss.offered_lease())


def test_drain_stops_offers_and_drain_false_resumes_them() -> None:
    session = ss.registered()
    _capacity(session, 1, False)
    assert session.state == "active"
    offer = ss.sent(_assign(session))
    assert type(offer) is m.TaskAssign and offer.lease.lease_secret == cs.SECRET_B

    _capacity(session, 2, True)
    assert session.state == "draining"
    assert _assign(session) is None

    _capacity(session, 3, True)
    assert session.state == "draining"
    assert _assign(session) is None

    _capacity(session, 4, False)
    assert session.state == "active"
    assert type(ss.sent(_assign(session))) is m.TaskAssign


def test_lease_commands_and_resume_are_answered_while_draining() -> None:
    session = ss.registered()
    _capacity(session, 1, True)
    for request_type in ("task.start", "task.renew", "worker.resume", "task.finish"):
        reply_to = ss.pend(session, request_type)
        ack = ss.sent(session.ack(reply_to, ss.ack_body(request_type)), ack_for=request_type)
        assert ack.reply_to == reply_to
        assert session.state == "draining"
    refusal = ss.error_of(session.refuse(ss.pend(session, "task.renew"), "lease_expired", "the lease lapsed"))
    assert (refusal.reply_to, refusal.fatal) == ("rn1", False)
    assert session.dropped_answers == 0


def test_cancel_notices_still_go_out_while_draining() -> None:
    session = ss.registered()
    _capacity(session, 1, True)
    notice = ss.sent(session.cancel(cs.TASK, cs.LEASE, ss.T0, ss.T1, "operator"))
    assert type(notice) is m.TaskCancel
    assert (notice.task_id, notice.lease_id, notice.reason, notice.session_id) == (
        cs.TASK, cs.LEASE, "operator", ss.SESSION)


def test_a_stale_capacity_frame_is_acked_with_the_current_state() -> None:
    """The store decides drain (an operator's drain outlives drain=false); the session follows it."""
    session = ss.registered()
    _capacity(session, 5, True)
    reply_to = ss.request(session, ss.compact(cs.capacity())).id  # sequence 1 < 5: stale
    session.capacity_applied(True)
    ack = ss.sent(session.ack(reply_to, ss.welcome_body(secret=False, capacity=8, drain=True, sequence=5)),
                  ack_for="worker.capacity")
    assert ack.body.sequence == 5 and session.state == "draining"


def test_no_push_before_the_welcome() -> None:
    session = ss.fresh()
    assert _assign(session) is None
    assert session.cancel(cs.TASK, cs.LEASE, ss.T0, ss.T1, None) is None
    session.capacity_applied(True)  # nothing to apply to: the chart has no capacity before hello
    assert session.state == "awaiting_hello"


def test_an_operators_drain_moves_the_chart_and_stops_offers() -> None:
    """The chart owns drain: an operator's drain seen here moves it, whatever the worker's frames said."""
    session = ss.registered()
    _capacity(session, 1, False)
    assert not session.draining
    session.operator_drained()
    assert (session.state, session.draining) == ("draining", True)
    assert _assign(session) is None
    session.operator_drained()  # seen again (another capacity check): still draining
    assert session.state == "draining"
    # The store answers the worker's next capacity frame with its stored state, drain still set.
    _capacity(session, 2, True)
    assert session.draining and _assign(session) is None
