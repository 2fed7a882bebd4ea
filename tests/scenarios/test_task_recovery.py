"""Manual recovery (docs/task-recovery.md §3) and the operator CLI (`pulse-trio task cancel|retry`) against a live instance."""

from __future__ import annotations

import json
import math
import sys

import pytest
import trio

from pulse_trio.client import ClientError
from scenario_support import offered, running

TTL = 5
SETTINGS = dict(start_timeout=5, lease_ttl=TTL, cancel_grace=4)
COPIED = ("queue", "kind", "payload", "priority", "concurrency_key", "concurrency_limit", "idempotency_key",
          "max_attempts", "retry_uncertain")


async def _outcome(service, ops, worker, how: str, task: dict) -> None:
    """Drive ``task`` to a terminal state ``how``."""
    if how == "cancelled_before_start":
        await ops.cancel(task["task_id"])
        return
    held = await running(worker)
    assert held.task_id == task["task_id"]
    if how == "failed":
        await held.finish("FAILED", {"why": "card declined"}, error_code="declined")
    elif how == "unknown_reported":
        await held.finish("UNKNOWN", error_code="timeout_upstream")
    elif how == "unknown_lost":
        await ops.wait_state(task["task_id"], "UNKNOWN")
    elif how == "cancelled_by_worker":
        await ops.cancel(task["task_id"])
        await held.finish("CANCELLED", error_code="cancelled")
    elif how == "cancelled_after_a_lost_attempt":  # retry_uncertain: lost, offered again, then cancelled
        again = await offered(worker)
        assert again.task["effect_uncertain"] is True
        await ops.cancel(task["task_id"])
    elif how == "cancelled_after_grace":
        await ops.cancel(task["task_id"])
        await ops.wait_state(task["task_id"], "CANCELLED")


@pytest.mark.parametrize("how, state, uncertain", [
    ("failed", "FAILED", False),
    ("unknown_reported", "UNKNOWN", True),
    ("unknown_lost", "UNKNOWN", True),
    ("cancelled_before_start", "CANCELLED", False),
    ("cancelled_by_worker", "CANCELLED", False),
    ("cancelled_after_grace", "CANCELLED", True),
    ("cancelled_after_a_lost_attempt", "CANCELLED", True),
])
async def test_retry_of_a_terminal_task(virtual_clock, scenario_service, connect_worker, submit, operator,
                                        how, state, uncertain):
    service = await scenario_service(**SETTINGS)
    ops = operator(service)
    source = await submit(service, payload={"invoice": 991.50}, priority=4, idempotency_key="invoice-991",
                          concurrency_key="customer:42", max_attempts=4,
                          retry_uncertain=how == "cancelled_after_a_lost_attempt")
    async with connect_worker(service, concurrency_keys=True) as worker:
        await worker.capacity(1 if how != "cancelled_before_start" else 0)
        await _outcome(service, ops, worker, how, source)
        before = await ops.get(source["task_id"])
        assert before["state"] == state
        retried = await ops.retry(source["task_id"])
        assert retried.pop("created") is True
        assert retried["task_id"] != source["task_id"] and retried["retry_of"] == source["task_id"]
        assert retried["state"] == "READY" and retried["attempt"] == 0 and retried["attempts"] == []
        assert {k: retried[k] for k in COPIED} == {k: before[k] for k in COPIED}
        assert retried["effect_uncertain"] is uncertain
        # idempotent: the same source again gives the same retry
        again = await ops.retry(source["task_id"])
        assert again.pop("created") is False and again["task_id"] == retried["task_id"]
        # lineage both ways; the source itself is untouched
        after = await ops.get(source["task_id"])
        assert after["retried_by"] == retried["task_id"]
        assert {k: v for k, v in after.items() if k != "retried_by"} == {
            k: v for k, v in before.items() if k != "retried_by"}
        # the retry is dispatched like any task: attempt 1, retry_of and effect_uncertain on the wire
        if how == "cancelled_before_start":
            await worker.capacity(1)
        held = await offered(worker)
        assert held.task_id == retried["task_id"] and held.task["attempt"] == 1
        assert held.task["retry_of"] == source["task_id"] and held.task["idempotency_key"] == "invoice-991"
        assert held.task.get("effect_uncertain", False) is uncertain
        assert held.task["concurrency_key"] == "customer:42" and held.task["priority"] == 4
        assert held.task["payload"] == {"invoice": 991.5}
        await held.start()
        await held.finish()
    assert (await ops.state(retried["task_id"])) == "SUCCEEDED"


async def test_retry_of_a_non_terminal_or_succeeded_task_is_refused(virtual_clock, scenario_service,
                                                                    connect_worker, submit, operator):
    service = await scenario_service(**SETTINGS)
    ops = operator(service)
    scheduled = await submit(service, delay=600, idempotency_key="later")
    ready = await submit(service, idempotency_key="now")
    for task in (scheduled, ready):
        with pytest.raises(ClientError) as refused:
            await ops.retry(task["task_id"])
        assert refused.value.code == "not_retryable" and "terminal" in refused.value.message
    async with connect_worker(service) as worker:
        await worker.capacity(1)
        held = await offered(worker)
        with pytest.raises(ClientError, match="OFFERED"):
            await ops.retry(held.task_id)
        await held.start()
        with pytest.raises(ClientError, match="RUNNING"):
            await ops.retry(held.task_id)
        await held.finish()
        with pytest.raises(ClientError, match="SUCCEEDED"):
            await ops.retry(held.task_id)
    listing = await trio.to_thread.run_sync(lambda: ops.client.list())
    assert len(listing["tasks"]) == 2  # nothing was created


async def test_a_retry_keeps_the_key_but_not_its_dedup_slot(virtual_clock, scenario_service, connect_worker,
                                                            submit, operator):
    """A new submit with the key finds the original task; the retry of a retry extends the lineage."""
    service = await scenario_service(**SETTINGS)
    ops = operator(service)
    source = await submit(service, idempotency_key="order-7")
    await ops.cancel(source["task_id"])
    first = await ops.retry(source["task_id"])
    assert first["idempotency_key"] == "order-7"
    dup = await submit(service, idempotency_key="order-7")
    assert dup["task_id"] == source["task_id"] and dup["created"] is False
    await ops.cancel(first["task_id"])
    second = await ops.retry(first["task_id"])
    assert second["retry_of"] == first["task_id"] and second["idempotency_key"] == "order-7"
    assert (await ops.get(first["task_id"]))["retried_by"] == second["task_id"]


# -- the CLI, against a live instance ---------------------------------------------------

async def _cli(clock, db, *args: str) -> tuple[int, dict | None, str]:
    """Run `pulse-trio ARGS` as a user would; virtual time stands still while it runs."""
    threshold, clock.autojump_threshold = clock.autojump_threshold, math.inf
    try:
        done = await trio.run_process([sys.executable, "-m", "pulse_trio", *args, "--database-url",
                                       db.url(redact=False)], capture_stdout=True, capture_stderr=True,
                                      check=False)
    finally:
        clock.autojump_threshold = threshold
    out = done.stdout.decode()
    return done.returncode, (json.loads(out) if out.strip() else None), done.stderr.decode()


async def test_cli_cancel_of_a_running_task_and_cli_retry(virtual_clock, scenario_service, connect_worker, submit,
                                                          operator, db):
    # a grace far longer than the virtual time this test spends: the CLI stamps wall-clock time
    service = await scenario_service(start_timeout=30, lease_ttl=30, cancel_grace=600)
    ops = operator(service)
    task = await submit(service, idempotency_key="cli")
    async with connect_worker(service, cancellation_notifications=True) as worker:
        await worker.capacity(1)
        held = await running(worker)
        code, out, err = await _cli(virtual_clock, db, "task", "retry", task["task_id"])
        assert code == 1 and out is None and "RUNNING" in err and "terminal" in err
        code, out, err = await _cli(virtual_clock, db, "task", "cancel", task["task_id"], "--reason", "cli stop",
                                    "--cancel-grace", "600")
        assert code == 0, err
        assert out["task_id"] == task["task_id"] and out["state"] == "RUNNING" and out["cancel_changed"] is True
        push = (await worker.push("task.cancel"))["body"]
        assert push["reason"] == "cli stop" and push["task_id"] == task["task_id"]
        assert (await held.finish("CANCELLED", error_code="cancelled"))["type"] == "ack"
    code, out, err = await _cli(virtual_clock, db, "task", "cancel", task["task_id"])
    assert code == 0 and out["state"] == "CANCELLED" and out["cancel_changed"] is False
    code, out, err = await _cli(virtual_clock, db, "task", "retry", task["task_id"])
    assert code == 0, err
    assert out["retry_of"] == task["task_id"] and out["created"] is True and out["state"] == "READY"
    assert out["effect_uncertain"] is False and out["idempotency_key"] == "cli"
    code, again, _ = await _cli(virtual_clock, db, "task", "retry", task["task_id"])
    assert code == 0 and again["task_id"] == out["task_id"] and again["created"] is False
