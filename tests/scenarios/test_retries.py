"""Safe retry (docs/retries.md §2, §4): the table, row by row, and the backoff schedule, through the wire."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pulse_trio.contract.grammar import parse_time
from pulse_trio.store.task.steps import backoff_ms
from scenario_support import error_code, running

TTL = 5
SETTINGS = dict(start_timeout=5, lease_ttl=TTL, cancel_grace=5)
DEFAULT_BACKOFF = dict(backoff_initial_ms=1000, backoff_factor=2.0, backoff_max_ms=300_000)


def expected_backoff_ms(task_id: str, attempt: int, policy: dict | None = None) -> int:
    return backoff_ms(SimpleNamespace(task_id=task_id, **(policy or DEFAULT_BACKOFF)), attempt)


async def test_retryable_failures_back_off_until_max_attempts_then_fail(
        virtual_clock, scenario_service, connect_worker, submit, operator):
    service = await scenario_service(**SETTINGS)
    ops = operator(service)
    task = await submit(service, max_attempts=5)
    delays = []
    async with connect_worker(service) as worker:
        await worker.capacity(1)
        for attempt in range(1, 6):
            held = await running(worker)
            assert held.task_id == task["task_id"] and held.task["attempt"] == attempt
            assert held.task["max_attempts"] == 5 and "effect_uncertain" not in held.task
            if delays:  # the retry was not offered before its due time
                assert parse_time(held.task["due_at"]) <= service.clock.now()
            done = await held.finish("FAILED", {"try": attempt}, error_code="upstream_503", retryable=True)
            committed = parse_time(done["body"]["receipt"]["committed_at"])
            view = await ops.get(task["task_id"])
            if attempt < 5:
                assert view["state"] == "SCHEDULED" and view["outcome"] is None
                delay_ms = (parse_time(view["due_at"]) - committed).total_seconds() * 1000
                assert round(delay_ms) == expected_backoff_ms(task["task_id"], attempt)
                base = 1000 * 2 ** (attempt - 1)
                assert base / 2 <= delay_ms <= base  # jitter: 50-100 % of the exponential step
                delays.append(delay_ms)
        view = await ops.get(task["task_id"])
        await worker.listen(10)
        assert not worker.pushed("task.assign")
    assert view["state"] == "FAILED" and view["attempt"] == 5
    assert view["outcome"]["error_code"] == "upstream_503" and view["outcome"]["retryable"] is True
    assert view["outcome"]["result"] == {"try": 5}
    assert [a["status"] for a in view["attempts"]] == ["FAILED"] * 5
    assert delays == sorted(delays)


async def test_a_producer_set_backoff_spaces_the_retries(virtual_clock, scenario_service, connect_worker, submit,
                                                         operator):
    """backoff_initial 0.5 s, factor 3, max 2 s: steps of 0.5, 1.5, 2 (capped), each jittered to 50-100 %."""
    service = await scenario_service(**SETTINGS)
    ops = operator(service)
    task = await submit(service, max_attempts=4, backoff_initial=0.5, backoff_factor=3, backoff_max=2)
    policy = dict(backoff_initial_ms=500, backoff_factor=3.0, backoff_max_ms=2000)
    shown = await ops.get(task["task_id"])
    assert (shown["backoff_initial"], shown["backoff_factor"], shown["backoff_max"]) == (0.5, 3.0, 2.0)
    async with connect_worker(service) as worker:
        await worker.capacity(1)
        for attempt, step_ms in ((1, 500), (2, 1500), (3, 2000)):
            held = await running(worker)
            assert held.task["attempt"] == attempt
            done = await held.finish("FAILED", error_code="busy", retryable=True)
            committed = parse_time(done["body"]["receipt"]["committed_at"])
            view = await ops.get(task["task_id"])
            delay_ms = (parse_time(view["due_at"]) - committed).total_seconds() * 1000
            assert round(delay_ms) == expected_backoff_ms(task["task_id"], attempt, policy)
            assert step_ms / 2 <= delay_ms <= step_ms
        held = await running(worker)
        assert held.task["attempt"] == 4
        assert (await held.finish("SUCCEEDED", {}))["type"] == "ack"
    assert (await ops.state(task["task_id"])) == "SUCCEEDED"


async def test_jitter_spreads_tasks_that_failed_together(virtual_clock, scenario_service, connect_worker, submit,
                                                         operator):
    service = await scenario_service(**SETTINGS)
    ops = operator(service)
    tasks = await submit.many(service, [dict(idempotency_key=f"t{i}") for i in range(4)])
    async with connect_worker(service) as worker:
        await worker.capacity(4)
        held = [await running(worker) for _ in tasks]
        receipts = [await h.finish("FAILED", error_code="busy", retryable=True) for h in held]
    delays = set()
    for h, r in zip(held, receipts):
        view = await ops.get(h.task_id)
        delays.add(parse_time(view["due_at"]) - parse_time(r["body"]["receipt"]["committed_at"]))
    assert len(delays) > 1


@pytest.mark.parametrize("status, retryable, max_attempts, final", [
    ("FAILED", False, 3, "FAILED"),   # not retryable: terminal at once
    ("FAILED", True, 1, "FAILED"),    # retryable but no attempts left
    ("UNKNOWN", False, 3, "UNKNOWN"),  # a person decides
    ("SUCCEEDED", False, 3, "SUCCEEDED"),
])
async def test_terminal_rows_of_the_table(virtual_clock, scenario_service, connect_worker, submit, operator,
                                          status, retryable, max_attempts, final):
    service = await scenario_service(**SETTINGS)
    ops = operator(service)
    task = await submit(service, max_attempts=max_attempts, retry_uncertain=True)
    async with connect_worker(service) as worker:
        await worker.capacity(1)
        held = await running(worker)
        extra = {"retryable": True} if retryable else {}
        assert (await held.finish(status, **extra))["type"] == "ack"
        await worker.listen(3 * TTL)
        assert not worker.pushed("task.assign")  # never dispatched again
    view = await ops.get(task["task_id"])
    assert view["state"] == final and view["attempt"] == 1
    assert view["outcome"]["effect_uncertain"] is (status == "UNKNOWN")


async def test_cancelled_is_never_retried(virtual_clock, scenario_service, connect_worker, submit, operator):
    service = await scenario_service(**SETTINGS)
    ops = operator(service)
    task = await submit(service, max_attempts=5, retry_uncertain=True)
    async with connect_worker(service) as worker:
        await worker.capacity(1)
        held = await running(worker)
        await ops.cancel(task["task_id"])
        assert (await held.finish("CANCELLED"))["type"] == "ack"
        await worker.listen(3 * TTL)
        assert not worker.pushed("task.assign")
    assert (await ops.state(task["task_id"])) == "CANCELLED"


async def test_retryable_is_refused_with_other_statuses(virtual_clock, scenario_service, connect_worker, submit):
    service = await scenario_service(**SETTINGS)
    await submit(service)
    async with connect_worker(service) as worker:
        await worker.capacity(1)
        held = await running(worker)
        assert error_code(await held.finish("UNKNOWN", retryable=True)) == "invalid_frame"
        assert (await held.finish("UNKNOWN"))["type"] == "ack"


@pytest.mark.parametrize("attempt", [1025, 2**31 - 1])  # past a float's range at the default ×2
def test_the_backoff_of_any_attempt_is_capped_not_an_overflow(attempt):
    assert 150_000 <= expected_backoff_ms("tsk_x", attempt) <= 300_000


async def test_many_retryable_failures_keep_being_rescheduled(virtual_clock, scenario_service, connect_worker, submit,
                                                              operator):
    """Retry for ever, capped: at ×100, factor^(n−1) leaves a float's range at attempt 156 (×2: at 1025)."""
    service = await scenario_service(**SETTINGS)
    ops = operator(service)
    task = await submit(service, max_attempts=200, backoff_initial=0.001, backoff_factor=100, backoff_max=0.001)
    async with connect_worker(service) as worker:
        await worker.capacity(1)
        for attempt in range(1, 161):
            held = await running(worker)
            assert held.task["attempt"] == attempt
            done = await held.finish("FAILED", {"try": attempt}, error_code="busy", retryable=True)
            assert done["type"] == "ack", (attempt, done.get("error"))
            assert (await ops.get(task["task_id"]))["state"] == "SCHEDULED"
