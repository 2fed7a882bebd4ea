"""Handlers as users write them, against the real service, on each worker backend.

``async def`` on the worker's own loop (asyncio-only primitives included),
``def`` in a worker thread that never stalls the loop, typed payloads
refused before the call, and results the contract cannot carry finishing
FAILED without harming the worker; nor does anything a handler raises
(docs/worker.md §4): a bad exception fails its own task, never the worker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import decimal
import threading
import time

import pytest

from sdk_support import in_thread, url_of, wait_for, wait_state

from pulse_trio.sdk import PermanentError, Registry, RetryableError, TaskContext, UnknownOutcome

ENDED = {"SUCCEEDED", "FAILED", "UNKNOWN", "CANCELLED"}


class GatewayError(Exception):
    """A library's exception whose ``__str__`` needs a response that is not there."""

    def __init__(self, response=None) -> None:
        self.response = response

    def __str__(self) -> str:
        return f"gateway said {self.response.status_code}"  # AttributeError: the response is None


@dataclasses.dataclass
class Invoice:
    invoice: int
    amount: str


@pytest.mark.parametrize("worker_backend", ["asyncio", "uvloop"])
async def test_an_asyncio_handler_awaits_asyncio_only_primitives(start_service, run_worker, client):
    service = await start_service()
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext, invoice: Invoice) -> dict:
        loop = asyncio.get_running_loop()  # there is one: the handler runs on the worker's asyncio loop
        queue: asyncio.Queue[int] = asyncio.Queue()
        loop.call_later(0.01, queue.put_nowait, invoice.invoice)
        got = await asyncio.wait_for(queue.get(), timeout=5)
        await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("127.0.0.1", service.worker_port)  # asyncio's own streams
        writer.close()
        await writer.wait_closed()
        return {"got": got, "loop": type(loop).__module__.split(".")[0]}

    worker = await run_worker(url_of(service), registry)
    task = await in_thread(client.submit, "billing", "invoice.send", {"invoice": 7, "amount": "1.00"})
    view = await wait_state(client, task["task_id"], {"SUCCEEDED", "FAILED"})
    assert view["state"] == "SUCCEEDED", view["outcome"]
    assert view["outcome"]["result"] == {"got": 7, "loop": "uvloop" if worker.backend == "uvloop" else "asyncio"}


async def test_a_blocking_def_handler_does_not_stall_its_neighbours_renewals(start_service, run_worker, client):
    """A def handler blocks its thread for four ttls; the async neighbour's lease is renewed all along."""
    service = await start_service(lease_ttl=0.5)
    registry = Registry()
    blocked = threading.Event()

    @registry.handler("reports", "render")
    def render(task: TaskContext) -> dict:
        blocked.set()
        time.sleep(2.0)  # blocking, never checks anything: only a thread keeps it off the loop
        return {"rendered": True, "left": task.time_left() > 0}

    @registry.handler("reports", "watch")
    async def watch(task: TaskContext) -> dict:
        import anyio

        await anyio.sleep(1.5)
        return {"watched": True}

    worker = await run_worker(url_of(service), registry, capacity=2)
    blocking = await in_thread(client.submit, "reports", "render", {})
    await wait_for(blocked.is_set, what="the blocking handler to start")
    neighbour = await in_thread(client.submit, "reports", "watch", {})
    for task_id in (neighbour["task_id"], blocking["task_id"]):
        view = await wait_state(client, task_id, {"SUCCEEDED", "FAILED", "UNKNOWN"}, timeout=20)
        assert view["state"] == "SUCCEEDED" and len(view["attempts"]) == 1, view["outcome"]
    assert worker.stats.lost == 0 and worker.stats.renewals >= 8  # both leases, every ttl/3 (0.17 s)


async def test_stop_returns_at_once_while_a_def_handler_blocks(start_service, run_worker, client):
    """stop() is "stop now" (docs/worker.md §14.2): it abandons a thread it cannot interrupt instead of waiting."""
    service = await start_service()
    registry = Registry()
    started, release = threading.Event(), threading.Event()

    @registry.handler("reports", "render")
    def render(task: TaskContext) -> dict:
        started.set()
        release.wait(30)  # a blocking call that never checks anything (a socket read, a C library)
        return {"rendered": True}

    worker = await run_worker(url_of(service), registry)
    try:
        await in_thread(client.submit, "reports", "render", {})
        await wait_for(started.is_set, what="the def handler to start")
        worker.stop()
        await wait_for(worker.returned.is_set, timeout=5, what="run() to return after stop()")
        assert worker.stopped and worker.error is None and worker.stats.abandoned_threads == 1
    finally:
        release.set()


async def test_a_payload_that_does_not_fit_fails_without_calling_the_handler(start_service, run_worker, client):
    service = await start_service()
    calls: list[Invoice] = []
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext, invoice: Invoice) -> dict:
        calls.append(invoice)
        return {"sent": invoice.invoice}

    @registry.handler("billing", "invoice.render")
    def render(task: TaskContext, invoice: Invoice) -> dict:
        calls.append(invoice)
        return {}

    worker = await run_worker(url_of(service), registry, capacity=2)
    bad = await in_thread(client.submit, "billing", "invoice.send", {"invoice": "seven", "amount": "1"},
                          max_attempts=3)
    missing = await in_thread(client.submit, "billing", "invoice.render", {"invoice": 1}, max_attempts=3)
    good = await in_thread(client.submit, "billing", "invoice.send", {"invoice": 8, "amount": "2"})
    view = await wait_state(client, bad["task_id"], {"FAILED", "SUCCEEDED"})
    assert view["state"] == "FAILED" and len(view["attempts"]) == 1  # not retried: it would never fit
    outcome = view["outcome"]
    assert outcome["error_code"] == "invalid_payload" and view["attempts"][0]["retryable"] is False
    assert "Invoice" in outcome["error_message"] and "$.invoice" in outcome["error_message"]
    view = await wait_state(client, missing["task_id"], {"FAILED", "SUCCEEDED"})
    assert view["outcome"]["error_code"] == "invalid_payload" and "`amount`" in view["outcome"]["error_message"]
    view = await wait_state(client, good["task_id"], "SUCCEEDED")
    assert view["outcome"]["result"] == {"sent": 8}
    assert calls == [Invoice(8, "2")]
    await wait_for(lambda: worker.stats.failed == 2 and worker.stats.succeeded == 1, what="the finishes")


async def test_results_the_contract_cannot_carry_fail_clearly_and_the_worker_goes_on(start_service, run_worker,
                                                                                     client):
    service = await start_service()
    registry = Registry()

    @registry.handler("billing", "huge")
    async def huge(task: TaskContext) -> dict:
        return {"blob": "x" * (300 * 1024)}

    @registry.handler("billing", "odd")
    def odd(task: TaskContext) -> object:
        return {"when": object()}

    @registry.handler("billing", "fine")
    async def fine(task: TaskContext) -> Invoice:
        return Invoice(1, "2.00")  # a dataclass result is sent as its JSON object

    worker = await run_worker(url_of(service), registry, capacity=3)
    ids = {kind: (await in_thread(client.submit, "billing", kind, {}, max_attempts=2))["task_id"]
           for kind in ("huge", "odd", "fine")}
    view = await wait_state(client, ids["huge"], {"FAILED", "SUCCEEDED"})
    assert view["outcome"]["error_code"] == "result_too_large" and "262144" in view["outcome"]["error_message"]
    assert view["attempts"][0]["retryable"] is False
    view = await wait_state(client, ids["odd"], {"FAILED", "SUCCEEDED"})
    assert view["outcome"]["error_code"] == "invalid_result" and "not JSON" in view["outcome"]["error_message"]
    view = await wait_state(client, ids["fine"], "SUCCEEDED")
    assert view["outcome"]["result"] == {"invoice": 1, "amount": "2.00"}
    assert worker.connected and worker.stats.lost == 0


async def test_an_outcome_whose_details_the_contract_cannot_carry_keeps_its_status(start_service, run_worker,
                                                                                  client):
    """Details no worker could read (a subnormal float's exponent is beyond ±308) are dropped, as too large ones are.

    Sent as they were, the server refused the finish and the UNKNOWN charge finished FAILED ``invalid_result``.
    """
    service = await start_service()
    registry = Registry()

    @registry.handler("billing", "charge")
    async def charge(task: TaskContext) -> dict:
        raise UnknownOutcome("timed out after sending", code="gateway.timeout", details={"fee_rate": 1e-310})

    await run_worker(url_of(service), registry)
    task = await in_thread(client.submit, "billing", "charge", {}, max_attempts=3)
    view = await wait_state(client, task["task_id"], ENDED)
    assert view["state"] == "UNKNOWN" and len(view["attempts"]) == 1, view
    assert view["outcome"]["error_code"] == "gateway.timeout" and view["outcome"]["result"] == {}


PLAIN_ASYNCIO_PROGRAM = """
import asyncio, sys
from pulse_trio.sdk import Registry, TaskContext, Worker

registry = Registry()

@registry.handler("billing", "invoice.send")
async def send(task: TaskContext, payload: dict) -> dict:
    await asyncio.sleep(0.01)
    return {"echo": payload, "loop": type(asyncio.get_running_loop()).__name__}

worker = Worker(sys.argv[1], sys.argv[2], registry, drain_check=0.2)
asyncio.run(worker.run())
print("trio loaded:", "trio" in sys.modules, "succeeded:", worker.stats.succeeded, flush=True)
"""


async def test_a_plain_asyncio_program_runs_a_worker_without_loading_trio(start_service, token_factory, client):
    """``asyncio.run(worker.run())`` as the docs show it: no AnyIO runner, no Trio, an operator's drain ends it."""
    import subprocess
    import sys

    import trio

    service = await start_service()
    token = token_factory("worker", ["billing"])
    async with trio.open_nursery() as nursery:
        process = await nursery.start(lambda task_status: trio.run_process(
            [sys.executable, "-c", PLAIN_ASYNCIO_PROGRAM, url_of(service), token], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, check=False, task_status=task_status))
        try:
            workers = await wait_for(client.workers, timeout=20, what="the worker to register")
            task = await in_thread(client.submit, "billing", "invoice.send", {"n": 1})
            view = await wait_state(client, task["task_id"], {"SUCCEEDED", "FAILED"})
            assert view["outcome"]["result"] == {"echo": {"n": 1}, "loop": "_UnixSelectorEventLoop"}, view
            await in_thread(client.drain, workers[0]["instance_id"])
            with trio.fail_after(20):
                rc = await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
        out = await process.stdout.receive_some(1 << 16)
    assert rc == 0 and out.decode().strip() == "trio loaded: False succeeded: 1", out


@pytest.mark.parametrize("worker_backend", ["asyncio"])
async def test_a_cancelled_error_of_the_handlers_own_making_fails_the_task_not_the_worker(start_service, run_worker,
                                                                                         client):
    """An awaited future someone else cancelled raises CancelledError out of an asyncio handler.

    No scope of the worker was cancelled: the task finishes FAILED ``unhandled_exception`` (docs/worker.md §4)
    and the worker, and its other running handlers, go on.
    """

    async def send(task: TaskContext) -> dict:
        sub = asyncio.ensure_future(asyncio.sleep(10))
        await asyncio.sleep(0)
        sub.cancel()  # a library cancelled its own sub-task, which the handler awaits
        await asyncio.gather(sub)
        return {"sent": True}

    view = await _fails_alone(start_service, run_worker, client, send)
    assert view["state"] == "FAILED" and view["outcome"]["error_code"] == "unhandled_exception", view
    assert "CancelledError" in view["outcome"]["error_message"]


async def _fails_alone(start_service, run_worker, client, bad, payload: dict | None = None) -> dict:
    """Run ``bad`` (billing/invoice.send) beside a running neighbour: its task ends, the worker and neighbour go on."""
    service = await start_service()
    registry = Registry()
    neighbour_started, release = threading.Event(), threading.Event()
    registry.add("billing", "invoice.send", bad)

    @registry.handler("billing", "invoice.render")
    async def render(task: TaskContext) -> dict:
        import anyio

        neighbour_started.set()
        while not release.is_set():
            await anyio.sleep(0.01)
        return {"rendered": True}

    worker = await run_worker(url_of(service), registry, capacity=2)
    neighbour = await in_thread(client.submit, "billing", "invoice.render", {})
    await wait_for(neighbour_started.is_set, what="the neighbour's handler")
    task = await in_thread(client.submit, "billing", "invoice.send", payload or {}, max_attempts=1)
    await wait_for(lambda: worker.returned.is_set() or worker.stats.finished, what="the task's finish")
    assert not worker.returned.is_set(), f"the worker's run() ended: {worker.error!r}"
    view = await wait_state(client, task["task_id"], ENDED)
    release.set()
    neighbour_view = await wait_state(client, neighbour["task_id"], ENDED)
    assert neighbour_view["state"] == "SUCCEEDED" and neighbour_view["attempt"] == 1, neighbour_view
    assert not worker.returned.is_set(), worker.error
    assert worker.stats.lost == 0 and worker.stats.failed == (view["state"] == "FAILED"), worker.stats
    return view


async def test_retryable_error_wrapping_the_caught_exception_fails_the_task_not_the_worker(start_service, run_worker,
                                                                                          client):
    """``raise RetryableError(exc, code=...)``, the caught exception as the message, is the usual idiom."""

    async def send(task: TaskContext) -> dict:
        try:
            raise ConnectionError("gateway unreachable")
        except ConnectionError as exc:
            raise RetryableError(exc, code="gateway.unavailable") from exc

    view = await _fails_alone(start_service, run_worker, client, send)
    outcome = view["outcome"]
    assert view["state"] == "FAILED" and outcome["error_code"] == "gateway.unavailable", outcome
    assert outcome["error_message"] == "gateway unreachable" and view["attempts"][0]["retryable"] is True


async def test_an_exception_whose_str_raises_fails_the_task_not_the_worker(start_service, run_worker, client):
    def send(task: TaskContext) -> dict:
        raise GatewayError()

    view = await _fails_alone(start_service, run_worker, client, send)
    outcome = view["outcome"]
    assert view["state"] == "FAILED" and outcome["error_code"] == "unhandled_exception", outcome
    assert outcome["error_message"].startswith("GatewayError: ") and view["attempts"][0]["retryable"] is True


async def test_a_def_handler_calling_sys_exit_fails_the_task_not_the_worker(start_service, run_worker, client):
    """argparse inside a handler calls sys.exit() on bad input: one task's failure, not the process's."""

    def send(task: TaskContext) -> dict:
        import argparse

        parser = argparse.ArgumentParser(exit_on_error=False)
        parser.add_argument("--pages", type=int, required=True)
        parser.parse_args([])  # a missing required argument: SystemExit(2) whatever exit_on_error says
        return {}

    view = await _fails_alone(start_service, run_worker, client, send)
    outcome = view["outcome"]
    assert view["state"] == "FAILED" and outcome["error_code"] == "unhandled_exception", outcome
    assert outcome["error_message"] == "SystemExit: 2"


@dataclasses.dataclass
class Charge:
    """A payload type with a check of its own that raises neither ValueError nor TypeError."""

    amount: str

    def __post_init__(self) -> None:
        decimal.Decimal(self.amount)  # decimal.InvalidOperation, an ArithmeticError, for "12,50"


async def test_a_payload_types_own_failure_fails_the_task_not_the_worker(start_service, run_worker, client):
    """msgspec turns only a ValueError or TypeError of ``__post_init__`` into a refusal; anything else it lets out.

    That is the payload type's code raising, as the handler's would (docs/worker.md §3.2): the task fails
    without the handler being called, and the worker and its other handlers go on.
    """
    calls: list[str] = []

    async def send(task: TaskContext, charge: Charge) -> dict:
        calls.append(task.task_id)
        return {"charged": charge.amount}

    view = await _fails_alone(start_service, run_worker, client, send, {"amount": "12,50"})
    outcome = view["outcome"]
    assert view["state"] == "FAILED" and outcome["error_code"] == "unhandled_exception", outcome
    assert outcome["error_message"].startswith("InvalidOperation: ") and view["attempts"][0]["retryable"] is True
    assert calls == []


class Abort(BaseException):
    """A library's BaseException (gevent's Timeout, pytest's outcomes): not an Exception, still the handler's own."""


class TimedOutRendering(Exception):
    """A library's exception whose lazy ``__str__`` runs into the library's own ``BaseException``."""

    def __str__(self) -> str:
        raise Abort("formatting timed out")


async def test_an_exception_whose_str_raises_a_base_exception_fails_the_task_not_the_worker(start_service,
                                                                                           run_worker, client):
    """Naming the exception by its type instead (docs/worker.md §4) must not let the ``__str__``'s failure out."""

    async def send(task: TaskContext) -> dict:
        raise TimedOutRendering()

    view = await _fails_alone(start_service, run_worker, client, send)
    outcome = view["outcome"]
    assert view["state"] == "FAILED" and outcome["error_code"] == "unhandled_exception", outcome
    assert outcome["error_message"] == "TimedOutRendering: <TimedOutRendering: str() raised Abort>"


async def test_a_def_handler_raising_any_base_exception_fails_the_task_not_the_worker(start_service, run_worker,
                                                                                      client):
    """No signal or cancellation reaches a thread: whatever a def handler raises there is its own failure."""

    def send(task: TaskContext) -> dict:
        raise Abort("the render library gave up")

    view = await _fails_alone(start_service, run_worker, client, send)
    outcome = view["outcome"]
    assert view["state"] == "FAILED" and outcome["error_code"] == "unhandled_exception", outcome
    assert outcome["error_message"] == "Abort: the render library gave up"


async def _interrupted_charge(*, task_status) -> None:
    """A payment request in flight when a sibling's failure cancels it: the charge may have gone through."""
    import anyio

    task_status.started()
    try:
        await anyio.sleep_forever()
    except anyio.get_cancelled_exc_class():
        raise UnknownOutcome("charge interrupted after sending", code="gateway.timeout", details={"charge": 7})


async def test_an_outcome_inside_a_task_groups_exception_group_is_the_handlers_outcome(start_service, run_worker,
                                                                                     client):
    """A task group delivers its children's exceptions in an ExceptionGroup (docs/worker.md §4).

    A group holding, at any depth, an ``UnknownOutcome`` finishes UNKNOWN (a retry could repeat the charge);
    else one holding a ``PermanentError`` finishes FAILED, not retryable; any other group as any exception.
    """
    import anyio

    service = await start_service()
    registry = Registry()

    @registry.handler("billing", "charge")
    async def charge(task: TaskContext) -> dict:
        async with anyio.create_task_group() as outer:
            await outer.start(_interrupted_charge)
            async with anyio.create_task_group() as inner:  # the charge's failure is one level deeper
                inner.start_soon(_fail, PermanentError("card declined", code="card.declined"))
        return {"charged": True}

    @registry.handler("billing", "refund")
    async def refund(task: TaskContext) -> dict:
        async with anyio.create_task_group() as group:
            group.start_soon(_fail, KeyError("ledger"))
            group.start_soon(_fail, PermanentError("refund window closed", code="refund.closed",
                                                   details={"days": 31}))
        return {"refunded": True}

    @registry.handler("billing", "notify")
    async def notify(task: TaskContext) -> dict:
        async with anyio.create_task_group() as group:
            group.start_soon(_fail, KeyError("smtp"))
        return {"notified": True}

    await run_worker(url_of(service), registry, capacity=3)
    ids = {kind: (await in_thread(client.submit, "billing", kind, {}, max_attempts=attempts))["task_id"]
           for kind, attempts in (("charge", 3), ("refund", 3), ("notify", 1))}
    view = await wait_state(client, ids["charge"], ENDED)
    outcome = view["outcome"]
    assert view["state"] == "UNKNOWN" and len(view["attempts"]) == 1, view
    assert (outcome["error_code"], outcome["error_message"]) == ("gateway.timeout", "charge interrupted after sending")
    assert outcome["result"] == {"charge": 7}
    view = await wait_state(client, ids["refund"], ENDED)
    outcome = view["outcome"]
    assert view["state"] == "FAILED" and len(view["attempts"]) == 1 and not view["attempts"][0]["retryable"], view
    assert (outcome["error_code"], outcome["error_message"]) == ("refund.closed", "refund window closed")
    assert outcome["result"] == {"days": 31}
    view = await wait_state(client, ids["notify"], {"FAILED", "SUCCEEDED"})
    assert view["attempts"][0]["error_code"] == "unhandled_exception" and view["attempts"][0]["retryable"], view


async def _fail(exc: BaseException) -> None:
    raise exc


async def _exits(code: int) -> None:
    import sys

    sys.exit(code)  # argparse on bad input, in a child task


@pytest.mark.parametrize("worker_backend", ["trio"])
async def test_a_task_group_ending_in_sys_exit_fails_the_task_not_the_worker(start_service, run_worker, client):
    """A child's SystemExit comes out of the nursery inside a BaseExceptionGroup, not an ExceptionGroup.

    The group holds the handler's own exit only (docs/worker.md §4): its task fails, the worker goes on.
    (On asyncio the child's task raises it out of the event loop itself, before any group is made: docs/worker.md §15.)
    """
    import anyio

    async def send(task: TaskContext) -> dict:
        async with anyio.create_task_group() as group:
            group.start_soon(_exits, 2)
        return {"sent": True}

    view = await _fails_alone(start_service, run_worker, client, send)
    outcome = view["outcome"]
    assert view["state"] == "FAILED" and outcome["error_code"] == "unhandled_exception", outcome
    assert outcome["error_message"].startswith("BaseExceptionGroup: ") and view["attempts"][0]["retryable"] is True


async def test_a_cancelled_handler_whose_child_fails_while_stopping_is_cancelled_not_the_worker(start_service,
                                                                                               run_worker, client):
    """The cancel reaches a task group whose child fails in its own clean-up (a rollback that raises).

    On Trio the group holds the cancellation beside the failure; the handler's scope takes its cancellation
    out and lets the rest through. That rest is the handler's (docs/worker.md §8): the task finishes
    CANCELLED, and the worker, with its other tasks, goes on.
    """
    import anyio

    service = await start_service()
    registry = Registry()
    started = threading.Event()

    async def rollback_on_cancel() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            raise ConnectionError("rollback failed: connection reset")

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext) -> dict:
        async with anyio.create_task_group() as group:
            group.start_soon(rollback_on_cancel)
            started.set()
            await anyio.sleep_forever()
        return {"sent": True}

    @registry.handler("billing", "invoice.render")
    async def render(task: TaskContext) -> dict:
        return {"rendered": True}

    worker = await run_worker(url_of(service), registry, capacity=2)
    task = await in_thread(client.submit, "billing", "invoice.send", {}, max_attempts=1)
    await wait_for(started.is_set, what="the handler to start")
    await in_thread(client.cancel, task["task_id"], reason="customer asked")
    await wait_for(lambda: worker.returned.is_set() or worker.stats.finished, what="the task's finish")
    assert not worker.returned.is_set(), f"the worker's run() ended: {worker.error!r}"
    view = await wait_state(client, task["task_id"], ENDED)
    assert view["state"] == "CANCELLED" and view["outcome"]["error_code"] == "cancelled", view
    after = await in_thread(client.submit, "billing", "invoice.render", {})
    assert (await wait_state(client, after["task_id"], ENDED))["state"] == "SUCCEEDED"
    assert not worker.returned.is_set() and worker.stats.cancelled == 1, worker.error

