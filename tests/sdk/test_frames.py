"""The worker's hot frames against the reference encoder and decoder: the same bytes out, the same verdicts in."""

from __future__ import annotations

import datetime as dt
import json

import contract_support as cs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulse_trio.contract import messages as m
from pulse_trio.contract.codec import decode_server_frame
from pulse_trio.contract.encoder import encode, encode_bytes
from pulse_trio.contract.errors import InvalidMessage, ProtocolError
from pulse_trio.contract.grammar import new_id, new_secret
from pulse_trio.contract.jsontext import JsonText
from pulse_trio.sdk import frames as f
from pulse_trio.sdk import outcome as oc
from pulse_trio.sdk import protocol as p
from pulse_trio.sdk.lease import finish_tail_of

NOW = dt.datetime(2026, 12, 2, 12, 0, 0, 123456, tzinfo=dt.timezone.utc)
LATER = NOW + dt.timedelta(seconds=30)


def _reference(cls: type, request_id: str, session_id: str, lease: f.LeaseFrames, revision: int,
               outcome: oc.Outcome | None = None) -> bytes:
    fields = outcome.fields() if outcome is not None else {}
    return encode_bytes(cls(id=request_id, session_id=session_id, task_id=lease.task_id, lease_id=lease.lease_id,
                            lease_secret=lease.lease_secret, revision=revision, **fields))


def _lease() -> f.LeaseFrames:
    return f.LeaseFrames(new_id("tsk_"), new_id("lse_"), new_secret())


@pytest.mark.parametrize("cls", [m.TaskStart, m.TaskRenew])
@pytest.mark.parametrize("revision", [1, 9, 12345678901234567890])
def test_start_and_renew_frames_are_the_reference_encoders_bytes(cls, revision):
    session, lease = new_id("ses_"), _lease()
    frame = f.command_frame(cls, "s17", f.session_part(session), lease, revision, f.PLAIN_TAIL)
    assert frame == _reference(cls, "s17", session, lease, revision)


_messages = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)
_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(value=_values, message=_messages, revision=st.integers(1, 2**64 - 1),
       kind=st.sampled_from(["ok", "retryable", "permanent", "unknown", "cancelled", "unhandled"]))
def test_finish_frames_are_the_reference_encoders_bytes(value, message, revision, kind):
    from pulse_trio.sdk.errors import PermanentError, RetryableError, UnknownOutcome

    if kind == "ok":
        outcome = oc.succeeded(value)
    elif kind == "cancelled":
        outcome = oc.cancelled(message or "x", oc.succeeded(value).result)
    elif kind == "unhandled":
        outcome = oc.from_exception(ValueError(message), cancel_requested=False)
    else:
        exc = {"retryable": RetryableError, "permanent": PermanentError, "unknown": UnknownOutcome}[kind]
        outcome = oc.from_exception(exc(message, details=value), cancel_requested=False)
    session, lease = new_id("ses_"), _lease()
    frame = f.command_frame(m.TaskFinish, "f3", f.session_part(session), lease, revision, finish_tail_of(outcome))
    assert frame == _reference(m.TaskFinish, "f3", session, lease, revision, outcome)


@pytest.mark.parametrize("fields", [
    dict(status="SUCCEEDED", result="{}"),
    dict(status="SUCCEEDED", result='{"b": 1, "a" :[1.50]}'),  # not canonical: parsed and canonicalized
    dict(status="SUCCEEDED", result=JsonText('{"a":1}')),
    dict(status="FAILED", result="{}", error_code="x.y", error_message="\u00e9\n\"q\"", retryable=True),
    dict(status="UNKNOWN", result="[]", error_code="unknown_outcome"),
    dict(status="DONE", result="{}"),
    dict(status="SUCCEEDED", result="null"),
    dict(status="SUCCEEDED", result="{"),
    dict(status="SUCCEEDED", result=3),
    dict(status="SUCCEEDED", result="{}", error_code="x"),
    dict(status="FAILED", result="{}"),
    dict(status="FAILED", result="{}", error_code="Bad-Code"),
    dict(status="CANCELLED", result="{}", error_code="cancelled", retryable=True),
    dict(status="FAILED", result="{}", error_code="x", error_message="m" * 4097),
    dict(status="FAILED", result="{}", error_code="x", error_message="\ud800"),
    dict(status="FAILED", result="{}", error_code="x", retryable=1),
    dict(status="SUCCEEDED", result=json.dumps("x" * 262_200)),
])
def test_finish_tails_refuse_exactly_what_the_message_refuses(fields):
    session, lease = new_id("ses_"), _lease()
    try:
        reference = _reference(m.TaskFinish, "f1", session, lease, 5, oc.Outcome(**fields))
    except InvalidMessage as exc:
        with pytest.raises(InvalidMessage) as raised:
            f.finish_tail(**fields)
        assert raised.value.field == exc.field
        return
    frame = f.command_frame(m.TaskFinish, "f1", f.session_part(session), lease, 5, f.finish_tail(**fields))
    assert frame == reference


# -- acks: the one-pass reading gives the reference path's verdict ------------------------------
def _session() -> p.ClientProtocol:
    hello = m.WorkerHello(id="h1", worker_name="w", subscriptions=(m.Subscription("billing", ("send",)),))
    welcome = m.WorkerWelcome(id="s-1", session_id=new_id("ses_"), reply_to="h1", body=m.Welcome(
        instance_id=new_id("ins_"), instance_secret=new_secret(), epoch=5, capacity=0, drain=False,
        active_leases=0, lease_ttl_ms=30000, start_timeout_ms=30000, limits=m.ServerLimits(), server_time=NOW))
    return p.ClientProtocol(welcome, hello, strict=True)


def _ack(proto: p.ClientProtocol, request, *, command=None, revision=None, lease_revision=None, epoch=5,
         duplicate=False, lease=True, cancel=None, state="RUNNING", task_id=None, ack_id="s-2") -> str:
    receipt = m.Receipt(command=command or request.TYPE, task_id=request.task_id, lease_id=request.lease_id,
                        revision=revision or request.revision, committed_at=NOW, duplicate=duplicate)
    held = m.Lease(lease_id=request.lease_id, task_id=task_id or request.task_id,
                   revision=lease_revision or request.revision + 1, epoch=epoch, state=state, expires_at=LATER,
                   cancel_requested_at=cancel) if lease else None
    return encode(m.Ack(id=ack_id, session_id=proto.session_id, reply_to=request.id,
                        body=m.CommandResult(receipt, held)))


def _both(cls: type, frame_of) -> tuple[p.Event, p.Event, bool]:
    """The event for one ack, with the request pending as a lease record (fast) and as a message (reference)."""
    lease = _lease()
    fast = _session()
    request_id, _ = fast.lease_request(cls, lease, 4, f.PLAIN_TAIL)
    request = fast._pending[request_id]
    frame = frame_of(fast, request)
    took_fast = f.decode_command_ack(frame.encode("utf-8", "surrogatepass"), fast._pending, fast.session_id, fast.epoch,
                                     str(fast.epoch)) is not None
    fast_event = fast.receive(frame)
    reference = _session()
    reference.session_id = fast.session_id
    message = reference.request(cls, task_id=lease.task_id, lease_id=lease.lease_id, lease_secret=lease.lease_secret,
                                revision=4, **({"status": "SUCCEEDED", "result": "{}"} if cls is m.TaskFinish else {}))
    reference._pending[request_id] = reference._pending.pop(message.id)
    object.__setattr__(message, "id", request_id)
    return fast_event, reference.receive(frame), took_fast


def _same(a: p.Event, b: p.Event) -> None:
    assert type(a) is type(b)
    if isinstance(a, p.Answered):
        assert a.body == b.body and a.request.id == b.request.id
    elif isinstance(a, (p.Broken, p.Dropped)):
        assert a.reason == b.reason


def _with_repeated_key(proto, request):
    frame = json.loads(_ack(proto, request))
    text = json.dumps(frame, separators=(",", ":"))
    return text.replace('"duplicate":false', '"duplicate":true,"duplicate":false')


def _with_unknown_field(proto, request):
    frame = json.loads(_ack(proto, request))
    frame["body"]["receipt"]["extra"] = 1
    return json.dumps(frame, separators=(",", ":"))


@pytest.mark.parametrize("cls, frame_of, fast", [
    (m.TaskStart, lambda s, r: _ack(s, r), True),
    (m.TaskRenew, lambda s, r: _ack(s, r, cancel=NOW), True),
    (m.TaskStart, lambda s, r: _ack(s, r, duplicate=True), True),
    (m.TaskStart, lambda s, r: _ack(s, r, duplicate=True, lease=False), True),
    (m.TaskFinish, lambda s, r: _ack(s, r, lease=False), True),
    (m.TaskFinish, lambda s, r: _ack(s, r, duplicate=True), True),
    (m.TaskStart, lambda s, r: _ack(s, r, ack_id="a:b"), True),
    (m.TaskStart, lambda s, r: _ack(s, r, lease=False), False),  # a first start grants a lease
    (m.TaskFinish, lambda s, r: _ack(s, r), False),  # a first finish ends it
    (m.TaskStart, lambda s, r: _ack(s, r, command="task.renew"), False),
    (m.TaskStart, lambda s, r: _ack(s, r, revision=9), False),
    (m.TaskStart, lambda s, r: _ack(s, r, lease_revision=4), False),
    (m.TaskStart, lambda s, r: _ack(s, r, lease_revision=3), False),
    (m.TaskStart, lambda s, r: _ack(s, r, epoch=6), False),
    (m.TaskStart, lambda s, r: _ack(s, r, task_id=new_id("tsk_")), False),
    (m.TaskStart, _with_repeated_key, False),
    (m.TaskStart, _with_unknown_field, False),
    (m.TaskStart, lambda s, r: _ack(s, r).replace(s.session_id, new_id("ses_")), False),
    (m.TaskStart, lambda s, r: _ack(s, r).replace('"reply_to":"s', '"reply_to":"x'), False),
    (m.TaskStart, lambda s, r: _ack(s, r).replace('"revision":"5"', '"revision":"05"'), False),
    (m.TaskStart, lambda s, r: _ack(s, r).replace("T12:00:30.123456Z", "T12:00:61.123456Z"), False),
    (m.TaskStart, lambda s, r: _ack(s, r).replace('"state":"RUNNING"', '"state":"DONE"'), False),
    (m.TaskStart, lambda s, r: _ack(s, r).replace('"id":"s-2"', '"id":"-bad"'), False),
])
def test_a_command_ack_gets_the_reference_paths_verdict(cls, frame_of, fast):
    fast_event, reference_event, took_fast = _both(cls, frame_of)
    assert took_fast is fast
    _same(fast_event, reference_event)
    if fast:
        assert isinstance(fast_event, p.Answered)



_MUTATION_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Each lease command with the acks its one-pass reading takes: (duplicate, carries a lease).
_ACK_SHAPES = [(m.TaskStart, False, True), (m.TaskRenew, False, True), (m.TaskStart, True, False),
               (m.TaskFinish, False, False), (m.TaskFinish, True, True)]


@_MUTATION_SETTINGS
@given(st.sampled_from(_ACK_SHAPES), st.booleans(), st.data())
def test_mutated_command_acks_get_the_reference_paths_verdict(shape, textual, data):
    """Random structural and textual mutations of an ack the one-pass reading takes."""
    cls, duplicate, lease = shape

    def frame_of(proto, request):
        text = _ack(proto, request, duplicate=duplicate, lease=lease, cancel=data.draw(st.sampled_from([None, NOW])))
        if textual:
            return cs.mutate_text(text, data.draw)
        return cs.dumps(data.draw(cs.mutated({"ack": lambda: json.loads(text)}))[1])

    fast_event, reference_event, _ = _both(cls, frame_of)
    _same(fast_event, reference_event)

# -- offers: the one-pass reading gives the reference path's verdict -----------------------------
_OFFER_EXAMPLES = {"assign": cs.assign, "assign_minimal": cs.assign_minimal}
#: The sessions an offer may meet: the example's queue with its kind or every kind, keys declared or not.
_OFFER_SESSIONS = [(("invoice.send",), True), (None, True), (("invoice.send",), False), (("other",), True)]


def _offer_session(kinds: tuple[str, ...] | None, keyed: bool, epoch: int = 42) -> p.ClientProtocol:
    hello = m.WorkerHello(id="h1", worker_name="w", subscriptions=(m.Subscription("billing", kinds),),
                          concurrency_keys=keyed)
    welcome = m.WorkerWelcome(id="s-1", session_id=cs.SESSION, reply_to="h1", body=m.Welcome(
        instance_id=cs.INSTANCE, instance_secret=new_secret(), epoch=epoch, capacity=0, drain=False,
        active_leases=0, lease_ttl_ms=30000, start_timeout_ms=30000, limits=m.ServerLimits(), server_time=NOW))
    return p.ClientProtocol(welcome, hello, strict=True)


def _reference_offer(proto: p.ClientProtocol, text: str) -> m.TaskAssign | None:
    """What the reference path offers for ``text`` in ``proto``'s session, or None for any other verdict."""
    try:
        message = decode_server_frame(text, strict=True)
    except ProtocolError:
        return None
    if not isinstance(message, m.TaskAssign) or message.session_id != proto.session_id:
        return None
    return None if proto._check_offer(message) else message


def _offer_agrees(text: str, session: tuple = _OFFER_SESSIONS[0]) -> bool:
    """Assert the one-pass offer is the reference path's; True if it took the frame."""
    proto = _offer_session(*session)
    data = text.encode("utf-8", "surrogatepass")
    fast = f.decode_offer(data, proto.session_id, proto.epoch, proto._epoch_text, proto._kinds,
                          proto.concurrency_keys)
    if fast is None:
        return False
    reference = _reference_offer(proto, text)
    assert reference is not None and fast == reference, (text, fast, reference)
    event = proto.receive(text)
    assert isinstance(event, p.Offered) and event.message == reference
    return True


@pytest.mark.parametrize("name", sorted(_OFFER_EXAMPLES))
def test_every_canonical_offer_takes_the_one_pass_reading(name):
    assert _offer_agrees(cs.dumps(_OFFER_EXAMPLES[name]()))
    assert cs.dumps(_OFFER_EXAMPLES[name]()).encode().startswith(f.OFFER_START)


@pytest.mark.parametrize("session, taken", [
    (_OFFER_SESSIONS[1], True),  # every kind of the queue: the kind is held to its grammar instead
    (_OFFER_SESSIONS[2], False),  # a keyed task, but the session declared no keys
    (_OFFER_SESSIONS[3], False),  # a kind the session did not subscribe to
])
def test_an_offer_is_read_in_one_pass_only_where_the_session_takes_it(session, taken):
    assert _offer_agrees(cs.dumps(cs.assign()), session) is taken
    assert _offer_agrees(cs.dumps(cs.assign_minimal()), session) is (taken or session == _OFFER_SESSIONS[2])


@pytest.mark.parametrize("change", [
    lambda t: t.replace(cs.SESSION, cs.OTHER_SESSION),  # another session's
    lambda t: t.replace('"epoch":"42"', '"epoch":"43"'),  # another epoch
    lambda t: t.replace('"state":"OFFERED"', '"state":"RUNNING"'),
    lambda t: t.replace('"revision":"1"', '"revision":"01"'),
    lambda t: t.replace('"priority":7', '"priority":0'),  # the default is omitted, never sent
    lambda t: t.replace('"priority":7', '"priority":10'),
    lambda t: t.replace('"effect_uncertain":true', '"effect_uncertain":false'),
    lambda t: t.replace(f'"retry_of":"{cs.OTHER_TASK}"', f'"retry_of":"{cs.TASK}"'),
    lambda t: t.replace('"concurrency_token":"1093",', ""),  # a key without its token
    lambda t: t.replace('"attempt":2', '"attempt":0'),
    lambda t: t.replace('"idempotency_key":"invoice-991"', '"idempotency_key":""'),
    lambda t: t.replace('"idempotency_key":"invoice-991"', '"idempotency_key":"a\\u0041"'),  # an escape
    lambda t: t.replace('"created_at":"2026-12-02T12:00:00.000000Z"', '"created_at":"2026-12-02T12:00:61.000000Z"'),
    lambda t: t.replace('"queue":"billing",', '"queue":"billing","queue":"billing",'),  # a repeated key
    lambda t: t.replace('"payload":{', '"payload":{"total":1,'),  # a repeated key inside the payload
    lambda t: t.replace('"payload":{"invoice":991,"total":1.1}', '"payload":{"n":1.0e400}'),
])
def test_an_irregular_offer_goes_to_the_reference_path(change):
    text = change(cs.dumps(cs.assign()))
    assert text != cs.dumps(cs.assign())
    assert not _offer_agrees(text)


_OFFER_SETTINGS = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_OFFER_SETTINGS
@given(cs.mutated(_OFFER_EXAMPLES), st.sampled_from(_OFFER_SESSIONS))
def test_structural_mutations_never_fool_the_offer_reading(case, session):
    _offer_agrees(cs.dumps(case[1]), session)


@_OFFER_SETTINGS
@given(st.sampled_from(sorted(_OFFER_EXAMPLES)), st.sampled_from(_OFFER_SESSIONS), st.data())
def test_textual_mutations_never_fool_the_offer_reading(name, session, data):
    _offer_agrees(cs.mutate_text(cs.dumps(_OFFER_EXAMPLES[name]()), data.draw), session)
