"""``Client`` and ``AsyncClient`` against a real serve: every test runs on both (parametrised, not copied).

The blocking ``Client`` is called from these Trio tests through worker
threads (:class:`InThread`), so both clients offer the tests the same
awaitable surface; what they send and what they make of the answers is
the shared sans-IO code of ``pulse_trio.producer.calls``.
"""

from __future__ import annotations

import datetime as dt
import functools
import pickle
import time
from decimal import Decimal
from typing import Any

import httpx
import pytest
import trio

from pulse_trio.client import ranges
from pulse_trio.client.producer import InvalidRequest
from pulse_trio.client.schedules import ScheduleNotFound
from pulse_trio.contract.limits import MAX_PAYLOAD_BYTES
from pulse_trio.producer import (
    AsyncClient, Client, ClientError, RequestRefused, TaskCancelled, TaskFailed, TaskHandle, TaskNotFound,
    TaskOutcomeError, TaskUnknown, WaitTimeout, task,
)
from pulse_trio.schedule_timing import InvalidField

SOME_TASK = "tsk_01M8VZMC9N9WQ7HZY3RZQQCE2A"


async def _listen(nursery: trio.Nursery, handler) -> str:
    """``handler`` serving each connection to a new loopback port, in ``nursery``; the port's base URL."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    nursery.start_soon(trio.serve_listeners, handler, listeners)
    return f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"


async def _close(*clients: Any) -> None:
    """Close each client, the async ones awaited."""
    for raw in clients:
        if isinstance(raw, AsyncClient):
            await raw.aclose()
        else:
            raw.close()


class InThread:
    """A blocking client (or handle) whose calls run in a worker thread: awaitable, like the async one."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value):
            return value

        async def call(*args: Any, **kwargs: Any) -> Any:
            out = await trio.to_thread.run_sync(functools.partial(value, *args, **kwargs))
            if isinstance(out, TaskHandle):
                return InThread(out)
            if isinstance(out, list) and out and isinstance(out[0], TaskHandle):
                return [InThread(h) for h in out]
            return out

        return call


@pytest.fixture(params=["async", "sync"])
def connect(request, service):
    """``producer = await connect(token)``: a client of the kind the test is parametrised with."""
    opened: list[Any] = []

    async def open_(token: str) -> Any:
        url = f"http://127.0.0.1:{service.http_port}"
        client = AsyncClient(url, token) if request.param == "async" else Client(url, token)
        opened.append(client)
        return client if request.param == "async" else InThread(client)

    yield open_
    for client in opened:
        if isinstance(client, Client):
            client.close()


@pytest.fixture
async def producer(connect, tokens):
    client = await connect(tokens["producer"])
    yield client
    if isinstance(client, AsyncClient):
        await client.aclose()


async def test_submit_get_list_and_the_idempotency_key(producer):
    handle = await producer.submit("billing", "invoice.send", {"invoice": 991}, idempotency_key="inv-991",
                                   priority=5, delay=dt.timedelta(seconds=0))
    assert handle.created is True and handle.state == "READY" and handle.task_id.startswith("tsk_")
    view = await producer.get(handle.task_id)
    assert view["payload"] == {"invoice": 991} and view["priority"] == 5 and view["idempotency_key"] == "inv-991"
    again = await producer.submit("billing", "invoice.send", {"invoice": 991}, idempotency_key="inv-991")
    assert again.task_id == handle.task_id and again.created is False
    page = await producer.list(queue="billing", state="READY", limit=10)
    assert [t["task_id"] for t in page["tasks"]] == [handle.task_id] and page["next"] is None


async def test_result_returns_what_the_handler_returned(producer, tokens, open_worker, nursery):
    handle = await producer.submit("billing", "invoice.send", {"invoice": 1})

    async def work() -> None:
        worker = await open_worker(tokens["worker"], "billing")
        await worker.run_one({"sent": True, "amount": 12.5})

    nursery.start_soon(work)
    assert await handle.result(timeout=20) == {"sent": True, "amount": 12.5}
    assert await producer.wait(handle.task_id, 0) == {"sent": True, "amount": 12.5}  # ended: no waiting


async def test_result_raises_the_typed_error_of_a_failed_task(producer, tokens, open_worker, nursery):
    handle = await producer.submit("billing", "invoice.send", max_attempts=1)

    async def work() -> None:
        worker = await open_worker(tokens["worker"], "billing")
        await worker.run_one({}, "FAILED", error_code="invoice.malformed", error_message="no invoice",
                             retryable=False)

    nursery.start_soon(work)
    with pytest.raises(TaskFailed) as failed:
        await handle.result(timeout=20)
    assert failed.value.error_code == "invoice.malformed" and failed.value.task["state"] == "FAILED"


async def test_a_granted_producer_cancels_and_the_wait_raises_cancelled(connect, token_factory):
    client = await connect(token_factory("producer", ("billing",), allow=("cancel", "retry")))
    handle = await client.submit("billing", "invoice.send")
    cancelled = await client.cancel(handle.task_id, reason="order voided")
    assert cancelled["state"] == "CANCELLED" and cancelled["cancel_changed"] is True
    with pytest.raises(TaskCancelled):
        await handle.result(timeout=5)
    retried = await client.retry(handle.task_id)
    assert retried["retry_of"] == handle.task_id and retried["created"] is True
    if isinstance(client, AsyncClient):
        await client.aclose()


async def test_a_wait_that_runs_out_raises_wait_timeout(producer):
    handle = await producer.submit("billing", "invoice.send")
    with pytest.raises(WaitTimeout) as timed_out:
        await handle.result(timeout=0.4)
    assert timed_out.value.task["state"] == "READY" and isinstance(timed_out.value, TimeoutError)


async def test_submit_many_is_all_or_nothing_with_each_refusal_named(producer):
    handles = await producer.submit_many([task("billing", "a", {"n": 1}), task("billing", "b", priority=2)])
    assert [h.created for h in handles] == [True, True]
    assert (await producer.get(handles[1].task_id))["priority"] == 2
    with pytest.raises(RequestRefused) as refused:
        await producer.submit_many([task("billing", "a"), task("billing", "a", priority=99), task("mail", "a")])
    assert refused.value.status == 403 and refused.value.code == "forbidden"
    assert [(i["index"], i["code"], i["field"]) for i in refused.value.items] == [
        (1, "invalid_request", "priority"), (2, "forbidden", "queue")]
    assert len((await producer.list())["tasks"]) == 2


@pytest.mark.parametrize("bad", ["not a task", 42, None])
async def test_submit_many_a_task_that_is_not_an_object_gets_the_apis_refusal(producer, bad):
    """The client judges nothing the API judges: the item travels and comes back refused, ``field`` null."""
    with pytest.raises(RequestRefused) as refused:
        await producer.submit_many([task("billing", "a"), bad])
    assert refused.value.status == 400 and refused.value.code == "invalid_request"
    assert [(i["index"], i["field"]) for i in refused.value.items] == [(1, None)]
    assert (await producer.list())["tasks"] == []


BAD_CALLS = [
    ("submit", ("billing", "k"), {"priority": 99}, "invalid_request"),
    ("submit", ("billing", "k"), {"colour": "red"}, "invalid_request"),
    ("submit", ("Bad Queue", "k"), {}, "invalid_request"),
    ("submit", ("billing", "k", object()), {}, "invalid_request"),
    ("submit", ("billing", "k", float("nan")), {}, "invalid_request"),
    ("submit", ("billing", "k", "x" * MAX_PAYLOAD_BYTES), {}, "payload_too_large"),
    ("submit", ("billing", "k"), {"due_at": dt.datetime(2030, 1, 1)}, "invalid_request"),
    ("submit", ("billing", "k"), {"due_at": dt.datetime(9999, 12, 31, 23, tzinfo=dt.timezone(dt.timedelta(hours=-5)))},
     "invalid_request"),  # in UTC, year 10000: no RFC 3339 text for the API
    ("submit", ("billing", "k"), {"delay": 1, "due_at": dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)},
     "invalid_request"),
    ("submit", ("mail", "k"), {}, "forbidden"),
    ("submit_many", ([],), {}, "invalid_request"),
    ("get", ("tsk_01M8VZMC9N9WQ7HZY3RZQQCE2A",), {}, "task_not_found"),
    ("get", ("../../v1/workers",), {}, "task_not_found"),
    ("get", (42,), {}, "task_not_found"),
    ("list", (), {"state": "NOPE"}, "invalid_request"),
    ("list", (), {"limit": 0}, "invalid_request"),
    ("list", (), {"queue": "mail"}, "forbidden"),
    ("cancel", ("tsk_01M8VZMC9N9WQ7HZY3RZQQCE2A",), {}, "forbidden"),  # a producer without the grant
    ("retry", ("tsk_01M8VZMC9N9WQ7HZY3RZQQCE2A",), {}, "forbidden"),
    ("wait", ("tsk_01M8VZMC9N9WQ7HZY3RZQQCE2A", 1), {}, "task_not_found"),
    ("wait", ("tsk_01M8VZMC9N9WQ7HZY3RZQQCE2A", "soon"), {}, "invalid_request"),
    ("wait", ("tsk_01M8VZMC9N9WQ7HZY3RZQQCE2A", True), {}, "invalid_request"),  # not read as 1 s
    ("wait", ("tsk_01M8VZMC9N9WQ7HZY3RZQQCE2A", 10**400), {}, "task_not_found"),  # no limit, not OverflowError
]


@pytest.mark.parametrize(("method", "args", "kwargs", "code"), BAD_CALLS,
                         ids=[f"{m}-{i}" for i, (m, *_rest) in enumerate(BAD_CALLS)])
async def test_bad_input_gets_the_apis_codes(producer, method, args, kwargs, code):
    with pytest.raises(ClientError) as refused:
        await getattr(producer, method)(*args, **kwargs)
    assert refused.value.code == code, refused.value
    if code == "task_not_found":
        assert isinstance(refused.value, TaskNotFound)


UNSENDABLE = [
    ("submit", ("billing", "k"), {"due_at": dt.date(2030, 1, 1)}, "due_at"),  # a date, not a datetime
    ("submit", ("billing", "k"), {"priority": Decimal(3)}, "priority"),  # as a database row gives it
    ("submit", ("billing", "k"), {"idempotency_key": "inv-\ud800"}, "idempotency_key"),  # no UTF-8 holds it
    ("submit", ("billing", "k", {"invoice": Decimal(1)}), {}, "payload"),
    ("submit_many", ([task("billing", "a"), task("billing", "b", delay=Decimal(5))],), {}, "delay"),
    ("cancel", (SOME_TASK,), {"reason": "dup-\ud800"}, "reason"),
    ("list", (), {"idempotency_key": "inv-\ud800"}, "idempotency_key"),  # a query parameter: no URL holds it
    ("list", (), {"queue": "bill\ud800"}, "queue"),
]


@pytest.mark.parametrize(("method", "args", "kwargs", "field"), UNSENDABLE,
                         ids=[f"{m}-{field}" for m, _a, _k, field in UNSENDABLE])
async def test_a_value_that_cannot_be_sent_is_refused_naming_its_own_field(producer, method, args, kwargs, field):
    """Refused before it is sent, as the direct client refuses it: ``invalid_request`` naming the field at
    fault, not the payload (which may be fine, or not given at all), nor httpx's UnicodeEncodeError."""
    with pytest.raises(InvalidRequest) as refused:
        await getattr(producer, method)(*args, **kwargs)
    assert refused.value.field == field and refused.value.message.startswith(
        (field, f"task 1: {field}")), refused.value.message
    assert (await producer.list())["tasks"] == []


async def test_a_bad_token_is_unauthenticated_and_no_token_is_refused_at_once(connect, service):
    client = await connect("pt_not-a-real-token")
    with pytest.raises(RequestRefused) as refused:
        await client.get("tsk_01M8VZMC9N9WQ7HZY3RZQQCE2A")
    assert refused.value.status == 401 and refused.value.code == "unauthenticated"
    with pytest.raises(ValueError):
        Client(f"http://127.0.0.1:{service.http_port}", "")



@pytest.mark.parametrize("line_end", ["\n", "\r\n"], ids=["lf", "crlf"])
async def test_a_token_read_with_its_line_end_is_refused_without_being_shown(connect, tokens, line_end):
    """``Client(url, open(path).read())``: no header carries the line end, and httpx's refusal of the
    header would quote the secret; the client refuses the token when it is made, in words that do not
    (docs/worker.md §12.1)."""
    token = tokens["producer"]
    with pytest.raises(ValueError) as refused:
        await (await connect(token + line_end)).get(SOME_TASK)
    assert token[3:] not in str(refused.value) and "line end" in str(refused.value)

@pytest.mark.parametrize("kind", ["async", "sync"])
@pytest.mark.parametrize("seconds", [0, -1, float("nan"), float("inf"), 10 ** 400, 1e10, "10", True, None,
                                     httpx.Timeout(5.0, read=None), httpx.Timeout(5.0, connect=0)],
                         ids=["zero", "negative", "nan", "inf", "past-a-float", "past-a-year", "text", "bool", "none",
                              "httpx-read-none", "httpx-connect-zero"])
async def test_a_client_refuses_a_timeout_that_is_no_positive_finite_number_when_it_is_made(kind, seconds):
    """As a Worker's connect_timeout is: httpx took any of these and failed each request later (a zero one
    at once, a text one with a TypeError from deep inside, the blocking client's 1e10 s with an
    OverflowError from the socket), or, for None or NaN, let a request to a service that never answers hang
    for ever."""
    make = AsyncClient if kind == "async" else Client
    with pytest.raises(ValueError, match="timeout(.[a-z]+)? must be a positive, finite number of seconds"):
        make("http://127.0.0.1:7381", "pt_any", timeout=seconds)


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_client_takes_httpx_s_own_timeout_with_every_step_bounded(kind, service, tokens):
    """A short connect beside a longer read is what ``httpx.Timeout`` is for; the clients pass it on."""
    raw = (AsyncClient if kind == "async" else Client)(
        f"http://127.0.0.1:{service.http_port}", tokens["producer"], timeout=httpx.Timeout(5.0, connect=1.0))
    try:
        client = raw if kind == "async" else InThread(raw)
        assert (await client.submit("billing", "invoice.send", {})).created is True
        assert raw._http.timeout == httpx.Timeout(5.0, connect=1.0)
    finally:
        await _close(raw)


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_the_clients_timeout_bounds_each_request_but_not_a_waits_long_poll(kind, service, tokens, nursery):
    """``timeout=`` is httpx's for each request (connect, pool, each write, each read): a service that accepts
    and never answers fails a get after it, while a wait plans its own long-polls and ends at its own timeout."""
    async def hold(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()  # read nothing, answer nothing

    address = await _listen(nursery, hold)
    make = AsyncClient if kind == "async" else Client
    silent = make(address, "pt_any", timeout=0.5)
    real = make(f"http://127.0.0.1:{service.http_port}", tokens["producer"], timeout=0.5)
    try:
        client, waiting = (silent, real) if kind == "async" else (InThread(silent), InThread(real))
        started = time.monotonic()
        with pytest.raises(httpx.ReadTimeout), trio.fail_after(5):
            await client.get(SOME_TASK)
        assert time.monotonic() - started < 2, f"{time.monotonic() - started:.1f} s"
        handle = await waiting.submit("billing", "invoice.send", {})  # no worker: it never ends
        started = time.monotonic()
        with pytest.raises(WaitTimeout) as timed_out, trio.fail_after(10):
            await waiting.wait(handle.task_id, timeout=2.0)
        assert time.monotonic() - started >= 1.9, f"{time.monotonic() - started:.1f} s"
        # Ended by the service's answer at the wait's own deadline, not by polls cut at the client's 0.5 s
        # (each of which would have failed as a transport error and been asked again until the deadline).
        assert timed_out.value.__cause__ is None and timed_out.value.task["state"] == "READY", timed_out.value
    finally:
        await _close(silent, real)


async def test_requests_reuse_one_connection(producer):
    for _ in range(5):
        await producer.list()
    target = producer._target if isinstance(producer, InThread) else producer
    pool = target._http._transport._pool
    assert len(pool.connections) == 1


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_wait_outlives_a_restart_of_serve(db, token_factory, kind, nursery):
    """The serve process stops mid-wait and starts again on the same ports: the wait goes on and sees the end."""
    import trio_websocket

    from http_support import RawWorker
    from pulse_trio.serve_process import ServeProcess

    producer_token, worker_token = token_factory("producer"), token_factory("worker")
    first = await trio.to_thread.run_sync(ServeProcess(db).start)
    second = ServeProcess(db, worker_port=first.worker_port, http_port=first.http_port)
    raw = AsyncClient(first.http_url, producer_token) if kind == "async" else Client(first.http_url, producer_token)
    client = raw if kind == "async" else InThread(raw)
    results: list[Any] = []
    try:
        handle = await client.submit("billing", "invoice.send")

        async def wait() -> None:
            results.append(await handle.result(timeout=60))

        nursery.start_soon(wait)
        await trio.sleep(0.5)
        await trio.to_thread.run_sync(first.stop)
        await trio.sleep(1.5)  # the wait finds no service and asks again
        await trio.to_thread.run_sync(second.start)
        ws = await trio_websocket.connect_websocket_url(
            nursery, second.worker_url, subprotocols=["pulse.worker.v1"],
            extra_headers=[(b"authorization", f"Bearer {worker_token}".encode())])
        worker = RawWorker(ws)
        await worker.register("billing")
        await worker.run_one("sent after the restart")
        with trio.fail_after(15):
            while not results:
                await trio.sleep(0.02)
        assert results == ["sent after the restart"]
        await ws.aclose()
    finally:
        await trio.to_thread.run_sync(second.stop)
        await trio.to_thread.run_sync(first.stop)
        await _close(raw)


async def test_parked_waits_do_not_starve_the_shared_clients_other_calls(tokens, service):
    """One client shared by an app (worker.md §12.1): a hundred handles parked in ``result()`` each hold a
    connection for their long-poll, and a submit beside them still goes through at once."""
    async with AsyncClient(f"http://127.0.0.1:{service.http_port}", tokens["producer"]) as producer:
        waiting = await producer.submit("billing", "invoice.send")
        async with trio.open_nursery() as nursery:
            for _ in range(100):
                nursery.start_soon(waiting.result, 25)  # cancelled below, long before it runs out
            pool = producer._http._transport._pool  # read to know every long-poll is out, nothing changed
            with trio.fail_after(10):
                while sum(not c.is_idle() for c in pool.connections) < 100:
                    await trio.sleep(0.05)
            with trio.fail_after(5):
                assert (await producer.submit("billing", "invoice.send", {"n": 1})).created is True
            nursery.cancel_scope.cancel()


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _timed_wait(kind: str, url: str, timeout: float) -> tuple[BaseException | None, float]:
    """What ``wait(SOME_TASK, timeout)`` raised on a client of ``kind`` talking to ``url``, and how long it took."""
    raw = AsyncClient(url, "pt_any") if kind == "async" else Client(url, "pt_any")
    client = raw if kind == "async" else InThread(raw)
    started = time.monotonic()
    try:
        await client.wait(SOME_TASK, timeout=timeout)
    except Exception as exc:  # noqa: BLE001 (the test judges what it was)
        return exc, time.monotonic() - started
    finally:
        await _close(raw)
    return None, time.monotonic() - started


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_wait_whose_service_stays_away_ends_at_its_timeout_as_a_timeout(kind):
    """Not httpx's ConnectError: a wait asks again every second until its own timeout (the last pause cut
    short to end there), and then it is a WaitTimeout."""
    raised, took = await _timed_wait(kind, f"http://127.0.0.1:{_closed_port()}", 1.5)
    assert isinstance(raised, WaitTimeout) and took < 1.9, (type(raised), raised, f"{took:.2f} s")
    assert raised.task == {"task_id": SOME_TASK, "state": None}
    assert isinstance(raised.__cause__, httpx.ConnectError)


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_wait_on_a_service_that_accepts_but_never_answers_ends_near_its_timeout(kind, nursery):
    """A frozen or partitioned serve: the long-poll's read timeout is bounded by the wait's own timeout."""
    async def hold(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()  # read nothing, answer nothing

    address = await _listen(nursery, hold)
    with trio.fail_after(20):
        raised, took = await _timed_wait(kind, address, 1)
    assert isinstance(raised, WaitTimeout) and took < 3, (type(raised), raised, f"{took:.1f} s")
    assert isinstance(raised.__cause__, httpx.ReadTimeout)


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_wait_whose_service_goes_away_after_answering_times_out_with_the_task_last_seen(kind, service,
                                                                                              tokens, nursery):
    """worker.md §12.1: ``WaitTimeout`` carries the task as last seen. A stopping serve answers its long-poll
    with the task as it is, then nothing listens: the wait asks again until its timeout, and its
    WaitTimeout holds that view (not just the id), chained from the last failure."""
    from http_support import Http

    url = f"http://127.0.0.1:{service.http_port}"
    raw = AsyncClient(url, tokens["producer"]) if kind == "async" else Client(url, tokens["producer"])
    client = raw if kind == "async" else InThread(raw)
    raised: list[BaseException] = []
    try:
        handle = await client.submit("billing", "invoice.send", {"invoice": 7})

        async def wait() -> None:
            try:
                await client.wait(handle.task_id, timeout=2.0)
            except Exception as exc:  # noqa: BLE001 (the test judges what it was)
                raised.append(exc)

        nursery.start_soon(wait)
        http = Http(service.http_port)
        with trio.fail_after(10):  # the long-poll is parked on the server before the stop
            while "pulse_http_outcome_waiters 1\n" not in (await http.get("/metrics")).body.decode():
                await trio.sleep(0.02)
        service.stop()
        with trio.fail_after(10):
            while not raised:
                await trio.sleep(0.02)
        timed_out = raised[0]
        assert isinstance(timed_out, WaitTimeout), repr(timed_out)
        assert timed_out.task["task_id"] == handle.task_id and timed_out.task["state"] == "READY", timed_out.task
        assert timed_out.task["payload"] == {"invoice": 7} and timed_out.task["done"] is False
        assert isinstance(timed_out.__cause__, httpx.TransportError), repr(timed_out.__cause__)
    finally:
        await _close(raw)


def _submit_in_child(url: str, token: str) -> str:
    with Client(url, token) as producer:
        return producer.submit("billing", "invoice.send", priority=99).task_id


async def test_a_refusal_raised_in_a_process_pool_reaches_the_parent_as_itself(service, tokens):
    """A blocking Client fanned out over a ProcessPoolExecutor: the API's 400 comes back pickled, as itself
    (not as BrokenProcessPool, which would also end the pool for every other submit)."""
    import concurrent.futures
    import multiprocessing

    def run() -> BaseException | str:
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
            try:
                return pool.submit(_submit_in_child, f"http://127.0.0.1:{service.http_port}",
                                   tokens["producer"]).result(timeout=60)
            except BaseException as exc:  # noqa: BLE001 (the test judges what it was)
                return exc

    raised = await trio.to_thread.run_sync(run)
    assert isinstance(raised, RequestRefused), (type(raised), raised)
    assert (raised.status, raised.code) == (400, "invalid_request")


def _assert_pickles_as_itself(error: BaseException) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error) and back.__dict__ == error.__dict__, error


async def test_the_clients_errors_from_real_calls_survive_pickling(producer):
    handle = await producer.submit("billing", "invoice.send")
    for call, error in ((producer.submit("billing", "k", priority=99), RequestRefused),
                        (producer.get(SOME_TASK), TaskNotFound), (handle.result(timeout=0), WaitTimeout)):
        with pytest.raises(error) as raised:
            await call
        _assert_pickles_as_itself(raised.value)


_VIEW = {"task_id": SOME_TASK, "state": "FAILED", "outcome": {"error_code": "invoice.malformed", "error_message": "x"}}
EVERY_ERROR = [
    ClientError("setting_conflict", "node_lapse is too short", "node_lapse"), InvalidRequest("bad", "priority"),
    TaskNotFound(SOME_TASK), ScheduleNotFound("nightly"), ranges.OutOfRange("limit must be 1..1000"),
    InvalidField("cron", "not a cron expression"), RequestRefused(400, "invalid_request", "2 of 3", [{"index": 1}]),
    TaskFailed(_VIEW), TaskUnknown(_VIEW), TaskCancelled(_VIEW),
    WaitTimeout({"task_id": SOME_TASK, "state": "READY"}, 2),
]


def test_every_error_of_the_clients_survives_pickling():
    """Each public error class of pulse_trio.client and pulse_trio.producer, constructed as the code does."""
    import pulse_trio.client
    import pulse_trio.client.producer
    import pulse_trio.client.schedules
    import pulse_trio.producer

    modules = (pulse_trio.client, pulse_trio.client.producer, pulse_trio.client.schedules, ranges, pulse_trio.producer)
    public = {value for module in modules for name, value in vars(module).items()
              if isinstance(value, type) and issubclass(value, BaseException) and value.__module__.startswith(
                  ("pulse_trio.client", "pulse_trio.producer")) and not name.startswith("_")}
    assert public - {TaskOutcomeError} <= {type(error) for error in EVERY_ERROR}  # raised only as its subclasses
    for error in EVERY_ERROR:
        _assert_pickles_as_itself(error)


async def _http_message(stream: trio.abc.Stream) -> bytes:
    """One HTTP/1.1 message off ``stream``: its head and its ``Content-Length`` body (b"" if the stream ends first)."""
    message = b""
    while (end := message.find(b"\r\n\r\n")) < 0 or len(message) < end + 4 + _content_length(message[:end]):
        chunk = await stream.receive_some()
        if not chunk:
            return b""
        message += chunk
    return message


def _content_length(head: bytes) -> int:
    return sum(int(line.split(b":", 1)[1]) for line in head.lower().split(b"\r\n")
               if line.startswith(b"content-length:"))


class TimingOutGateway:
    """A reverse proxy in front of a real serve that gives up on an answer after ``timeout`` s, as HAProxy's
    ``timeout server`` or nginx's ``proxy_read_timeout`` does: it answers 504 with an HTML page instead."""

    PAGE = b"<html><body><h1>504 Gateway Time-out</h1></body></html>\n"

    def __init__(self, upstream_port: int, timeout: float) -> None:
        self.upstream_port, self.timeout = upstream_port, timeout
        self.timeouts = 0

    async def handle(self, client: trio.SocketStream) -> None:
        """One request per connection, as ``option http-server-close`` makes it."""
        async with client:
            request = await _http_message(client)
            if not request:
                return
            answer = b""
            async with await trio.open_tcp_stream("127.0.0.1", self.upstream_port) as upstream:
                await upstream.send_all(request)
                with trio.move_on_after(self.timeout):
                    answer = await _http_message(upstream)
            if not answer:
                self.timeouts += 1
                answer = (b"HTTP/1.1 504 Gateway Time-out\r\ncontent-type: text/html\r\nconnection: close\r\n"
                          b"content-length: %d\r\n\r\n" % len(self.PAGE) + self.PAGE)
            await client.send_all(answer)


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_wait_through_a_gateway_that_times_out_its_long_poll_asks_again(kind, service, tokens,
                                                                                 open_worker, nursery):
    """A load balancer whose server timeout is shorter than a long-poll (operations.md §13's HAProxy has
    one) answers 504 for it: no service answered, so the wait asks again, as after a 503, and sees the end."""
    gateway = TimingOutGateway(service.http_port, timeout=0.5)
    url = await _listen(nursery, gateway.handle)
    raw = AsyncClient(url, tokens["producer"]) if kind == "async" else Client(url, tokens["producer"])
    client = raw if kind == "async" else InThread(raw)
    results: list[Any] = []
    try:
        handle = await client.submit("billing", "invoice.send")

        async def wait() -> None:
            results.append(await handle.result(timeout=20))

        nursery.start_soon(wait)
        with trio.fail_after(5):
            while not gateway.timeouts:
                await trio.sleep(0.02)
        worker = await open_worker(tokens["worker"], "billing")
        await worker.run_one("sent behind the gateway")
        with trio.fail_after(10):
            while not results:
                await trio.sleep(0.02)
        assert results == ["sent behind the gateway"]
    finally:
        await _close(raw)


class IdleClosingGateway:
    """In front of a real serve: keeps a client's connection open after its first answer, and closes it
    unanswered when the next request arrives, as a serve does with a kept-alive connection whose
    ``--http-idle-timeout`` runs out just as the client sends on it (a matter of milliseconds, made certain)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.dropped = 0

    async def handle(self, client: trio.SocketStream) -> None:
        async with client:
            request = await _http_message(client)
            if not request:
                return
            async with await trio.open_tcp_stream("127.0.0.1", self.upstream_port) as upstream:
                await upstream.send_all(request)
                await client.send_all(await _http_message(upstream))
            if await _http_message(client):
                self.dropped += 1


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_request_safe_to_repeat_is_sent_again_when_its_kept_alive_connection_drops(kind, service,
                                                                                            token_factory, nursery):
    """Reads, keyed submits and cancels go out once more on a new connection; a submit without a key is
    not sent twice (it may have been submitted), so it raises httpx's error, as worker.md §12.1 says."""
    gateway = IdleClosingGateway(service.http_port)
    url, token = await _listen(nursery, gateway.handle), token_factory(
        "producer", ("billing",), allow=("cancel",))
    raw = AsyncClient(url, token) if kind == "async" else Client(url, token)
    client = raw if kind == "async" else InThread(raw)
    try:
        first = await client.submit("billing", "invoice.send", idempotency_key="inv-1")  # a new connection
        assert (await client.get(first.task_id))["task_id"] == first.task_id  # each call from here meets a drop
        assert (await client.submit("billing", "invoice.send", idempotency_key="inv-2")).created is True
        assert [h.created for h in await client.submit_many([task("billing", "a", idempotency_key="inv-3")])] == [True]
        assert (await client.cancel(first.task_id))["cancel_changed"] is True
        assert len((await client.list(queue="billing"))["tasks"]) == 3
        with pytest.raises(httpx.RemoteProtocolError):
            await client.submit("billing", "invoice.send")
        assert gateway.dropped == 6
        assert len((await client.list(queue="billing"))["tasks"]) == 3  # nothing submitted twice, nor the keyless one
    finally:
        await _close(raw)


class LateDropGateway:
    """In front of a real serve: the first ``drops`` long-polls of a wait are each held ``after`` s, then their
    connection closed unanswered (an instance that died, a balancer that reset it); every other request
    passes. ``asked`` holds when each long-poll arrived (``time.monotonic``)."""

    def __init__(self, upstream_port: int, after: float, drops: int = 1) -> None:
        self.upstream_port, self.after, self.drops = upstream_port, after, drops
        self.dropped = 0
        self.asked: list[float] = []

    async def handle(self, client: trio.SocketStream) -> None:
        async with client:
            while request := await _http_message(client):
                if b"/outcome?" in request.split(b"\r\n", 1)[0]:
                    self.asked.append(time.monotonic())
                if b"/outcome?" in request.split(b"\r\n", 1)[0] and self.dropped < self.drops:
                    self.dropped += 1
                    await trio.sleep(self.after)
                    return
                async with await trio.open_tcp_stream("127.0.0.1", self.upstream_port) as upstream:
                    await upstream.send_all(request)
                    await client.send_all(await _http_message(upstream))


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_wait_whose_long_poll_drops_late_still_ends_by_its_timeout(kind, service, token_factory, nursery):
    """The drop is answered by a request planned from the deadline left, not the dropped one sent again: the
    wait ends with WaitTimeout at most OVERRUN_S past its timeout, as worker.md §12.1 says."""
    from pulse_trio.producer.calls import OVERRUN_S

    gateway = LateDropGateway(service.http_port, after=1.2)
    url, token = await _listen(nursery, gateway.handle), token_factory("producer", ("billing",))
    raw = AsyncClient(url, token) if kind == "async" else Client(url, token)
    client = raw if kind == "async" else InThread(raw)
    try:
        handle = await client.submit("billing", "invoice.send")  # no worker: it never ends
        started = time.monotonic()
        with pytest.raises(WaitTimeout):
            await client.wait(handle.task_id, timeout=1.5)
        took = time.monotonic() - started
        assert gateway.dropped == 1 and took < 1.5 + OVERRUN_S, took
    finally:
        await _close(raw)


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_wait_asks_again_at_once_after_a_drop_and_after_a_pause_when_it_drops_again(kind, service,
                                                                                          token_factory, nursery):
    """worker.md §12.1: a wait's long-poll whose connection drops is asked again at once (the drop of a
    kept-alive connection the service closed as idle); a drop again is a service away, asked again after
    ``RETRY_PAUSE_S``. Each drop is a real TCP close by a relay in front of a real serve."""
    from pulse_trio.producer.calls import RETRY_PAUSE_S

    gateway = LateDropGateway(service.http_port, after=0.0, drops=2)
    url, token = await _listen(nursery, gateway.handle), token_factory(
        "producer", ("billing",), allow=("cancel",))
    raw = AsyncClient(url, token) if kind == "async" else Client(url, token)
    client = raw if kind == "async" else InThread(raw)
    try:
        handle = await client.submit("billing", "invoice.send")
        await client.cancel(handle.task_id)  # ended: the first long-poll that gets through answers at once
        with pytest.raises(TaskCancelled), trio.fail_after(RETRY_PAUSE_S + 3):
            await client.wait(handle.task_id, timeout=10)
        first, second, third = gateway.asked
        assert second - first < RETRY_PAUSE_S / 2, gateway.asked
        assert third - second >= RETRY_PAUSE_S * 0.9, gateway.asked
    finally:
        await _close(raw)


def test_the_clients_let_an_idle_connection_go_before_serve_closes_it():
    """A kept connection the service is closing as idle may eat a keyless submit: the clients drop theirs first."""
    from pulse_trio.config import Settings
    from pulse_trio.producer.clients import DEFAULT_LIMITS

    assert DEFAULT_LIMITS.keepalive_expiry < Settings().http_idle_timeout
