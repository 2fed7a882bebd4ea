"""Chart `task`, trigger `retry`: manual recovery (docs/task-recovery.md §3)."""

from __future__ import annotations

import datetime as dt

import pytest

from pulse_trio.store import NewTask, Refusal, expire, request_cancel, retry, submit


def test_retry_of_a_failed_task_copies_routing_and_keeps_the_idempotency_key(world):
    w = world.worker("q", keys=True)
    offer = world.running(w, priority=4, concurrency_key="acct", idempotency_key="invoice-9", payload_json='{"i":9}')
    world.finish(w, offer, 2, status="FAILED", error_code="declined")
    world.advance(60_000)
    result = world.run(retry, source_task_id=offer.task.task_id)
    assert result.created and not result.effect_uncertain and result.retry_of == offer.task.task_id
    new = world.task(result.task_id).task
    assert (new.queue, new.kind, new.payload, new.priority, new.concurrency_key, new.idempotency_key) == (
        "q", "k", '{"i":9}', 4, "acct", "invoice-9")
    assert new.state == "READY" and new.attempt == 0 and new.retry_of == offer.task.task_id
    assert world.task(offer.task.task_id).retried_by == result.task_id
    (again,) = world.assign(w)
    assert again.task.retry_of == offer.task.task_id and again.task.attempt == 1


def test_retry_is_idempotent_per_source(world):
    w = world.worker("q")
    offer = world.running(w)
    world.finish(w, offer, 2, status="UNKNOWN", error_code="timeout")
    first = world.run(retry, source_task_id=offer.task.task_id)
    second = world.run(retry, source_task_id=offer.task.task_id)
    assert first.created and not second.created and second.task_id == first.task_id
    assert first.effect_uncertain, "UNKNOWN: the effect may have happened"


def test_retry_after_lost_lease_and_after_escalation_is_uncertain(world):
    w = world.worker("q")
    lost = world.running(w)
    world.advance(30_000)
    world.run(expire)
    assert world.run(retry, source_task_id=lost.task.task_id).effect_uncertain
    other = world.worker("r")
    escalated = world.running(other, queue="r")
    world.setting("cancel_grace", 1)
    world.run(request_cancel, task_id=escalated.task.task_id)
    world.advance(1)
    world.run(expire)
    assert world.run(retry, source_task_id=escalated.task.task_id).effect_uncertain


@pytest.mark.parametrize("how", ["failed", "failed_retryable_last", "cancelled_by_worker", "succeeded"])
def test_an_outcome_reported_after_a_lost_attempt_keeps_its_uncertainty(world, how):
    """Attempt 1 was lost after start (it may have had its effect); attempt 2 reports. A report speaks for
    its own attempt alone: FAILED or CANCELLED leaves attempt 1's effect as uncertain as before, so the
    outcome (and a manual retry's offer) says so; SUCCEEDED is the effect, done."""
    w = world.worker("q")
    lost = world.running(w, retry_uncertain=True, max_attempts=2)
    task_id = lost.task.task_id
    world.advance(30_000)
    world.run(expire)
    (second,) = world.assign(w)
    assert second.task.effect_uncertain and second.task.attempt == 2
    world.start(w, second)
    if how == "failed":
        world.finish(w, second, 2, status="FAILED", error_code="declined")
    elif how == "failed_retryable_last":
        world.finish(w, second, 2, status="FAILED", error_code="busy", retryable=True)
    elif how == "cancelled_by_worker":
        world.run(request_cancel, task_id=task_id)
        world.finish(w, second, 2, status="CANCELLED", error_code="cancelled")
    else:
        world.finish(w, second, 2)
    view = world.task(task_id)
    assert [a.status for a in view.attempts][0] == "EXPIRED"
    assert view.outcome.effect_uncertain is (how != "succeeded"), (view.task.state, view.outcome)
    if how != "succeeded":
        assert world.run(retry, source_task_id=task_id).effect_uncertain, "the retry's handler must check first"


def test_a_reported_failure_without_a_lost_attempt_stays_certain(world):
    w = world.worker("q")
    offer = world.running(w)
    world.finish(w, offer, 2, status="FAILED", error_code="declined")
    assert world.task(offer.task.task_id).outcome.effect_uncertain is False
    assert not world.run(retry, source_task_id=offer.task.task_id).effect_uncertain


def test_retry_of_a_task_cancelled_before_start_is_certain(world):
    task_id = world.submit()
    world.run(request_cancel, task_id=task_id)
    assert not world.run(retry, source_task_id=task_id).effect_uncertain


@pytest.mark.parametrize("state", ["READY", "SCHEDULED", "RUNNING", "SUCCEEDED"])
def test_retry_of_a_task_that_is_not_recoverable_is_refused(world, state):
    w = world.worker("q")
    if state == "READY":
        task_id = world.submit()
    elif state == "SCHEDULED":
        task_id = world.submit(due_at=world.now + dt.timedelta(hours=1))
    else:
        offer = world.running(w)
        task_id = offer.task.task_id
        if state == "SUCCEEDED":
            world.finish(w, offer, 2)
    result = world.run(retry, source_task_id=task_id)
    assert isinstance(result, Refusal) and result.code == "invalid_transition"
    assert world.sql("SELECT COUNT(*) FROM tasks") == [(1,)]


def test_retry_of_an_unknown_task(world):
    assert world.run(retry, source_task_id="tsk_NOPE").code == "task_not_found"


def test_retries_are_not_deduplicated_against_their_source_but_submits_are(world):
    (r,) = world.run(submit, tasks=[NewTask("q", "k", idempotency_key="same")])
    world.run(request_cancel, task_id=r.task_id)
    retried = world.run(retry, source_task_id=r.task_id)
    assert retried.created
    (again,) = world.run(submit, tasks=[NewTask("q", "k", idempotency_key="same")])
    assert again.task_id == r.task_id and not again.created
