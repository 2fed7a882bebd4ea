"""Generated messages: decode(encode(x)) == x, the text is canonical, the schema agrees.

Strategies build message objects straight from the grammars, so every
field's edge (uint64 max, 6-digit fractions, 128-char labels, exact number
text in results and payloads) reaches the encoder, the decoder and the
JSON Schema.
"""

from __future__ import annotations

import json
from datetime import timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contract_support as s
from pulse_trio.contract import messages as m
from pulse_trio.contract.codec import decode_client_frame, decode_server_frame, encode
from pulse_trio.contract.jsontext import JsonText, utf8_size
from pulse_trio.contract.limits import MAX_RESULT_BYTES
from pulse_trio.contract.scanner import number_problem

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _ulid(n: int) -> str:
    return "".join(CROCKFORD[(n >> (5 * i)) & 31] for i in reversed(range(26)))


def ids(prefix: str) -> st.SearchStrategy[str]:
    return st.integers(0, 2**128 - 1).map(lambda n: prefix + _ulid(n))


message_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}", fullmatch=True)
sessions, instances, tasks, leases = ids("ses_"), ids("ins_"), ids("tsk_"), ids("lse_")
counters = st.one_of(st.integers(1, 2**64 - 1), st.sampled_from([1, 2**64 - 1, 2**63]))
secrets = st.binary(min_size=32, max_size=32).map(
    lambda b: __import__("base64").urlsafe_b64encode(b).rstrip(b"=").decode())
times = st.datetimes(timezones=st.just(timezone.utc))
names = st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,63}", fullmatch=True)
error_codes = st.from_regex(r"[a-z][a-z0-9_.]{0,63}", fullmatch=True)
labels = st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=128)
free_text = lambda most: st.text(st.characters(blacklist_categories=("Cs",)), max_size=most)  # noqa: E731
int32 = lambda low: st.integers(low, 2**31 - 1)  # noqa: E731

# JSON values as text, with number tokens written the many ways JSON allows.
number_tokens = st.from_regex(r"-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?", fullmatch=True).filter(
    lambda t: number_problem(t) is None)
json_leaves = st.one_of(
    st.sampled_from(["null", "true", "false"]), number_tokens,
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=20).map(lambda v: json.dumps(v, ensure_ascii=False)),
)
json_texts = st.recursive(
    json_leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]"),
        st.dictionaries(st.text(max_size=6), inner, max_size=4).map(
            lambda d: "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in d.items()) + "}"),
    ),
    max_leaves=12,
)
results = json_texts.filter(lambda t: t != "null").map(lambda t: JsonText.parse(t, max_depth=30))
payloads = json_texts.map(lambda t: JsonText.parse(t, max_depth=29))


@st.composite
def finishes(draw) -> m.TaskFinish:
    status = draw(st.sampled_from(["SUCCEEDED", "FAILED", "UNKNOWN", "CANCELLED"]))
    return m.TaskFinish(
        id=draw(message_ids), session_id=draw(sessions), task_id=draw(tasks), lease_id=draw(leases),
        lease_secret=draw(secrets), revision=draw(counters), status=status, result=draw(results),
        error_code="" if status == "SUCCEEDED" else draw(error_codes),
        error_message=draw(free_text(4096)),
        retryable=draw(st.booleans()) if status == "FAILED" else False,
    )


subscriptions = st.builds(m.Subscription, queue=names,
                          kinds=st.none() | st.lists(names, min_size=1, max_size=5, unique=True).map(tuple))
hellos = st.builds(
    m.WorkerHello, id=message_ids, worker_name=labels,
    subscriptions=st.lists(subscriptions, min_size=1, max_size=5, unique_by=lambda x: x.queue).map(tuple),
    cancellation_notifications=st.booleans(), concurrency_keys=st.booleans(),
    client=st.none() | st.builds(m.ClientInfo, name=labels, version=labels),
)
capacities = st.builds(m.WorkerCapacity, id=message_ids, session_id=sessions, sequence=counters,
                       capacity=st.integers(0, 10_000), drain=st.booleans())
resumes = st.builds(m.WorkerResume, id=message_ids, session_id=sessions, instance_id=instances,
                    instance_secret=secrets, task_id=tasks, lease_id=leases, lease_secret=secrets)
commands = st.one_of(*(
    st.builds(cls, id=message_ids, session_id=sessions, task_id=tasks, lease_id=leases, lease_secret=secrets,
              revision=counters)
    for cls in (m.TaskStart, m.TaskRenew)
))
CLIENT_MESSAGES = st.one_of(hellos, capacities, resumes, commands, finishes())


def welcomes(secret: bool) -> st.SearchStrategy[m.Welcome]:
    return st.builds(
        m.Welcome, instance_id=instances, epoch=counters, capacity=st.integers(0, 10_000), drain=st.booleans(),
        active_leases=int32(0), lease_ttl_ms=int32(1), start_timeout_ms=int32(1),
        limits=st.builds(m.ServerLimits, max_frame_bytes=int32(1), max_result_bytes=int32(1)),
        server_time=times, instance_secret=secrets if secret else st.none(), sequence=st.none() | counters,
    )


def lease_values(secret: bool, state=st.sampled_from(["OFFERED", "RUNNING"]), task_id=tasks):
    return st.builds(m.Lease, lease_id=leases, task_id=task_id, revision=counters, epoch=counters, state=state,
                     expires_at=times, lease_secret=secrets if secret else st.none(),
                     cancel_requested_at=st.none() | times)


command_results = st.builds(
    m.CommandResult,
    receipt=st.builds(m.Receipt, command=st.sampled_from(sorted(m.LEASE_COMMANDS)), task_id=tasks, lease_id=leases,
                      revision=counters, committed_at=times, duplicate=st.booleans()),
    lease=st.none() | lease_values(False),
)


@st.composite
def assigns(draw) -> m.TaskAssign:
    task_id = draw(tasks)
    keyed = draw(st.booleans())
    task = m.AssignedTask(
        task_id=task_id, queue=draw(names), kind=draw(names), payload=draw(payloads),
        attempt=draw(int32(1)), max_attempts=draw(int32(1)), idempotency_key=draw(free_text(255).filter(bool)),
        created_at=draw(times), due_at=draw(times), priority=draw(st.integers(0, 9)),
        concurrency_key=draw(st.from_regex(r"[!-~]{1,128}", fullmatch=True)) if keyed else None,
        concurrency_token=draw(counters) if keyed else None, effect_uncertain=draw(st.booleans()),
        retry_of=draw(st.none() | tasks.filter(lambda t: t != task_id)),
    )
    lease = draw(lease_values(True, state=st.just("OFFERED"), task_id=st.just(task_id)))
    return m.TaskAssign(id=draw(message_ids), session_id=draw(sessions), task=task, lease=lease)


SERVER_MESSAGES = st.one_of(
    st.builds(m.WorkerWelcome, id=message_ids, session_id=sessions, reply_to=message_ids, body=welcomes(True)),
    st.builds(m.Ack, id=message_ids, session_id=sessions, reply_to=message_ids,
              body=st.one_of(welcomes(False), lease_values(False), command_results)),
    assigns(),
    st.builds(m.TaskCancel, id=message_ids, session_id=sessions, task_id=tasks, lease_id=leases,
              cancel_requested_at=times, grace_expires_at=times, reason=st.none() | free_text(1024)),
    st.builds(m.Error, id=message_ids, code=error_codes, message=free_text(4096), fatal=st.booleans(),
              retry_after_ms=st.none() | int32(0), session_id=st.none() | sessions,
              reply_to=st.none() | message_ids),
)


def _check(message, decode, direction: str) -> None:
    text = encode(message)
    assert decode(text) == message
    assert encode(decode(text)) == text  # one canonical text per message
    assert s.validator(s.direction_def(direction)).is_valid(json.loads(text))


@SETTINGS
@given(CLIENT_MESSAGES)
def test_client_messages_round_trip_and_satisfy_the_schema(message) -> None:
    _check(message, decode_client_frame, "client")


@SETTINGS
@given(SERVER_MESSAGES)
def test_server_messages_round_trip_and_satisfy_the_schema(message) -> None:
    _check(message, decode_server_frame, "server")


@SETTINGS
@given(finishes())
def test_result_text_survives_exactly(message: m.TaskFinish) -> None:
    decoded = decode_client_frame(encode(message))
    assert decoded.result == message.result and utf8_size(decoded.result) <= MAX_RESULT_BYTES


@SETTINGS
@given(st.one_of(welcomes(False), lease_values(False), command_results), message_ids)
def test_ack_bodies_decode_as_the_pending_request_expects(body, reply_to: str) -> None:
    ack = m.Ack(id="s-1", session_id=s.SESSION, reply_to=reply_to, body=body)
    request = next(t for t, shape in m.ACK_BODY_FOR.items() if isinstance(body, shape))
    assert decode_server_frame(encode(ack), ack_for=request) == ack
