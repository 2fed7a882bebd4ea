"""Chart `lease`, trigger `resume`: moving a lease to a newer session (docs/protocol.md §4.6)."""

from __future__ import annotations

import datetime as dt

import pytest

from pulse_trio.store import Refusal, disconnect, resume


def resumed(world, new, old, offer, **overrides):
    return world.run(resume, request=world.resume_request(new, old, offer, **overrides), start_timeout_ms=30_000)


def resume_it(world, new, old, offer, **overrides):
    """The resumed lease, or the refusal."""
    result = resumed(world, new, old, offer, **overrides)
    return result if isinstance(result, Refusal) else result.lease


def code(result):
    return result.code if isinstance(result, Refusal) else None


def test_resume_a_running_lease(world):
    old = world.worker("q")
    offer = world.running(old)
    world.run(disconnect, session_id=old.session_id)
    new = world.worker("q")
    world.advance(5_000)
    lease = resume_it(world, new, old, offer)
    assert lease.revision == 3 and lease.epoch == new.epoch and lease.state == "RUNNING"
    assert lease.expires_at == world.now + dt.timedelta(seconds=30)
    assert code(world.renew(old, offer, 3)) == "lease_not_owned"
    assert world.renew(new, offer, 3).lease.revision == 4
    assert world.finish(new, offer, 4).lease is None
    assert world.task(offer.task.task_id).task.state == "SUCCEEDED"


def test_resume_an_offer_then_start_it(world):
    old = world.worker("q")
    offer = world.offer(old)
    new = world.worker("q")
    lease = resume_it(world, new, old, offer)
    assert lease.state == "OFFERED" and lease.revision == 2
    assert code(world.start(old, offer, revision=2)) == "lease_not_owned"
    assert world.start(new, offer, revision=2).lease.state == "RUNNING"


def test_resumed_lease_counts_against_the_new_sessions_capacity(world):
    old = world.worker("q")
    offer = world.running(old)
    new = world.worker("q", capacity=1)
    world.submit()
    resume_it(world, new, old, offer)
    assert world.assign(new, 5) == ()


@pytest.mark.parametrize("override,expected", [
    (dict(instance_secret="A" * 43), "lease_not_found"),
    (dict(lease_secret="A" * 43), "lease_not_found"),
    (dict(instance_id="ins_UNKNOWN"), "lease_not_found"),
    (dict(lease_id="lse_UNKNOWN"), "lease_not_found"),
    (dict(task_id="tsk_OTHER"), "lease_not_found"),
])
def test_wrong_secrets_look_like_an_unknown_lease(world, override, expected):
    old = world.worker("q")
    offer = world.running(old)
    new = world.worker("q")
    assert code(resume_it(world, new, old, offer, **override)) == expected
    assert world.sql("SELECT owner_session_id FROM leases") == [(old.session_id,)]


def test_resume_after_expiry_is_refused(world):
    old = world.worker("q")
    offer = world.running(old)
    new = world.worker("q")
    world.advance(30_000)
    assert code(resume_it(world, new, old, offer)) == "lease_expired"


def test_resume_by_a_stale_epoch_is_refused(world):
    old = world.worker("q")
    offer = world.running(old)
    newer = world.worker("q")
    assert resume_it(world, newer, old, offer).epoch == newer.epoch
    # the lease moved: resuming it again from the first instance fails
    newest = world.worker("q")
    assert code(resume_it(world, newest, old, offer)) == "lease_not_owned"
    # a session not newer than the owner cannot take it
    assert code(resume_it(world, old, newer, offer)) == "lease_not_owned"
    # the same session re-resuming its own lease: epoch not older
    assert code(resume_it(world, newer, newer, offer)) == "lease_not_owned"
    assert resume_it(world, newest, newer, offer).epoch == newest.epoch


def test_resume_needs_the_queue_and_the_keys_declaration(world):
    old = world.worker("q", keys=True)
    offer = world.running(old, concurrency_key="acct:1")
    elsewhere = world.worker("other")
    assert code(resume_it(world, elsewhere, old, offer)) == "permission_denied"
    undeclared = world.worker("q")
    assert code(resume_it(world, undeclared, old, offer)) == "concurrency_keys_not_declared"
    declared = world.worker("q", keys=True)
    assert resume_it(world, declared, old, offer).epoch == declared.epoch


def test_resume_of_a_finished_or_revoked_lease(world):
    from pulse_trio.store import request_cancel

    old = world.worker("q")
    done = world.running(old)
    world.finish(old, done, 2)
    offered = world.offer(old)
    world.run(request_cancel, task_id=offered.task.task_id)
    new = world.worker("q")
    assert code(resume_it(world, new, old, done)) == "invalid_transition"
    assert code(resume_it(world, new, old, offered)) == "task_cancelled"


def test_resume_keeps_the_cancel_deadline(world):
    from pulse_trio.store import request_cancel

    old = world.worker("q")
    offer = world.running(old)
    world.setting("cancel_grace", 10_000)
    world.run(request_cancel, task_id=offer.task.task_id)
    new = world.worker("q")
    lease = resume_it(world, new, old, offer)
    assert lease.expires_at == world.now + dt.timedelta(seconds=10)
    assert lease.cancel_requested_at == world.now


def test_resume_says_whether_an_operators_drain_holds_the_session(world):
    from pulse_trio.store.instance.instances import operator_drain

    old = world.worker("q")
    kept, drained = world.running(old), world.running(old)
    fresh = world.worker("q")
    assert resumed(world, fresh, old, kept).operator_drained is False
    world.run(operator_drain, instance_id=old.instance_id)
    assert resumed(world, fresh, old, drained).operator_drained is True  # inherited with the lease
    newest = world.worker("q")
    assert resumed(world, newest, fresh, kept).operator_drained is True  # and passed on again
