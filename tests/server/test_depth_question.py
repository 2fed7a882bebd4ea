"""What the dispatcher asks before sharing a pass in rounds: enough READY work for every hungry session?

In memory: the question's counts per queue and per named kinds, which err
towards "not enough" (a session counts against everything it could take).
The database side is tests/store/test_assign.py; the passes that ask it, and
claim all their free slots when the answer is yes, tests/server/test_capacity_dispatch.py.
"""

from __future__ import annotations

import types

from pulse_trio.server.dispatcher import DEPTH_PROBE_MOST, _DepthQuestion


def _session(free: int, **queues: list[str] | None) -> types.SimpleNamespace:
    return types.SimpleNamespace(free_slots=free, queues={q: None if k is None else frozenset(k)
                                                          for q, k in queues.items()})


def test_sessions_that_take_every_kind_need_the_queue_to_cover_them_all():
    question = _DepthQuestion.of([_session(8, billing=None), _session(5, billing=None, mail=None)], None)
    assert question.wants == {("billing", None): 13, ("mail", None): 5}


def test_named_kinds_count_every_rival_that_could_take_them():
    a = _session(8, billing=["send"])
    b = _session(4, billing=["send", "void"])
    c = _session(2, billing=["refund"])
    question = _DepthQuestion.of([a, b, c], None)
    assert question.wants == {
        ("billing", frozenset({"send"})): 12,  # a and b may both take send
        ("billing", frozenset({"send", "void"})): 12,  # b's kinds: a competes for send
        ("billing", frozenset({"refund"})): 2,  # nobody else takes refund
    }
    whole = _session(16, billing=None)  # takes every kind: a rival of every named set, and needs the total
    question = _DepthQuestion.of([a, c, whole], None)
    assert question.wants == {("billing", None): 26, ("billing", frozenset({"send"})): 24,
                              ("billing", frozenset({"refund"})): 18}


def test_paused_queues_are_not_asked_about_and_too_large_a_question_is_not_asked():
    question = _DepthQuestion.of([_session(8, billing=None, mail=None)], frozenset({"mail"}))
    assert question.wants == {("billing", None): 8}
    assert _DepthQuestion.of([_session(8, mail=None)], frozenset({"mail"})) is None  # nothing to ask
    many = [_session(64, billing=None) for _ in range(DEPTH_PROBE_MOST // 64 + 1)]
    assert _DepthQuestion.of(many, None) is None  # it would read more index entries than it may save

