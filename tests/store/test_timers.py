"""Timers: offer lapse, lease expiry with safe retry, promote is in test_submit, quarantine in test_permits."""

from __future__ import annotations

from pulse_trio.store import expire, lapse


def test_lapse_returns_the_task_to_the_queue_without_an_attempt(world):
    w = world.worker("q")
    offer = world.offer(w)
    world.advance(29_999)
    assert world.run(lapse).count == 0
    world.advance(1)
    result = world.run(lapse)
    assert result.count == 1 and result.ended[0].session_id == w.session_id and result.ended[0].state == "LAPSED"
    view = world.task(offer.task.task_id)
    assert view.task.state == "READY" and view.task.attempt == 0 and not view.task.effect_uncertain
    (again,) = world.assign(w)
    assert again.task.attempt == 1 and not again.task.effect_uncertain


def test_expire_without_retry_uncertain_is_unknown(world):
    w = world.worker("q")
    offer = world.running(w)
    world.advance(30_000)
    result = world.run(expire)
    assert result.count == 1 and result.ended[0].task_state == "UNKNOWN"
    view = world.task(offer.task.task_id)
    assert view.task.state == "UNKNOWN" and view.outcome.error_code == "lease_expired"
    assert view.outcome.effect_uncertain and view.attempts[0].status == "EXPIRED"


def test_expire_with_retry_uncertain_redispatches_flagged_and_counts_the_attempt(world):
    w = world.worker("q")
    offer = world.running(w, retry_uncertain=True, max_attempts=2)
    world.advance(30_000)
    world.run(expire)
    view = world.task(offer.task.task_id)
    assert view.task.state == "READY" and view.task.effect_uncertain
    (again,) = world.assign(w)
    assert again.task.effect_uncertain and again.task.attempt == 2
    world.start(w, again)
    world.advance(30_000)
    world.run(expire)
    final = world.task(offer.task.task_id)
    assert final.task.state == "UNKNOWN", "attempts exhausted"


def test_renew_in_time_keeps_the_lease(world):
    w = world.worker("q")
    offer = world.running(w)
    world.advance(20_000)
    world.renew(w, offer, 2)
    world.advance(20_000)
    assert world.run(expire).count == 0
    assert world.task(offer.task.task_id).task.state == "RUNNING"


def test_timers_batch(world):
    w = world.worker("q", capacity=10)
    for _ in range(5):
        world.submit()
    world.assign(w, 5)
    world.advance(30_000)
    first = world.run(lapse, limit=2)
    assert first.count == 2 and first.more
    assert world.run(lapse, limit=10).count == 3
