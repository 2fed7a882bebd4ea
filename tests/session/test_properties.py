"""Any sequence of frames, answers and pushes: the session never raises, and ends cleanly.

A small reference model runs beside the session and predicts each
outcome from the chart, the id rules of docs/protocol.md §2 and the
precedence and fatality of docs/protocol.md §4.8: the state, the pending
ids, which code a frame gets, and that
after the first fatal event nothing but None (answers, pushes) or
``Close`` (frames) comes out. The only exception allowed anywhere is
``InvalidMessage`` for a caller bug, answering an id that is not pending.
Every frame that does come out is decoded as a worker decodes it and
held to the published schema, and its id is new.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contract_support as cs
import session_support as ss
from pulse_trio.contract import errors as e
from pulse_trio.contract.errors import InvalidMessage
from pulse_trio.contract.limits import MAX_FRAME_BYTES, MAX_INVALID_FRAMES
from pulse_trio.session import Close, Reject, Request

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
IDS = ("h1", "a", "b", "c")
TOO_LARGE = b" " * (MAX_FRAME_BYTES + 1)

#: Frames a worker may send, by name: (the frame, whether it is well formed).
FRAMES = {
    "hello": (cs.hello, True),
    **{request_type: (build, True) for request_type, build in ss.REQUESTS.items()},
    "foreign_session": (lambda: cs.put(cs.start(), "session_id", cs.OTHER_SESSION), True),
    "missing_session": (lambda: cs.drop(cs.start(), "session_id"), False),
    "invalid_frame": (lambda: cs.put(cs.renew(), "body.revision", "0"), False),
    "invalid_hello": (lambda: cs.put(cs.hello(), "body.subscriptions", []), False),
    "null_result": (lambda: cs.put(cs.finish(), "body.result", None), False),
    "unsupported_version": (lambda: cs.put(cs.start(), "protocol_version", "2"), False),
}

#: Requests weigh more than the frames that end a session, so runs get far.
_WEIGHTED = sorted(FRAMES) + 3 * sorted(ss.REQUESTS)
frames = st.tuples(st.just("frame"), st.sampled_from(_WEIGHTED), st.sampled_from(IDS),
                   st.sampled_from(["compact", "escaped"]))
garbage = st.tuples(st.just("garbage"), st.sampled_from(["{", "[]", "null", "too_large"]))
answers = st.tuples(st.just("answer"), st.integers(0, 7), st.sampled_from(["ok", "refuse", "refuse_fatal"]))
pushes = st.tuples(st.sampled_from(["assign", "cancel", "fail", "shutdown", "release", "bogus_answer"]))
capacities = st.tuples(st.just("capacity"), st.booleans())
operations = st.lists(st.one_of(frames, frames, frames, answers, answers, garbage, pushes, capacities), max_size=40)


@dataclasses.dataclass
class Model:
    """What the session should be, from the chart and the protocol's rules."""

    state: str = "awaiting_hello"
    registered: bool = False
    pending: dict[str, str] = dataclasses.field(default_factory=dict)
    invalid_frames: int = 0
    dropped: int = 0

    @property
    def ending(self) -> bool:
        return self.state in ("closing", "closed")

    def end(self) -> None:
        self.state = "closing"

    def verdict(self, name: str, id_: str) -> str | None:
        """The error code a frame gets (None: a Request), before its effect on the model."""
        well_formed = FRAMES[name][1]
        if name == "unsupported_version":
            return e.UNSUPPORTED_VERSION
        is_hello = name in ("hello", "invalid_hello")
        if self.state == "awaiting_hello":
            if not is_hello:
                return e.HELLO_REQUIRED
            if self.pending:  # only a hello can be pending before the welcome
                return e.INVALID_TRANSITION
        elif is_hello:
            return e.INVALID_TRANSITION
        elif name in ("foreign_session", "missing_session"):
            return e.SESSION_MISMATCH
        if not well_formed:
            return e.INVALID_RESULT if name == "null_result" else e.INVALID_FRAME
        if id_ in self.pending:
            return e.DUPLICATE_MESSAGE_ID
        return None


class Run:
    """The session under test, its model, and every frame id seen so far."""

    def __init__(self) -> None:
        self.session = ss.fresh()
        self.model = Model()
        self.frame_ids: set[str] = set()

    def out(self, frame: bytes | None, *, ack_for: str | None = None) -> object:
        message = ss.sent(frame, ack_for=ack_for)
        assert message.id not in self.frame_ids
        self.frame_ids.add(message.id)
        if message.TYPE == "error":
            assert (message.session_id is not None) == self.model.registered
        else:
            assert message.session_id == ss.SESSION
        return message

    def error(self, reject: object, code: str, *, fatal: bool | None = None) -> None:
        assert type(reject) is Reject, reject
        error = self.out(reject.frame)
        assert error.code == code and error.fatal == (e.FATAL[code] if fatal is None else fatal)
        assert error.fatal == (reject.close_code is not None)
        if error.fatal:
            self.model.end()

    # -- operations -------------------------------------------------------------------------------
    def frame(self, name: str, id_: str, spelling: str) -> None:
        frame = FRAMES[name][0]()
        frame = ss.with_id(frame, id_) if id_ != "h1" or name in ("hello", "invalid_hello") else frame
        text = (ss.escaped(frame) if spelling == "escaped" else cs.dumps(frame))
        event = self.session.receive(text)
        if self.model.ending:
            assert event == Close(1000, "session is closing")
            return
        code = self.model.verdict(name, frame["id"])
        if code is None:
            assert type(event) is Request and event.message.id == frame["id"]
            self.model.pending[frame["id"]] = event.type
            return
        fatal = None
        if code == e.INVALID_FRAME:
            self.model.invalid_frames += 1
            fatal = self.model.invalid_frames > MAX_INVALID_FRAMES
        self.error(event, code, fatal=fatal)

    def garbage(self, kind: str) -> None:
        event = self.session.receive(TOO_LARGE if kind == "too_large" else kind)
        if self.model.ending:
            assert event == Close(1000, "session is closing")
        elif kind == "too_large":
            assert event == Close(e.CLOSE_MESSAGE_TOO_BIG, "frame too large")
            self.model.end()
        else:
            self.error(event, e.INVALID_JSON if kind == "{" else e.UNSUPPORTED_VERSION)

    def answer(self, index: int, how: str) -> None:
        if not self.model.pending:
            return self.bogus_answer()
        reply_to = sorted(self.model.pending)[index % len(self.model.pending)]
        request_type = self.model.pending.pop(reply_to)
        session, model = self.session, self.model
        if how == "ok" and request_type == "worker.hello":
            result = session.welcome(reply_to, ss.welcome_body())
        elif how == "ok":
            result = session.ack(reply_to, ss.ack_body(request_type))
        else:
            result = session.refuse(reply_to, e.INTERNAL, "storage failure", fatal=how == "refuse_fatal",
                                    retry_after_ms=1000)
        if model.ending:
            assert result is None
            model.dropped += 1
        elif how == "ok":
            message = self.out(result, ack_for=None if request_type == "worker.hello" else request_type)
            assert message.reply_to == reply_to
            if request_type == "worker.hello":
                model.state, model.registered = "active", True
        else:
            self.error(result, e.INTERNAL, fatal=how == "refuse_fatal")

    def bogus_answer(self) -> None:
        with pytest.raises(InvalidMessage):
            self.session.ack("nobody", ss.ack_body("task.renew"))

    def capacity(self, drain: bool) -> None:
        self.session.capacity_applied(drain)
        if self.model.state in ("active", "draining"):
            self.model.state = "draining" if drain else "active"

    def assign(self) -> None:
        frame = self.session.assign(ss.assigned_task(), ss.offered_lease())
        if self.model.state == "active":
            self.out(frame)
        else:
            assert frame is None

    def cancel(self) -> None:
        frame = self.session.cancel(cs.TASK, cs.LEASE, ss.T0, ss.T1, "operator")
        if self.model.state in ("active", "draining"):
            self.out(frame)
        else:
            assert frame is None

    def fail(self) -> None:
        reject = self.session.fail(e.HELLO_REQUIRED, "no worker.hello within 10s")
        if self.model.ending:
            assert reject is None
        else:
            self.error(reject, e.HELLO_REQUIRED)

    def shutdown(self) -> None:
        reject = self.session.shutdown()
        if self.model.ending:
            assert reject is None
        else:
            assert reject.close_code == e.CLOSE_GOING_AWAY
            self.error(reject, e.SERVER_SHUTTING_DOWN)

    def release(self) -> None:
        self.session.release()
        self.model.state = "closed"

    def check(self) -> None:
        session, model = self.session, self.model
        assert session.state == model.state
        assert session.ending == model.ending
        assert session.registered == model.registered
        assert session.pending() == model.pending
        assert session.dropped_answers == model.dropped


@SETTINGS
@given(st.booleans(), operations)
def test_any_sequence_of_operations_matches_the_model_and_never_raises(welcomed: bool, ops: list[tuple]) -> None:
    run = Run()
    if welcomed:
        ops = [("frame", "hello", "h1", "compact"), ("answer", 0, "ok"), *ops]
    for name, *args in ops:
        getattr(run, name)(*args)
        run.check()
    # However it went, the session can always be released, and then only drops answers.
    run.release()
    run.release()
    for reply_to in list(run.model.pending):
        run.answer(0, "ok")
    run.check()
    assert run.session.pending() == {}
