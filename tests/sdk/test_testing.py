"""``pulse_trio.testing`` on the example's real handlers: no server, a lease and a clock the test drives.

These are plain (sync) tests that call ``anyio.run`` once per backend: the
suite runs async tests under pytest-trio's trio mode, and a handler test of
a user's asyncio worker must run under asyncio, so each test picks its loop
itself instead of leaving it to a plugin.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import anyio
import pytest

from pulse_trio.sdk import LEASE_LOST, Registry, RetryableError, TaskContext
from pulse_trio.testing import HandlerEnvironment


from examples import billing_worker

BACKENDS = ["asyncio", "trio"]


def run(backend: str, fn, *args):
    return anyio.run(fn, *args, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_example_invoice_is_sent_once_per_idempotency_key(backend):
    billing_worker.SENT.clear()
    env = HandlerEnvironment(billing_worker.registry)

    async def scenario():
        first = await env.run("billing", "invoice.send", {"invoice": 991, "amount": "12.50"},
                              idempotency_key="inv-991")
        again = await env.run("billing", "invoice.send", {"invoice": 991, "amount": "12.50"},
                              idempotency_key="inv-991", attempt=2, effect_uncertain=True)
        return first, again

    if backend == "trio":  # the asyncio example's handler awaits asyncio: on Trio, test its Trio twin
        from examples import billing_worker_trio
        env = HandlerEnvironment(billing_worker_trio.registry)
    first, again = run(backend, scenario)
    assert first.status == "SUCCEEDED" and first.handler_called
    assert first.result == {"invoice": 991, "sent": True, "attempt": 1, "message_id": "msg-991"}
    assert again.status == "SUCCEEDED" and again.result["deduplicated"] is True


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_example_refuses_a_bad_payload_and_retries_an_outage(backend):
    env = HandlerEnvironment(billing_worker.registry)

    async def scenario():
        bad = await env.run("billing", "invoice.render", {"pages": 2})
        outage = await env.run("billing", "invoice.send", {"invoice": 1, "simulate_outage": True})
        rendered = await env.run("billing", "invoice.render", {"invoice": 4, "pages": 2})
        return bad, outage, rendered

    bad, outage, rendered = run(backend, scenario)
    assert (bad.status, bad.error_code, bad.retryable, bad.handler_called) == ("FAILED", "invalid_payload", False,
                                                                               False)
    assert "`invoice`" in bad.error_message
    assert (outage.status, outage.error_code, outage.retryable) == ("FAILED", "gateway.unavailable", True)
    assert rendered.status == "SUCCEEDED" and rendered.result == {"invoice": 4, "pages": 2}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cancel_reaches_the_example_render_in_its_thread(backend):
    env = HandlerEnvironment(billing_worker.registry)

    async def scenario():
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(lambda: env.run("billing", "invoice.render", {"invoice": 4, "pages": 1000}))
            ctx = await env.wait_called()
            env.cancel("customer asked")
            assert ctx.cancel_requested
        return env.finished

    finished = run(backend, scenario)
    assert (finished.status, finished.error_code, finished.error_message) == ("CANCELLED", "cancelled",
                                                                              "customer asked")


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_clock_renews_until_renewals_fail_then_the_lease_is_lost(backend):
    seen: list[float] = []
    stopped: list[str | None] = []

    async def long(task: TaskContext) -> dict:
        try:
            await anyio.sleep_forever()
        finally:
            stopped.append(task.stop_reason)

    env = HandlerEnvironment(long, lease_ttl=30)

    async def scenario():
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(env.run)
            ctx = await env.wait_called()
            seen.append(ctx.time_left())
            for _ in range(10):
                env.advance(15)  # every advance past a third of the ttl is met by a renewal
                seen.append(ctx.time_left())
            env.fail_renewals()
            env.advance(20)
            seen.append(ctx.time_left())
            assert not ctx.cancel_requested
            env.advance(20)  # past the expiry: the watchdog stops the handler
        return env.finished

    finished = run(backend, scenario)
    assert seen[0] == 30 and all(left == 30 for left in seen[1:11]) and seen[11] == 10
    assert finished.lease_lost and finished.renewals == 10 and stopped == [LEASE_LOST]


@pytest.mark.parametrize("backend", BACKENDS)
def test_renewals_failed_before_the_attempt_starts_fail_in_it(backend):
    """``fail_renewals()`` holds from the call on: an attempt started after it renews nothing."""
    async def long(task: TaskContext) -> dict:
        await anyio.sleep(5)  # past it, the lease was kept: a renewal was made after all
        return {}

    env = HandlerEnvironment(long, lease_ttl=30)
    env.fail_renewals()

    async def scenario():
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(env.run)
            await env.wait_called()
            env.advance(31)
        return env.finished

    finished = run(backend, scenario)
    assert finished.lease_lost and finished.renewals == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_def_handler_reads_the_driven_deadline_from_its_thread(backend):
    gate = threading.Event()
    registry = Registry()

    @registry.handler("reports", "crunch")
    def crunch(task: TaskContext) -> dict:
        gate.wait(5)
        if task.time_left() < 10:
            raise RetryableError("not enough lease left to start the long step", code="lease.short")
        return {"left": task.time_left()}

    env = HandlerEnvironment(registry, lease_ttl=30)

    async def scenario():
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(lambda: env.run("reports", "crunch"))
            await env.wait_called()
            env.fail_renewals()
            env.advance(25)
            gate.set()
        return env.finished

    finished = run(backend, scenario)
    assert (finished.status, finished.error_code, finished.retryable) == ("FAILED", "lease.short", True)


def test_a_lost_lease_while_a_thread_runs_finishes_nothing():
    def slow(task: TaskContext) -> dict:
        while not task.cancel_requested:
            time.sleep(0.005)
        task.check_cancelled()
        return {}

    env = HandlerEnvironment(slow)

    async def scenario():
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(env.run)
            await env.wait_called()
            env.lose_lease("lease_expired")
        return env.finished

    finished = run("asyncio", scenario)
    assert finished.lease_lost and finished.handler_called and finished.error_message == "lease_expired"


@pytest.mark.parametrize("backend", BACKENDS)
def test_wait_called_on_a_second_attempt_waits_for_that_attempt(backend):
    """On a reused environment, the first attempt's call does not answer the second's wait: its cancel lands."""

    async def slow(task: TaskContext) -> dict:
        await anyio.sleep(3)  # ended by the test's cancel long before
        return {}

    env = HandlerEnvironment(slow)

    async def scenario():
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(env.run)
                first = await env.wait_called()
                env.cancel("first")
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(lambda: env.run(attempt=2))
                second = await env.wait_called()
                env.cancel("second")
        return first.attempt, second.attempt, env.finished

    first, second, finished = run(backend, scenario)
    assert (first, second) == (1, 2)
    assert (finished.status, finished.error_message) == ("CANCELLED", "second")


@dataclasses.dataclass
class Invoice:
    invoice: int


@pytest.mark.parametrize("backend", BACKENDS)
def test_wait_called_does_not_hang_when_the_attempt_ends_without_calling_the_handler(backend):
    """A payload that does not fit the handler's type ends the attempt uncalled: wait_called says so."""

    async def send(task: TaskContext, invoice: Invoice) -> dict:
        return {"invoice": invoice.invoice}

    env = HandlerEnvironment(send)

    async def scenario():
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(lambda: env.run(payload={"invoice": "not a number"}))
                with pytest.raises(RuntimeError, match="without calling the handler: FAILED invalid_payload"):
                    await env.wait_called()

    run(backend, scenario)
    assert env.finished.error_code == "invalid_payload" and not env.finished.handler_called


@pytest.mark.parametrize("seconds", [-1.0, float("nan"), float("inf")])
def test_the_clock_refuses_to_move_back_or_by_no_number(seconds):
    env = HandlerEnvironment(lambda task: {})
    with pytest.raises(ValueError, match="time only moves forward"):
        env.advance(seconds)
    assert env.clock() == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_handler_whose_worker_stopped_hard_before_the_call_is_not_called(backend):
    """A stop that lands between the start's ack and the handler's call: no line of the handler runs."""
    called: list[str] = []

    async def charge(ctx: TaskContext) -> None:
        called.append(ctx.task_id)  # an async handler's code up to its first await, a charge say

    async def scenario():
        env = HandlerEnvironment(charge)
        with anyio.CancelScope() as worker_scope:
            worker_scope.cancel()  # the worker's own scope, cancelled by a hard stop
            await env.run()
        return worker_scope.cancelled_caught

    assert run(backend, scenario) and called == []
