"""Cancellation end to end (docs/cancellation.md §3-§6, docs/protocol.md §4.5, §4.7): the `cancellation` chart."""

from __future__ import annotations


import trio

from pulse_trio.contract.grammar import parse_time
from scenario_support import error_code, offered, running

TTL = 10
GRACE = 6
START_TIMEOUT = 5
SETTINGS = dict(start_timeout=START_TIMEOUT, lease_ttl=TTL, cancel_grace=GRACE)


def _seconds(later: str, earlier: str) -> float:
    return (parse_time(later) - parse_time(earlier)).total_seconds()


# -- before start: at once ---------------------------------------------------------

async def test_cancel_scheduled_and_ready_tasks_at_once(virtual_clock, scenario_service, submit, operator):
    service = await scenario_service(**SETTINGS)
    ops = operator(service)
    scheduled = await submit(service, delay=15)
    ready = await submit(service)
    assert (scheduled["state"], ready["state"]) == ("SCHEDULED", "READY")
    for task in (scheduled, ready):
        view = await ops.cancel(task["task_id"], reason="changed my mind")
        assert view["state"] == "CANCELLED" and view["cancel_changed"] is True
        assert view["cancel_requested_at"] is not None and view["attempts"] == []
        assert view["outcome"]["status"] == "CANCELLED" and view["outcome"]["error_code"] == "cancelled"
        assert view["outcome"]["effect_uncertain"] is False
    await trio.sleep(20)  # the scheduled one is never promoted
    assert (await ops.state(scheduled["task_id"])) == "CANCELLED"


async def test_cancel_of_an_offer_revokes_it_and_tells_an_opted_in_holder(virtual_clock, one_task, holding, submit):
    service, ops, task = await one_task(SETTINGS)
    async with holding(service, start=False, cancellation_notifications=True) as (worker, held):
        view = await ops.cancel(task["task_id"], reason="not needed")
        assert view["state"] == "CANCELLED" and view["cancel_changed"] is True
        push = (await worker.push("task.cancel"))["body"]
        assert push["task_id"] == task["task_id"] and push["lease_id"] == held.lease_id
        assert push["reason"] == "not needed"
        assert error_code(await held.start()) == "task_cancelled"
        # the revoked offer no longer takes the session's only slot
        nxt = await submit(service)
        again = await offered(worker)
        assert again.task_id == nxt["task_id"]
    assert (await ops.get(task["task_id"]))["attempts"] == []


async def test_cancel_of_an_offer_without_notifications(virtual_clock, one_task, holding):
    service, ops, task = await one_task(SETTINGS)
    async with holding(service, start=False) as (worker, held):
        await ops.cancel(task["task_id"])
        await worker.listen(3)
        assert not worker.pushed("task.cancel")  # not opted in: never pushed
        assert error_code(await held.start()) == "task_cancelled"
    assert (await ops.state(task["task_id"])) == "CANCELLED"


# -- while running -------------------------------------------------------------------

async def test_cancel_while_running_notifies_caps_renewals_and_accepts_cancelled(virtual_clock, one_task, holding):
    service, ops, task = await one_task(SETTINGS)
    async with holding(service, cancellation_notifications=True) as (worker, held):
        view = await ops.cancel(task["task_id"], reason="operator")
        assert view["state"] == "RUNNING" and view["cancel_changed"] is True
        push = (await worker.push("task.cancel"))["body"]
        requested, deadline = push["cancel_requested_at"], push["grace_expires_at"]
        assert push["task_id"] == task["task_id"] and push["lease_id"] == held.lease_id
        assert _seconds(deadline, requested) == GRACE and push["reason"] == "operator"
        # every renew now shows the intent, and never reaches past the grace deadline
        renewed = await held.renew()
        assert renewed["body"]["lease"]["cancel_requested_at"] == requested
        assert renewed["body"]["lease"]["expires_at"] == deadline  # ttl 10 > grace 6: capped
        await trio.sleep(GRACE - 2)
        again = await held.renew()
        assert again["body"]["lease"]["expires_at"] == deadline
        # a repeated cancel changes nothing
        repeat = await ops.cancel(task["task_id"])
        assert repeat["cancel_changed"] is False and repeat["cancel_requested_at"] == view["cancel_requested_at"]
        done = await held.finish("CANCELLED", {"stopped": True}, error_code="cancelled")
        assert done["type"] == "ack" and "lease" not in done["body"]
        await worker.listen(2)
        assert not worker.pushed("task.cancel")  # told once
    view = await ops.get(task["task_id"])
    assert view["state"] == "CANCELLED" and view["outcome"]["error_code"] == "cancelled"
    assert view["outcome"]["effect_uncertain"] is False and view["outcome"]["result"] == {"stopped": True}
    assert view["attempts"][0]["status"] == "CANCELLED"


async def test_cancel_while_running_without_notifications_shows_on_renew(virtual_clock, one_task, holding):
    service, ops, task = await one_task(SETTINGS)
    async with holding(service) as (worker, held):
        assert "cancel_requested_at" not in (await held.renew())["body"]["lease"]
        view = await ops.cancel(task["task_id"])
        await worker.listen(3)
        assert not worker.pushed("task.cancel")
        lease = (await held.renew())["body"]["lease"]
        assert lease["cancel_requested_at"] is not None
        assert parse_time(lease["cancel_requested_at"]) == parse_time(view["cancel_requested_at"])
        # the work had already completed: SUCCEEDED is still accepted
        assert (await held.finish("SUCCEEDED"))["type"] == "ack"
    assert (await ops.state(task["task_id"])) == "SUCCEEDED"


async def test_cancel_reaches_the_new_owner_after_a_resume(virtual_clock, one_task, connect_worker, holding):
    service, ops, task = await one_task(SETTINGS)
    async with holding(service, cancellation_notifications=True) as (old, held):
        await ops.cancel(task["task_id"], reason="stop")
        first = (await old.push("task.cancel"))["body"]
    # the old connection is gone; the worker comes back and resumes
    async with connect_worker(service, cancellation_notifications=True) as new:
        resumed = await held.resume_on(new)
        assert resumed["type"] == "ack"
        assert resumed["body"]["cancel_requested_at"] == first["cancel_requested_at"]
        assert resumed["body"]["expires_at"] == first["grace_expires_at"]  # the resume is capped too
        second = (await new.push("task.cancel"))["body"]
        assert second["lease_id"] == held.lease_id and second["grace_expires_at"] == first["grace_expires_at"]
        assert (await held.finish("CANCELLED", error_code="cancelled"))["type"] == "ack"
    assert (await ops.state(task["task_id"])) == "CANCELLED"


async def test_cancel_after_grace_escalates(virtual_clock, one_task, holding):
    # escalation is terminal even for retry_uncertain
    service, ops, task = await one_task(SETTINGS, retry_uncertain=True)
    async with holding(service, cancellation_notifications=True) as (worker, held):
        await ops.cancel(task["task_id"])
        deadline = (await worker.push("task.cancel"))["body"]["grace_expires_at"]
        # the worker keeps renewing but cannot outlive the grace
        while True:
            reply = await held.renew()
            if reply["type"] != "ack":
                break
            assert parse_time(reply["body"]["lease"]["expires_at"]) <= parse_time(deadline)
            await trio.sleep(1)
        assert error_code(reply) == "lease_expired"
        assert service.clock.now() >= parse_time(deadline)
        view = await ops.wait_state(task["task_id"], "CANCELLED")
        assert error_code(await held.finish("CANCELLED", error_code="cancelled")) == "lease_expired"
        await worker.listen(2 * TTL)
        assert not worker.pushed("task.assign")  # never dispatched again
    assert view["outcome"]["status"] == "CANCELLED" and view["outcome"]["error_code"] == "cancel_timeout"
    assert view["outcome"]["effect_uncertain"] is True
    assert view["attempts"][0]["status"] == "EXPIRED" and view["attempts"][0]["error_code"] == "cancel_timeout"


async def test_a_retryable_failure_after_a_cancel_is_not_retried(virtual_clock, one_task, holding):
    service, ops, task = await one_task(SETTINGS, max_attempts=5)
    async with holding(service) as (worker, held):
        await ops.cancel(task["task_id"])
        assert (await held.finish("FAILED", error_code="boom", retryable=True))["type"] == "ack"
    view = await ops.get(task["task_id"])
    assert view["state"] == "FAILED" and view["attempt"] == 1


async def test_cancel_of_a_task_waiting_out_its_backoff(virtual_clock, one_task, holding):
    service, ops, task = await one_task(SETTINGS, max_attempts=5)
    async with holding(service) as (worker, held):
        await held.finish("FAILED", error_code="boom", retryable=True)
        assert (await ops.state(task["task_id"])) == "SCHEDULED"
        view = await ops.cancel(task["task_id"])
        assert view["state"] == "CANCELLED" and view["cancel_changed"] is True
        await worker.listen(10)
        assert not worker.pushed("task.assign")


# -- CANCELLED needs an intent; races are decided by commit order ----------------------

async def test_cancelled_finish_without_an_intent_is_refused(virtual_clock, one_task, holding):
    service, ops, task = await one_task(SETTINGS)
    async with holding(service) as (worker, held):
        assert error_code(await held.finish("CANCELLED", error_code="cancelled")) == "cancel_not_requested"
        assert (await ops.state(task["task_id"])) == "RUNNING"  # nothing changed; the lease still holds
        await ops.cancel(task["task_id"])
        # the same revision with the intent now saved is accepted
        assert (await held.finish("CANCELLED", error_code="cancelled"))["type"] == "ack"
    assert (await ops.state(task["task_id"])) == "CANCELLED"


async def _race(ops, held, status):
    """Send a finish and a cancel together; both outcomes come back."""
    out = {}

    async def finish():
        extra = {} if status == "SUCCEEDED" else {"error_code": "cancelled"}
        out["finish"] = await held.finish(status, **extra)

    async def cancel():
        out["cancel"] = await ops.cancel(held.task_id)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(finish)
        nursery.start_soon(cancel)
    return out["finish"], out["cancel"]


async def test_cancel_racing_a_finish_is_decided_by_commit_order(virtual_clock, scenario_service, connect_worker,
                                                                 submit, operator):
    service = await scenario_service(**SETTINGS)
    ops = operator(service)
    rounds = 6
    await submit.many(service, [{} for _ in range(2 * rounds)])
    seen = set()
    async with connect_worker(service) as worker:
        await worker.capacity(1)
        for i in range(2 * rounds):
            held = await running(worker)
            status = "SUCCEEDED" if i % 2 == 0 else "CANCELLED"
            finish, cancel = await _race(ops, held, status)
            view = await ops.get(held.task_id)
            if status == "SUCCEEDED":
                # the finish is accepted either way; the cancel saw RUNNING or the terminal task
                assert finish["type"] == "ack" and view["state"] == "SUCCEEDED"
                seen.add(("SUCCEEDED", cancel["state"]))
                if cancel["state"] == "SUCCEEDED":
                    assert cancel["cancel_changed"] is False
            elif finish["type"] == "ack":
                # the intent committed first: CANCELLED accepted
                assert cancel["state"] == "RUNNING" and cancel["cancel_changed"] is True
                assert view["state"] == "CANCELLED"
                seen.add(("CANCELLED", "accepted"))
            else:
                # the finish committed first and was refused; the intent then stands on a RUNNING task
                assert error_code(finish) == "cancel_not_requested" and view["state"] == "RUNNING"
                assert (await held.finish("CANCELLED", error_code="cancelled"))["type"] == "ack"
                seen.add(("CANCELLED", "refused first"))
    assert seen  # whichever orders happened, each was consistent


async def test_cancel_of_a_terminal_task_reports_it_and_changes_nothing(virtual_clock, one_task, holding):
    service, ops, task = await one_task(SETTINGS)
    async with holding(service) as (worker, held):
        await held.finish("SUCCEEDED", {"n": 1})
    before = await ops.get(task["task_id"])
    after = await ops.cancel(task["task_id"])
    assert after.pop("cancel_changed") is False
    assert after == before and after["state"] == "SUCCEEDED" and after["cancel_requested_at"] is None


async def test_resume_of_a_revoked_offer_is_task_cancelled(virtual_clock, one_task, connect_worker, holding):
    service, ops, task = await one_task(SETTINGS)
    async with holding(service, start=False) as (_, held):
        pass  # the worker goes away holding it
    await ops.cancel(task["task_id"])
    async with connect_worker(service) as new:
        assert error_code(await held.resume_on(new)) == "task_cancelled"
    assert (await ops.state(task["task_id"])) == "CANCELLED"
