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

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contract_support as s
from pulse_trio.contract.codec import decode_client_frame, decode_server_frame
from pulse_trio.contract.errors import ProtocolError
from pulse_trio.contract.fast_client import try_decode_client
from pulse_trio.contract.fast_server import try_decode_server
from pulse_trio.contract.jsontext import canonical_fragment, dumps
from pulse_trio.contract.limits import MAX_RESULT_DEPTH
from pulse_trio.contract.scanner import ScanError, scan

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


@st.composite
def textual_mutation(draw) -> str:
    name = draw(st.sampled_from(sorted(s.CLIENT_EXAMPLES)))
    text = s.dumps(s.CLIENT_EXAMPLES[name]())
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["insert", "delete", "duplicate_member", "truncate"]))
        if op == "insert":
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(st.sampled_from(s.INSERTIONS)) + text[at:]
        elif op == "delete" and text:
            at = draw(st.integers(0, len(text) - 1))
            text = text[:at] + text[at + draw(st.integers(1, 4)):]
        elif op == "duplicate_member":
            members = list(s.MEMBER.finditer(text))
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


# -- server frames (what the SDK reads) ------------------------------------------------------

_ACK_FOR = {"ack_capacity": "worker.capacity", "ack_resume": "worker.resume", "ack_renew": "task.renew",
            "ack_finish": "task.finish"}
_FAST_SERVER = ("ack_capacity", "ack_resume", "ack_renew", "ack_finish", "assign", "assign_minimal", "cancel")


def _server_agrees(text: str, ack_for: str | None) -> bool:
    fast = try_decode_server(text.encode("utf-8", "surrogatepass"), lambda reply_to: ack_for)
    if fast is None:
        return False
    for strict in (True, False):
        try:
            reference = decode_server_frame(text, ack_for=ack_for, strict=strict)
        except ProtocolError as exc:
            reference = exc
        assert fast == reference, (text, strict, fast, reference)
    return True


@pytest.mark.parametrize("name", _FAST_SERVER)
def test_every_canonical_server_example_takes_the_fast_path(name):
    assert _server_agrees(s.dumps(s.SERVER_EXAMPLES[name]()), _ACK_FOR.get(name))


@SETTINGS
@given(s.mutated({name: s.SERVER_EXAMPLES[name] for name in _FAST_SERVER}))
def test_structural_mutations_never_fool_the_server_fast_path(case):
    name, frame = case
    _server_agrees(s.dumps(frame), _ACK_FOR.get(name))


@SETTINGS
@given(st.sampled_from(_FAST_SERVER), st.data())
def test_textual_mutations_never_fool_the_server_fast_path(name, data):
    _server_agrees(s.mutate_text(s.dumps(s.SERVER_EXAMPLES[name]()), data.draw), _ACK_FOR.get(name))


# -- canonical fragments (results and payloads) ----------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12)


def _reference_fragment(text: str):
    try:
        value = scan(text, max_depth=MAX_RESULT_DEPTH)
    except ScanError:
        return None
    out, problem = dumps(value, check_numbers=True)
    return None if problem else out


@SETTINGS
@given(_json, st.sampled_from([{"ensure_ascii": False, "separators": (",", ":")}, {"indent": 1},
                               {"ensure_ascii": True, "separators": (",", ":")}]),
       st.sampled_from(["", ' ', '1e5', '"\\u0041"', '5e-324', '-0', '{"a":1,"a":1}', "1.50", "[[[[[[[[[[[[[[[[" * 2]))
def test_a_canonical_fragment_is_exactly_what_the_scanner_would_make(value, spelling, splice):
    text = json.dumps(value, **spelling)
    if splice and text.startswith("["):
        text = "[" + splice + "," + text[1:] if text != "[]" else "[" + splice + "]"
    quick = canonical_fragment(text.encode("utf-8", "surrogatepass"), max_depth=MAX_RESULT_DEPTH)
    if quick is not None:
        assert quick == _reference_fragment(text) == text, text


@pytest.mark.parametrize("text", ['{"ok":true,"n":[1,2.5,"x:y"],"s":"caf\\u00e9"}', '{}', 'null', '"\\u001f\\n"',
                                  '-0.0', '[[]]', '{"a":{"b":{"c":null}}}'])
def test_what_our_encoder_writes_takes_the_shortcut(text):
    value = json.loads(text)
    canonical = dumps(value)[0].encode()
    assert canonical_fragment(canonical, max_depth=MAX_RESULT_DEPTH) == canonical.decode()


@pytest.mark.parametrize("text", ['{"a":1,"a":1}', '{"a": 1}', '1.50', '1e5', '5e-324', '-0', '"\\u0041"',
                                  '[' * 31 + ']' * 31, '"\\ud800"', 'NaN'])
def test_what_is_not_canonical_or_not_allowed_never_takes_the_shortcut(text):
    assert canonical_fragment(text.encode(), max_depth=MAX_RESULT_DEPTH) is None
