"""Chart ``queue``: a paused queue offers nothing, its running leases carry on, and the state is one row."""

from __future__ import annotations

from pulse_trio.store import assign, new_credentials
from pulse_trio.store.queue.queues import pause, paused_queues, queue_controls, resume
from tests.store.conftest import LEASE_TTL_MS, START_TIMEOUT_MS


def _claim(world, w, n: int = 5, **kwargs):
    return world.run(assign, session_id=w.session_id, credentials=new_credentials(n),
                     start_timeout_ms=START_TIMEOUT_MS, default_lease_ttl_ms=LEASE_TTL_MS, **kwargs).offers


def test_pause_and_resume_are_idempotent_and_recorded(world):
    first = world.run(pause, queue="billing", paused_by="cli@h")
    assert (first.changed, first.control.state, first.control.paused_by) == (True, "PAUSED", "cli@h")
    world.advance(1_000)
    again = world.run(pause, queue="billing", paused_by="http:tok_x")
    assert (again.changed, again.control.paused_by, again.control.paused_at) == (False, "cli@h",
                                                                                 first.control.paused_at)
    assert world.store.run_sync(paused_queues) == {"billing"}
    back = world.run(resume, queue="billing", resumed_by="cli@h")
    assert (back.changed, back.control.state) == (True, "ACTIVE")
    assert not world.run(resume, queue="billing", resumed_by="cli@h").changed
    assert world.store.run_sync(paused_queues) == frozenset()
    # A queue nobody touched is active, and resuming it writes nothing.
    assert not world.run(resume, queue="never", resumed_by="cli@h").changed
    assert list(world.store.run_sync(queue_controls)) == ["billing"]


def test_a_paused_queue_offers_nothing_while_its_running_lease_finishes(world):
    w = world.worker("a", "b", capacity=10)
    running = world.running(w, queue="a")
    world.run(pause, queue="a", paused_by="test")
    waiting = [world.submit("a") for _ in range(3)]  # submissions are still accepted
    other = world.submit("b")
    # The paused set read in the claim's own transaction (None) and handed in by the dispatcher agree.
    assert [o.task.task_id for o in _claim(world, w)] == [other]
    assert _claim(world, w, paused=frozenset({"a"})) == ()
    assert world.renew(w, running, 2).lease.state == "RUNNING"
    world.finish(w, running, 3)
    assert world.task(running.task.task_id).task.state == "SUCCEEDED"
    assert {world.task(t).task.state for t in waiting} == {"READY"}
    world.run(resume, queue="a", resumed_by="test")
    assert sorted(o.task.task_id for o in _claim(world, w)) == sorted(waiting)


def test_a_claim_trusts_the_paused_set_it_is_given(world):
    """The dispatcher's in-memory set decides (it is re-read twice a second); None reads the table."""
    w = world.worker("a")
    task = world.submit("a")
    world.run(pause, queue="a", paused_by="test")
    assert [o.task.task_id for o in _claim(world, w, paused=frozenset())] == [task]


def test_a_session_whose_every_queue_is_paused_is_offered_nothing_and_the_claim_does_not_fail(world):
    """Its claim has no source to read: it answers with no offers (it once sent an empty statement and
    failed, so each dispatch pass logged a failed claim and counted its slots as held until reconciled)."""
    w = world.worker("a", capacity=3)
    world.submit("a")
    world.run(pause, queue="a", paused_by="test")
    result = world.run(assign, session_id=w.session_id, credentials=new_credentials(3),
                       start_timeout_ms=START_TIMEOUT_MS, default_lease_ttl_ms=LEASE_TTL_MS)
    assert (result.offers, result.free_slots) == ((), 3)
    assert _claim(world, w, paused=frozenset({"a"})) == ()
    keyed = world.worker("a", capacity=3, keys=True)
    assert _claim(world, keyed, paused=frozenset({"a"})) == ()
