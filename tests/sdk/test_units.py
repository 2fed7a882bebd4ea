"""The SDK's pure parts, without a server: outcome mapping, registry, backoff, session checks."""

from __future__ import annotations

import datetime as dt
import json
import ssl

import anyio
import pytest

from pulse_trio.contract import messages as m
from pulse_trio.contract.encoder import encode
from pulse_trio.contract.grammar import new_id, new_secret
from pulse_trio.sdk import (
    Backoff, PermanentError, Registry, RetryableError, TaskCancelled, TaskContext, UnknownOutcome, Worker,
)
from pulse_trio.sdk import outcome as oc
from pulse_trio.sdk import protocol as p
from pulse_trio.testing import HandlerEnvironment

NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.timezone.utc)


# -- outcome → finish ------------------------------------------------------------------
@pytest.mark.parametrize("exc, cancel_requested, expected", [
    (RetryableError("busy", code="gw.busy"), False, ("FAILED", "gw.busy", True)),
    (PermanentError("bad"), False, ("FAILED", "permanent", False)),
    (UnknownOutcome("timeout"), False, ("UNKNOWN", "unknown_outcome", False)),
    (TaskCancelled("stop"), True, ("CANCELLED", "cancelled", False)),
    (RetryableError("busy"), True, ("CANCELLED", "cancelled", False)),  # never retry a cancelled task
    (PermanentError("bad", code="card.declined"), True, ("FAILED", "card.declined", False)),
    (ValueError("oops"), False, ("FAILED", "unhandled_exception", True)),
    (ValueError("oops"), True, ("CANCELLED", "cancelled", False)),
])
def test_exceptions_map_to_finish(exc, cancel_requested, expected):
    got = oc.from_exception(exc, cancel_requested=cancel_requested)
    assert (got.status, got.error_code, got.retryable) == expected
    assert got.result == "{}"


def test_an_outcomes_message_may_be_any_object():
    """``RetryableError(exc)`` is the usual idiom; None is no message."""
    assert oc.from_exception(RetryableError(ConnectionError("unreachable")), cancel_requested=False).error_message \
        == "unreachable"
    assert oc.from_exception(PermanentError(None), cancel_requested=False).error_message == ""
    assert oc.from_exception(UnknownOutcome(504), cancel_requested=False).error_message == "504"


class _Unreadable(Exception):
    def __str__(self) -> str:
        raise AttributeError("a lazily formatted library exception")


class _HalfMade(PermanentError):
    def __init__(self, why: str) -> None:  # never calls PermanentError.__init__: no message, no code
        self.why = why


def test_an_exception_that_cannot_be_read_still_finishes_its_task():
    """A raising ``__str__``, or an outcome the mapping cannot read, is FAILED ``unhandled_exception``."""
    got = oc.from_exception(_Unreadable(), cancel_requested=False)
    assert (got.status, got.error_code, got.retryable) == ("FAILED", "unhandled_exception", True)
    assert got.error_message.startswith("_Unreadable: ")

    def send(task: TaskContext) -> dict:
        raise _HalfMade("declined")

    finished = anyio.run(HandlerEnvironment(send).run, backend="trio")
    assert (finished.status, finished.error_code, finished.retryable) == ("FAILED", "unhandled_exception", True)
    assert finished.error_message.startswith("_HalfMade: ") and "could not be read" in finished.error_message


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_handlers_own_exit_fails_its_task_but_a_ctrl_c_on_the_loop_goes_on(backend):
    """SystemExit (argparse on bad input) is the task's failure; a KeyboardInterrupt on the loop is the Ctrl-C."""

    async def exits(task: TaskContext) -> dict:
        raise SystemExit(2)

    def interrupted_in_its_thread(task: TaskContext) -> dict:
        raise KeyboardInterrupt  # no signal reaches a worker thread: the handler raised it

    async def interrupted(task: TaskContext) -> dict:
        raise KeyboardInterrupt

    for handler, message in ((exits, "SystemExit: 2"), (interrupted_in_its_thread, "KeyboardInterrupt: ")):
        finished = anyio.run(HandlerEnvironment(handler).run, backend=backend)
        assert (finished.status, finished.error_code, finished.retryable) == ("FAILED", "unhandled_exception", True)
        assert finished.error_message == message
    with pytest.raises(KeyboardInterrupt):
        anyio.run(HandlerEnvironment(interrupted).run, backend=backend)


def test_results_are_canonical_json_and_bounded():
    assert oc.succeeded({"a": 1, "b": [1.5, "x"]}).result == '{"a":1,"b":[1.5,"x"]}'
    assert oc.succeeded(None).result == "{}"  # finish needs a non-null result
    assert oc.succeeded(object()).error_code == oc.INVALID_RESULT
    assert oc.succeeded(float("nan")).error_code == oc.INVALID_RESULT
    assert oc.succeeded("x" * 300_000).error_code == oc.RESULT_TOO_LARGE
    assert oc.from_exception(PermanentError("no", details={"why": 1}), cancel_requested=False).result == '{"why":1}'
    assert len(oc.from_exception(ValueError("\ud800" + "m" * 9000), cancel_requested=False).error_message) == 4096


def test_error_codes_follow_the_grammar():
    with pytest.raises(ValueError):
        RetryableError("x", code="Not-A-Code")


# -- registry ---------------------------------------------------------------------------
def test_registry_subscribes_to_exactly_its_kinds():
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task): ...

    @registry.handler("billing", "invoice.render")  # a def: it runs in a thread, no flag needed
    def render(task): ...

    @registry.handler("mail", "welcome")
    async def welcome(task): ...

    assert registry.subscriptions() == (m.Subscription("billing", ("invoice.render", "invoice.send")),
                                        m.Subscription("mail", ("welcome",)))
    assert registry.get("billing", "invoice.render").sync is True
    with pytest.raises(ValueError):
        registry.add("billing", "invoice.send", send)
    assert registry.get("billing", "invoice.send").sync is False
    assert registry.add("billing", "other", render, sync=True).sync is True  # the old spelling still works
    with pytest.raises(TypeError):
        registry.add("billing", "other2", send, sync=True)  # a flag that contradicts the function
    with pytest.raises(TypeError):
        registry.add("billing", "other3", render, sync=False)
    with pytest.raises(ValueError):
        registry.add("Billing", "x", send)


@pytest.mark.parametrize("url", [
    "ws://127.0.0.1:99999/v1/worker", "ws://[::1/v1/worker", "ws:///v1/worker", "http://127.0.0.1:7380/v1/worker",
], ids=["port-out-of-range", "unclosed-ipv6-bracket", "no-host", "not-a-websocket"])
def test_a_worker_refuses_a_url_no_connect_can_use_when_it_is_made(url):
    """Not at each connect: the reconnect loop would try it forever."""
    registry = Registry()
    registry.add("billing", "invoice.send", lambda task: {})
    with pytest.raises(ValueError) as refused:
        Worker(["ws://127.0.0.1:7380/v1/worker", url], "t", registry)
    assert repr(url) in str(refused.value)


def test_a_worker_refuses_a_url_with_user_info_without_quoting_it():
    """Connecting would send it as Basic beside the token's Bearer: two Authorization headers, refused with 401."""
    registry = Registry()
    registry.add("billing", "invoice.send", lambda task: {})
    with pytest.raises(ValueError, match="user info") as refused:
        Worker("ws://ops:hunter2@127.0.0.1:7380/v1/worker", "t", registry)
    assert "'ws://***@127.0.0.1:7380/v1/worker'" in str(refused.value) and "hunter2" not in str(refused.value)


def test_a_worker_refuses_an_ssl_context_with_a_ws_url():
    """The context was meant for TLS: over ws:// it would go unused and the token out in the clear."""
    registry = Registry()
    registry.add("billing", "invoice.send", lambda task: {})
    context = ssl.create_default_context()
    with pytest.raises(ValueError, match="in the clear") as refused:
        Worker(["wss://pulse.example.com/v1/worker", "WS://pulse.example.com:7380/v1/worker"], "t", registry,
               ssl_context=context)
    assert "'WS://pulse.example.com:7380/v1/worker'" in str(refused.value)
    Worker("wss://pulse.example.com/v1/worker", "t", registry, ssl_context=context)  # what it is for
    Worker("ws://127.0.0.1:7380/v1/worker", "t", registry)  # plain ws:// without one, for development


@pytest.mark.parametrize("token", ["", "pt_secret\r", "pt_secret\n", " pt_secret", "pt_secrét"],
                         ids=["empty", "carriage-return", "line-feed", "leading-blank", "not-ascii"])
def test_a_worker_refuses_a_token_no_handshake_can_carry_without_quoting_it(token):
    registry = Registry()
    registry.add("billing", "invoice.send", lambda task: {})
    with pytest.raises(ValueError) as refused:
        Worker("ws://127.0.0.1:7380/v1/worker", token, registry)
    assert "secr" not in str(refused.value)


@pytest.mark.parametrize("capacity", [2.5, 2.0, True, "2", -1, 10_001])
def test_a_worker_refuses_a_capacity_it_could_not_declare_when_it_is_made(capacity):
    registry = Registry()
    registry.add("billing", "invoice.send", lambda task: {})
    with pytest.raises(ValueError, match="capacity must be an int"):
        Worker("ws://127.0.0.1:7380/v1/worker", "t", registry, capacity=capacity)


@pytest.mark.parametrize("option", ["connect_timeout", "drain_check"])
@pytest.mark.parametrize("seconds", [0, -1, float("nan"), float("inf"), 10 ** 400, 1e10, "10", True],
                         ids=["zero", "negative", "nan", "inf", "past-a-float", "past-a-year", "text", "bool"])
def test_a_worker_refuses_a_timeout_that_is_no_positive_finite_number_when_it_is_made(option, seconds):
    """Not at each connect: a zero connect_timeout fails every connect and reconnects forever, a NaN or a
    text one ended run() with an ExceptionGroup from the reconnect loop, an infinite one never gives up a
    frozen instance for the next URL."""
    registry = Registry()
    registry.add("billing", "invoice.send", lambda task: {})
    with pytest.raises(ValueError, match=f"{option} must be a positive, finite number of seconds"):
        Worker("ws://127.0.0.1:7380/v1/worker", "t", registry, **{option: seconds})


def test_backoff_grows_with_jitter_and_caps():
    backoff = Backoff(initial=0.1, factor=2, maximum=1.0)
    for attempt, ceiling in ((0, 0.1), (1, 0.2), (3, 0.8), (10, 1.0)):
        delays = {backoff.delay(attempt) for _ in range(50)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays) and len(delays) > 1


@pytest.mark.parametrize("options", [dict(initial=0), dict(maximum=0), dict(initial=-1), dict(factor=0.5),
                                     dict(initial=float("nan")), dict(maximum=float("inf")), dict(factor="2"),
                                     dict(initial=True), dict(maximum=True), dict(factor=True),
                                     dict(maximum=10**400)])
def test_a_backoff_that_would_not_back_off_is_refused(options):
    """A zero, shrinking or unreadable delay would reconnect in a tight loop (thousands of connects a second)."""
    with pytest.raises(ValueError, match="Backoff"):
        Backoff(**options)


def test_a_backoff_with_a_huge_factor_stays_at_its_maximum():
    backoff = Backoff(initial=0.1, factor=1e10, maximum=3.0)
    assert 1.5 <= backoff.delay(40) <= 3.0


# -- the session checks -------------------------------------------------------------------
def _session(concurrency_keys: bool = False) -> tuple[p.ClientProtocol, m.WorkerWelcome]:
    hello = m.WorkerHello(id="h1", worker_name="w", subscriptions=(m.Subscription("billing", ("send",)),),
                          concurrency_keys=concurrency_keys)
    welcome = m.WorkerWelcome(id="s-1", session_id=new_id("ses_"), reply_to="h1", body=m.Welcome(
        instance_id=new_id("ins_"), instance_secret=new_secret(), epoch=5, capacity=0, drain=False,
        active_leases=0, lease_ttl_ms=30000, start_timeout_ms=30000, limits=m.ServerLimits(), server_time=NOW))
    assert p.read_welcome(hello, encode(welcome), strict=True) == welcome
    return p.ClientProtocol(welcome, hello, strict=True), welcome


def _start(proto: p.ClientProtocol) -> m.TaskStart:
    return proto.request(m.TaskStart, task_id=new_id("tsk_"), lease_id=new_id("lse_"), lease_secret=new_secret(),
                         revision=1)


def _ack(proto, request, *, revision=None, command="task.start", lease_revision=2, epoch=5):
    receipt = m.Receipt(command=command, task_id=request.task_id, lease_id=request.lease_id,
                        revision=revision or request.revision, committed_at=NOW, duplicate=False)
    lease = m.Lease(lease_id=request.lease_id, task_id=request.task_id, revision=lease_revision, epoch=epoch,
                    state="RUNNING", expires_at=NOW)
    return encode(m.Ack(id="s-2", session_id=proto.session_id, reply_to=request.id,
                        body=m.CommandResult(receipt, lease)))


def test_an_ack_is_matched_to_its_request_and_checked():
    proto, _ = _session()
    start = _start(proto)
    event = proto.receive(_ack(proto, start))
    assert isinstance(event, p.Answered) and event.request is start and event.body.lease.revision == 2
    assert proto.pending() == []
    assert isinstance(proto.receive(_ack(proto, start)), p.Dropped)  # no longer pending


@pytest.mark.parametrize("change", [dict(revision=7), dict(command="task.renew"), dict(lease_revision=1),
                                    dict(epoch=6)])
def test_an_ack_that_does_not_answer_its_request_breaks_the_session(change):
    proto, _ = _session()
    start = _start(proto)
    event = proto.receive(_ack(proto, start, **change))
    assert isinstance(event, p.Broken) and event.request is start


def test_an_ack_body_of_the_wrong_shape_for_the_pending_request_breaks_the_session():
    proto, _ = _session()
    start = _start(proto)
    lease = m.Lease(lease_id=start.lease_id, task_id=start.task_id, revision=2, epoch=5, state="RUNNING",
                    expires_at=NOW)
    frame = encode(m.Ack(id="s-2", session_id=proto.session_id, reply_to=start.id, body=lease))
    event = proto.receive(frame)
    assert isinstance(event, p.Broken) and "task.start" in event.reason


def test_errors_answer_their_request_and_other_sessions_are_ignored():
    proto, _ = _session()
    start = _start(proto)
    error = m.Error(id="s-3", code="lease_expired", message="gone", fatal=False, session_id=proto.session_id,
                    reply_to=start.id)
    event = proto.receive(encode(error))
    assert isinstance(event, p.Refused) and event.error.code == "lease_expired"
    foreign = m.TaskCancel(id="s-4", session_id=new_id("ses_"), task_id=new_id("tsk_"), lease_id=new_id("lse_"),
                           cancel_requested_at=NOW, grace_expires_at=NOW)
    assert isinstance(proto.receive(encode(foreign)), p.Dropped)
    assert isinstance(proto.receive("{not json"), p.Broken)


def test_offers_are_checked_against_the_session():
    def offer(proto, **task):
        task_id = new_id("tsk_")
        fields = dict(task_id=task_id, queue="billing", kind="send", payload="{}", attempt=1, max_attempts=3,
                      idempotency_key=task_id, created_at=NOW, due_at=NOW)
        fields.update(task)
        lease = m.Lease(lease_id=new_id("lse_"), task_id=task_id, revision=1, epoch=5, state="OFFERED",
                        expires_at=NOW, lease_secret=new_secret())
        return encode(m.TaskAssign(id="s-9", session_id=proto.session_id, task=m.AssignedTask(**fields),
                                   lease=lease))

    proto, _ = _session()
    assert isinstance(proto.receive(offer(proto)), p.Offered)
    keyed = dict(concurrency_key="k", concurrency_token=1)
    refused = proto.receive(offer(proto, **keyed))
    assert isinstance(refused, p.Dropped) and refused.offer and "concurrency_keys" in refused.reason
    assert isinstance(proto.receive(offer(proto, kind="other")), p.Dropped)
    declared, _ = _session(concurrency_keys=True)
    assert isinstance(declared.receive(offer(declared, **keyed)), p.Offered)
    text = json.loads(offer(proto))
    text["body"]["task"]["retry_of"] = text["body"]["task"]["task_id"]
    assert isinstance(proto.receive(json.dumps(text)), p.Dropped)


def test_task_context_exposes_the_task_and_stops_once():
    task_id = new_id("tsk_")
    task = m.AssignedTask(task_id=task_id, queue="billing", kind="send", payload='{"n":1.10}', attempt=2,
                          max_attempts=3, idempotency_key="inv-1", created_at=NOW, due_at=NOW,
                          concurrency_key="k", concurrency_token=9, effect_uncertain=True, retry_of=new_id("tsk_"))
    ctx = TaskContext(task, new_id("lse_"))
    assert ctx.payload == {"n": 1.1} and ctx.payload_json == '{"n":1.10}'
    assert (ctx.attempt, ctx.idempotency_key, ctx.concurrency_token, ctx.effect_uncertain) == (2, "inv-1", 9, True)
    ctx.check_cancelled()
    assert ctx._halt("cancel_requested", "operator") and not ctx._halt("lease_lost")
    assert ctx.cancel_requested and ctx.stop_reason == "cancel_requested"
    with pytest.raises(TaskCancelled):
        ctx.check_cancelled()


def test_the_sdk_imports_the_contract_layer_only():
    import subprocess
    import sys

    probe = ("import sys, pulse_trio.sdk; print(sorted(m for m in sys.modules if m.startswith("
             "('pulse_trio.server', 'pulse_trio.store', 'pulse_trio.client', 'pulse_trio.session', 'pymysql'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_refusal_s_warning_names_at_most_so_many_tasks_a_group_and_counts_the_rest():
    """docs/worker.md §11.1: a worker may hold thousands of leases; one log line stays readable."""
    from pulse_trio.sdk.worker import LISTED_TASKS, _listed

    labels = [f"tsk_{n}" for n in range(LISTED_TASKS + 5)]
    assert _listed(labels) == ", ".join(labels[:LISTED_TASKS]) + " and 5 more"
    assert _listed(labels[:3]) == "tsk_0, tsk_1, tsk_2"
