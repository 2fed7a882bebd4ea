"""The compiled fast path never accepts what the reference decoder refuses.

``try_decode_client`` may decline any frame (the reference decoder then
answers it), but a message it returns must be exactly the reference
decoder's message for the same bytes. Every canonical example must take
the fast path, or the fast path is dead code. Mutations come in two kinds:
structural ones (a field set, dropped, renamed or added) and textual ones
that only raw text can show: repeated keys at any depth, whitespace,
escapes, colons in values, byte-order marks, truncation.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contract_support as s
from pulse_trio.contract.codec import decode_client_frame
from pulse_trio.contract.errors import ProtocolError
from pulse_trio.contract.fast_client import try_decode_client

SETTINGS = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _reference(text: str):
    try:
        return decode_client_frame(text)
    except ProtocolError as exc:
        return exc


def _fast_agrees(text: str) -> bool:
    """Assert the fast path is a subset of the reference; True if it decoded the frame."""
    fast = try_decode_client(text.encode("utf-8", "surrogatepass"))
    if fast is None:
        return False
    reference = _reference(text)
    assert fast == reference, (text, fast, reference)
    return True


@pytest.mark.parametrize("name", sorted(s.CLIENT_EXAMPLES))
def test_every_canonical_example_takes_the_fast_path(name):
    assert _fast_agrees(s.dumps(s.CLIENT_EXAMPLES[name]()))


@pytest.mark.parametrize("status", ["FAILED", "UNKNOWN", "CANCELLED"])
def test_failure_reports_take_the_fast_path(status):
    frame = s.finish(status, error_message="it: broke", retryable=status == "FAILED")
    assert _fast_agrees(s.dumps(frame))


@pytest.mark.parametrize("text", [
    # a key repeated at the top, in the body, in a subscription, in the result
    '{"protocol_version":"1","type":"task.start","id":"a","id":"st1","session_id":"%(S)s","body":%(B)s}',
    '{"protocol_version":"1","type":"task.start","id":"st:1","session_id":"%(S)s","session_id":"%(S)s","body":%(B)s}',
    '{"protocol_version":"1","type":"task.start","id":"st1","session_id":"%(S)s","body":%(B)s,"body":%(B)s}',
    '{"protocol_version":"1","type":"task.start","id":"st1","session_id":"%(S)s","body":%(B)s , "id" : "x:y"}',
    '{"protocol_version":"1","protocol_version":"1","type":"task.start","id":"st1","session_id":"%(S)s","body":%(B)s}',
    '{"protocol_version":"1","type":"task.start","type":"task.start","id":"st1","session_id":"%(S)s","body":%(B)s}',
])
def test_repeated_keys_never_take_the_fast_path(text):
    body = json.dumps(s.start()["body"], separators=(",", ":"))
    text = text % {"S": s.SESSION, "B": body}
    assert isinstance(_reference(text), ProtocolError)
    assert try_decode_client(text.encode()) is None


def test_a_repeated_key_inside_the_result_never_takes_the_fast_path():
    text = s.dumps(s.finish()).replace('"result":{', '"result":{"sent":false,', 1)
    assert isinstance(_reference(text), ProtocolError)
    assert try_decode_client(text.encode()) is None


def test_a_repeated_key_hidden_behind_colons_in_values_never_takes_the_fast_path():
    frame = s.finish("FAILED", error_message="a:b:c")
    text = s.dumps(frame).replace('"error_message":"a:b:c"', '"error_message":"a","error_message":"b:c"')
    assert isinstance(_reference(text), ProtocolError)
    assert try_decode_client(text.encode()) is None


_INSERTIONS = [" ", "\n", "\t", '"', "\\", ":", ",", "{", "}", "[", "]", "\\u0041", "\\\"", "\ufeff", "x", "0",
               '"id":"z",', '"id":"z:z",', ',"id":"z"', '"revision":"1",', '"result":1,', "null", "\ud800"]


@st.composite
def textual_mutation(draw) -> str:
    name = draw(st.sampled_from(sorted(s.CLIENT_EXAMPLES)))
    text = s.dumps(s.CLIENT_EXAMPLES[name]())
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["insert", "delete", "duplicate_member", "truncate"]))
        if op == "insert":
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(st.sampled_from(_INSERTIONS)) + text[at:]
        elif op == "delete" and text:
            at = draw(st.integers(0, len(text) - 1))
            text = text[:at] + text[at + draw(st.integers(1, 4)):]
        elif op == "duplicate_member":
            members = list(re.finditer(r'"[a-z_]+":("[^"\\]*"|-?\d+|true|false)', text))
            if members:
                member = draw(st.sampled_from(members))
                copy = member.group(0)
                if draw(st.booleans()):
                    copy = copy.replace('":', '" :', 1)
                text = text[:member.end()] + "," + copy + text[member.end():]
        else:
            text = text[:draw(st.integers(0, len(text)))]
    return text


@SETTINGS
@given(textual_mutation())
def test_textual_mutations_never_fool_the_fast_path(text):
    _fast_agrees(text)


@SETTINGS
@given(s.mutated(s.CLIENT_EXAMPLES))
def test_structural_mutations_never_fool_the_fast_path(case):
    _fast_agrees(s.dumps(case[1]))


@SETTINGS
@given(s.mutated(s.CLIENT_EXAMPLES), st.sampled_from([{"indent": 1}, {"separators": (", ", ": ")},
                                                      {"ensure_ascii": True}]))
def test_other_spellings_of_a_frame_are_decided_alike(case, spelling):
    _fast_agrees(json.dumps(case[1], **spelling))
