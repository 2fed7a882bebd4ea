"""Chart `cancellation`: request, notify, resolve (finish), escalate (expiry at the grace deadline)."""

from __future__ import annotations

import datetime as dt

from pulse_trio.store import Refusal, expire, notify_cancellations, request_cancel, resume


def cancel(world, task_id, **kw):
    return world.run(request_cancel, task_id=task_id, reason="operator", requested_by="alice", **kw)


def test_cancel_ready_and_scheduled_at_once(world):
    ready = world.submit()
    later = world.submit(due_at=world.now + dt.timedelta(hours=1))
    for task_id in (ready, later):
        result = cancel(world, task_id)
        assert result.changed and result.task_state == "CANCELLED" and result.intent_state == "RESOLVED"
        view = world.task(task_id)
        assert view.task.state == "CANCELLED" and view.cancel_requested_at == world.now
        assert view.outcome.status == "CANCELLED" and not view.outcome.effect_uncertain


def test_cancel_offered_revokes_and_start_gets_task_cancelled(world):
    w = world.worker("q", notify=True, keys=True)
    offer = world.offer(w, concurrency_key="acct")
    result = cancel(world, offer.task.task_id)
    assert result.task_state == "CANCELLED" and result.revoked_lease.lease_id == offer.lease.lease_id
    assert world.start(w, offer).code == "task_cancelled"
    assert world.sql("SELECT state FROM key_permits") == [("RELEASED",)]
    assert world.sql("SELECT outstanding FROM key_counters") == [(0,)]
    (notice,) = world.run(notify_cancellations, session_ids=[w.session_id])
    assert notice.lease_id == offer.lease.lease_id and notice.reason == "operator"
    assert world.run(notify_cancellations, session_ids=[w.session_id]) == ()


def test_cancel_running_saves_the_intent_notifies_and_caps_renewals(world):
    w = world.worker("q", notify=True)
    offer = world.running(w)
    world.advance(1_000)
    world.setting("cancel_grace", 10_000)
    result = cancel(world, offer.task.task_id)
    assert result.intent_state == "REQUESTED" and result.task_state == "RUNNING"
    assert result.grace_expires_at == world.now + dt.timedelta(seconds=10)
    (notice,) = world.run(notify_cancellations, session_ids=[w.session_id])
    assert notice.grace_expires_at == result.grace_expires_at and notice.session_id == w.session_id
    assert world.sql("SELECT state FROM cancel_intents") == [("NOTIFIED",)]
    world.advance(2_000)
    renewed = world.renew(w, offer, 2)
    assert renewed.lease.cancel_requested_at == result.cancel_requested_at
    assert renewed.lease.expires_at == result.grace_expires_at, "never past the grace deadline"


def test_sessions_that_did_not_opt_in_are_not_notified(world):
    w = world.worker("q", notify=False)
    offer = world.running(w)
    cancel(world, offer.task.task_id)
    assert world.run(notify_cancellations, session_ids=[w.session_id]) == ()
    assert world.renew(w, offer, 2).lease.cancel_requested_at is not None


def test_finish_cancelled_after_the_intent_resolves_it(world):
    w = world.worker("q")
    offer = world.running(w)
    cancel(world, offer.task.task_id)
    done = world.finish(w, offer, 2, status="CANCELLED", error_code="stopped")
    assert not isinstance(done, Refusal)
    view = world.task(offer.task.task_id)
    assert view.task.state == "CANCELLED" and not view.outcome.effect_uncertain
    assert world.sql("SELECT state FROM cancel_intents") == [("RESOLVED",)]


def test_work_that_completed_anyway_finishes_succeeded(world):
    w = world.worker("q")
    offer = world.running(w)
    cancel(world, offer.task.task_id)
    world.finish(w, offer, 2, status="SUCCEEDED")
    assert world.task(offer.task.task_id).task.state == "SUCCEEDED"
    assert world.sql("SELECT state FROM cancel_intents") == [("RESOLVED",)]


def test_retryable_failure_after_cancel_is_not_retried(world):
    w = world.worker("q")
    offer = world.running(w)
    cancel(world, offer.task.task_id)
    world.finish(w, offer, 2, status="FAILED", error_code="x", retryable=True)
    assert world.task(offer.task.task_id).task.state == "FAILED"


def test_escalation_when_the_grace_runs_out(world):
    w = world.worker("q", keys=True)
    offer = world.running(w, concurrency_key="acct", retry_uncertain=True)
    world.setting("cancel_grace", 5_000)
    cancel(world, offer.task.task_id)
    world.advance(4_999)
    assert world.run(expire).count == 0
    world.advance(1)
    (end,) = world.run(expire).ended
    assert end.task_state == "CANCELLED"
    view = world.task(offer.task.task_id)
    assert view.outcome.error_code == "cancel_timeout" and view.outcome.effect_uncertain
    assert world.sql("SELECT state FROM cancel_intents") == [("ESCALATED",)]
    assert world.sql("SELECT state FROM key_permits") == [("QUARANTINED",)], "the lost worker may still run"
    assert world.finish(w, offer, 2, status="CANCELLED", error_code="late").code == "lease_expired"


def test_cancel_of_a_terminal_task_changes_nothing(world):
    w = world.worker("q")
    offer = world.running(w)
    world.finish(w, offer, 2)
    result = cancel(world, offer.task.task_id)
    assert not result.changed and result.task_state == "SUCCEEDED" and result.intent_state is None
    assert world.sql("SELECT COUNT(*) FROM cancel_intents") == [(0,)]


def test_cancel_twice_is_a_no_op(world):
    w = world.worker("q")
    offer = world.running(w)
    first = cancel(world, offer.task.task_id)
    world.advance(1_000)
    second = cancel(world, offer.task.task_id)
    assert not second.changed and second.cancel_requested_at == first.cancel_requested_at


def test_cancel_unknown_task(world):
    assert cancel(world, "tsk_NOPE").code == "task_not_found"


def test_new_owner_after_resume_is_notified_again(world):
    old = world.worker("q", notify=True)
    offer = world.running(old)
    cancel(world, offer.task.task_id)
    assert len(world.run(notify_cancellations, session_ids=[old.session_id])) == 1
    new = world.worker("q", notify=True)
    world.run(resume, request=world.resume_request(new, old, offer), start_timeout_ms=30_000)
    (notice,) = world.run(notify_cancellations, session_ids=[new.session_id, old.session_id])
    assert notice.session_id == new.session_id
    assert world.run(notify_cancellations, session_ids=[new.session_id]) == ()


def test_cancelled_before_start_after_a_lost_attempt_is_uncertain(world):
    w = world.worker("q")
    offer = world.running(w, retry_uncertain=True)
    world.advance(30_000)
    world.run(expire)
    result = cancel(world, offer.task.task_id)
    assert result.task_state == "CANCELLED"
    assert world.task(offer.task.task_id).outcome.effect_uncertain
