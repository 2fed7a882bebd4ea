"""Timers: offer lapse, lease expiry with safe retry, promote is in test_submit, quarantine in test_permits."""

from __future__ import annotations

import datetime as dt

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


# -- the timers loop in a serve group: which ticks tell the other members ----------------------------

class _WorldClock:
    """The timers' clock at the world's virtual now."""

    def __init__(self, world) -> None:
        self.world = world

    def now(self):
        return self.world.now


def _told_by_a_tick(world) -> int:
    """Run one tick of the service's timers on the world's store and clock: how often it told the other members."""
    import trio

    from pulse_trio.config import Settings
    from pulse_trio.server.hub import SessionHub
    from pulse_trio.server.live_settings import LiveSettings
    from pulse_trio.server.metrics import ServiceMetrics
    from pulse_trio.server.timers import Timers

    told = []
    hub = SessionHub(tell_others=lambda: told.append(1))
    timers = Timers(store=world.store, clock=_WorldClock(world), hub=hub, settings=LiveSettings(Settings()),
                    metrics=ServiceMetrics())
    trio.run(timers.tick)
    return len(told)


def test_a_tick_that_makes_tasks_ready_tells_the_other_members_once(world):
    w = world.worker("q", capacity=10)
    world.offer(w)
    world.offer(w)
    world.submit(due_at=world.now + dt.timedelta(seconds=30))
    world.advance(30_000)  # two offers lapse and the delayed task comes due: one tick, one word to the others
    assert _told_by_a_tick(world) == 1
    assert _told_by_a_tick(world) == 0  # nothing was due any more


def test_a_lost_attempt_retried_tells_the_others_and_one_that_ends_the_task_does_not(world):
    w = world.worker("q", capacity=10)
    world.running(w)  # no retry_uncertain: the expiry ends the task UNKNOWN
    world.advance(30_000)
    assert _told_by_a_tick(world) == 0
    world.running(w, retry_uncertain=True, max_attempts=2)
    world.advance(30_000)
    assert _told_by_a_tick(world) == 1  # READY again, effect_uncertain: another member's worker may take it
