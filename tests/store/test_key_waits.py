"""No head-of-line blocking at any depth (docs/keyed-concurrency.md §3): keys at their limit are set aside.

A key found at its limit has its READY tasks set aside (task.wait_for_key),
out of the pick-up range every claim reads; each permit released brings one
back in each place (queue and kind) where the key waits (task.key_freed).
Depths here are far past any page or scan bound of a claim (``page`` ≤ 64
rows, ``max_scan`` = 8 × want + 64, set-aside chunks of ``WAIT_CHUNK``).
"""

from __future__ import annotations

import pytest

from pulse_trio.store import NewTask, expire, finish, lapse, promote, release_after_quarantine, request_cancel, submit
from pulse_trio.store.engine.inputs import FinishReport
from pulse_trio.store.queue.queues import pause
from pulse_trio.store.task.retention import purge, retention_plan
from pulse_trio.store.task.steps import WAIT_CHUNK, waiting_of_key
from sql_support import index_reads, purge_held_back

DAY_MS = 86_400_000
DEEP = 4 * WAIT_CHUNK + 37  # several set-aside chunks, hundreds of claim pages
#: A task of key "cust", ahead of the rest in pick-up order, where the session of ``_taker`` does not take it.
AHEAD_WHERE_NONE_TAKE = {
    "in a paused queue": NewTask("paused", "k", priority=9, concurrency_key="cust"),
    "in a queue it does not take": NewTask("other", "k", priority=9, concurrency_key="cust"),
    "of a kind it does not name": NewTask("q", "report", priority=9, concurrency_key="cust"),
}


def _flood(world, key: str, count: int, *, queue: str = "q", priority: int = 9) -> list[str]:
    tasks = [NewTask(queue, "k", priority=priority, concurrency_key=key) for _ in range(count)]
    return [r.task_id for r in world.run(submit, tasks=tasks)]


def _waiting(world, key: str) -> int:
    ((n,),) = world.sql("SELECT COUNT(*) FROM tasks WHERE concurrency_key = %s AND pick_state = 'KEY_WAIT'", (key,))
    return n


def _ready_in_range(world, key: str) -> int:
    ((n,),) = world.sql("SELECT COUNT(*) FROM tasks WHERE concurrency_key = %s AND pick_state = 'KEYED'", (key,))
    return n


def _taker(world):
    """A keyed session on kind ``k`` of ``q`` and on the queue ``paused``, which is paused once it has met a key."""
    return world.worker("q", "paused", keys=True, capacity=5, kinds={"q": ["k"]})


def test_a_deep_blocked_key_blocks_nothing_behind_it_in_any_queue_or_priority(world):
    holder = world.worker("a", keys=True, capacity=1)
    held = world.offer(holder, queue="a", concurrency_key="hot")  # "hot" (limit 1) is at its limit now
    world.advance(1)
    _flood(world, "hot", DEEP, queue="a", priority=9)  # ahead of everything below in pick-up order
    _flood(world, "hot", DEEP, queue="b", priority=5)
    world.advance(1)
    plain_a = world.submit(queue="a", priority=0)
    world.advance(1)
    cold_b = world.submit(queue="b", priority=3, concurrency_key="cold")
    world.advance(1)
    plain_b = world.submit(queue="b", priority=0)
    w = world.worker("a", "b", keys=True, capacity=10)
    offers = world.assign(w, 3)
    # effective_at: cold_b is 90 s earlier than its submit; the plain ones are in submit order
    assert [o.task.task_id for o in offers] == [cold_b, plain_a, plain_b]
    assert all(o.task.concurrency_key != "hot" for o in offers)
    assert _waiting(world, "hot") == 2 * DEEP and _ready_in_range(world, "hot") == 0
    assert held.task.concurrency_token == 1


def test_work_behind_is_offered_on_the_first_claim_whatever_the_depth(world):
    holder = world.worker("q", keys=True, capacity=1)
    world.offer(holder, concurrency_key="hot")
    _flood(world, "hot", DEEP)
    world.advance(1)
    behind = [world.submit(priority=0), world.submit(priority=0, concurrency_key="other")]
    w = world.worker("q", keys=True, capacity=2)
    # one free slot would scan at most 8 × 1 + 64 rows: far fewer than the blocked run ahead
    assert {o.task.task_id for o in world.assign(w, 1)} <= set(behind)
    assert len(world.assign(w, 1)) == 1
    assert _ready_in_range(world, "hot") == 0


def test_a_set_aside_run_is_not_read_again_by_later_claims(world):
    holder = world.worker("q", keys=True, capacity=1)
    world.offer(holder, concurrency_key="hot")
    _flood(world, "hot", DEEP)
    w = world.worker("q", keys=True, capacity=50)
    assert world.assign(w, 5) == ()
    assert _waiting(world, "hot") == DEEP
    # a later claim's pick-up range holds none of them: the head it reads is what came after
    world.advance(1)
    later = world.submit()
    (offer,) = world.assign(w, 5)
    assert offer.task.task_id == later
    assert _waiting(world, "hot") == DEEP


def test_each_released_permit_brings_back_the_first_waiting_task(world):
    holder = world.worker("q", keys=True, capacity=1)
    held = world.offer(holder, concurrency_key="hot")
    # one submit, one effective_at: pick-up order is task_id order
    first, *rest = sorted(_flood(world, "hot", 3 * WAIT_CHUNK))
    w = world.worker("q", keys=True, capacity=5)
    assert world.assign(w, 5) == ()
    world.start(holder, held)
    world.finish(holder, held, 2)  # release: one waiting task of "hot" competes again
    assert _ready_in_range(world, "hot") == 1 and _waiting(world, "hot") == 3 * WAIT_CHUNK - 1
    (nxt,) = world.assign(w, 5)
    assert nxt.task.task_id == first and nxt.task.concurrency_token == 2
    assert world.assign(w, 5) == ()
    world.start(w, nxt)
    world.finish(w, nxt, 2)
    (again,) = world.assign(w, 5)
    assert again.task.task_id == rest[0] and again.task.concurrency_token == 3


def test_a_key_with_a_limit_of_several_gets_as_many_back_as_were_released(world):
    holder = world.worker("q", keys=True, capacity=5)
    world.run(submit, tasks=[NewTask("q", "k", concurrency_key="wide", concurrency_limit=2) for _ in range(2)])
    held = world.assign(holder, 2)
    world.run(submit, tasks=[NewTask("q", "k", concurrency_key="wide", concurrency_limit=2) for _ in range(900)])
    w = world.worker("q", keys=True, capacity=10)
    assert world.assign(w, 10) == ()
    for offer in held:
        world.start(holder, offer)
        world.finish(holder, offer, 2)
    got = world.assign(w, 10)
    assert [o.task.concurrency_token for o in got] == [3, 4]
    assert world.assign(w, 10) == ()


def test_a_lapsed_offer_releases_its_permit_and_a_waiting_task_comes_back(world):
    from pulse_trio.store import lapse

    holder = world.worker("q", keys=True, capacity=1)
    held = world.offer(holder, concurrency_key="hot")
    _flood(world, "hot", 700)
    w = world.worker("q", keys=True, capacity=5)
    assert world.assign(w, 5) == ()
    world.advance(31_000)  # past the start timeout: the offer lapses, its task is READY again
    world.run(lapse, now=world.now)
    got = world.assign(w, 5)
    assert len(got) == 1 and got[0].task.concurrency_token == 2
    # the lapsed task is READY again: as the key is taken, it waits with the others
    assert world.task(held.task.task_id).task.state == "READY"
    assert _ready_in_range(world, "hot") == 0 and _waiting(world, "hot") == 700


def test_cancelling_the_task_brought_back_brings_back_another(world):
    holder = world.worker("q", keys=True, capacity=1)
    held = world.offer(holder, concurrency_key="hot")
    first, second, *_ = sorted(_flood(world, "hot", 600))
    w = world.worker("q", keys=True, capacity=5)
    assert world.assign(w, 5) == ()
    world.start(holder, held)
    world.finish(holder, held, 2)
    world.run(request_cancel, task_id=first)  # the one brought back: another must take its place
    (nxt,) = world.assign(w, 5)
    assert nxt.task.task_id == second


@pytest.mark.parametrize("where", list(AHEAD_WHERE_NONE_TAKE))
def test_a_released_permit_brings_back_a_task_in_each_place_its_key_waits(world, where):
    """The key's first waiting task is where no session takes it: the task a session would take comes back too.

    (Only the first in pick-up order came back: with no permit of the key out, the key's other tasks stayed
    set aside until another release of the key, which might never come.)"""
    holder = world.worker("q", keys=True, capacity=1)
    held = world.offer(holder, concurrency_key="cust")  # "cust" (limit 1) is at its limit
    world.advance(1)
    world.run(submit, tasks=[AHEAD_WHERE_NONE_TAKE[where]])
    world.advance(1)
    here = world.submit(concurrency_key="cust")
    w = _taker(world)
    assert world.assign(w, 5) == () and _waiting(world, "cust") == 2  # met at its limit: both set aside
    world.run(pause, queue="paused", paused_by="ops")
    world.start(holder, held)
    world.finish(holder, held, 2)  # no permit of "cust" is out now
    assert [o.task.task_id for o in world.assign(w, 5)] == [here]


def test_cancelling_the_task_brought_back_brings_back_another_in_its_place(world):
    """The top-up of a cancel comes from the cancelled task's queue and kind, not from the first in pick-up order."""
    holder = world.worker("q", keys=True, capacity=1)
    held = world.offer(holder, concurrency_key="cust")
    world.advance(1)
    _flood(world, "cust", 2, queue="paused", priority=9)  # ahead in pick-up order
    first, second = sorted(_flood(world, "cust", 2, priority=0))
    w = _taker(world)
    assert world.assign(w, 5) == () and _waiting(world, "cust") == 4
    world.run(pause, queue="paused", paused_by="ops")
    world.start(holder, held)
    world.finish(holder, held, 2)  # one comes back in each queue
    world.run(request_cancel, task_id=first)  # the one brought back in "q": another must take its place there
    (nxt,) = world.assign(w, 5)
    assert nxt.task.task_id == second


def test_bringing_back_reads_a_few_entries_per_place_whatever_the_depth(world):
    """A release finds the key's places and their first waiting tasks through the index: it reads no run of them."""
    holder = world.worker("q", "r", keys=True, capacity=1)
    world.offer(holder, concurrency_key="hot")
    w = world.worker("q", "r", keys=True, capacity=5)

    def reads_after(depth: int) -> int:
        for queue, kind in (("q", "k"), ("q", "j"), ("r", "k")):
            world.run(submit, tasks=[NewTask(queue, kind, concurrency_key="hot") for _ in range(depth)])
        while _ready_in_range(world, "hot"):
            assert world.assign(w, 5) == ()  # each claim sets a chunk aside
        back, read = index_reads(world.db, lambda tx: waiting_of_key(tx, "hot", 2))
        assert len(back) == 3 * 2
        return read

    few = reads_after(2)
    many = reads_after(WAIT_CHUNK)
    assert _waiting(world, "hot") == 3 * (WAIT_CHUNK + 2)
    assert many < few + 5, (few, many)


def test_bringing_back_reads_a_few_entries_per_place_while_purge_lags(world):
    """The index keeps the entries of tasks that waited and are gone until InnoDB purges them, which a
    long transaction (a backup's snapshot) or a loaded machine holds back.

    (Counted in the estimate of the range after the released place, they once made the optimizer read the
    key's waiting tasks from the first of its queue on instead: a run as deep as the place released.)"""
    world.setting("task_retention", DAY_MS)
    holder = world.worker("q", "r", keys=True, capacity=1)
    world.offer(holder, concurrency_key="hot")
    w = world.worker("q", "r", keys=True, capacity=5)

    def set_aside(tasks: list[NewTask]) -> list[str]:
        ids = [r.task_id for r in world.run(submit, tasks=tasks)]
        while _ready_in_range(world, "hot"):
            assert world.assign(w, 5) == ()
        return ids

    with purge_held_back(world.db):  # what a snapshot may still see, purge keeps
        # more gone from the place after the one released than will wait in the key's places
        for task_id in set_aside([NewTask("q", "k", concurrency_key="hot") for _ in range(300)]):
            world.run(request_cancel, task_id=task_id)
        world.advance(2 * DAY_MS)
        for cut in world.run(retention_plan):
            while world.store.run_sync(purge, queue=cut.queue, before=cut.before, limit=100).selected == 100:
                pass
        assert world.sql("SELECT COUNT(*) FROM tasks WHERE state = 'CANCELLED'") == [(0,)]  # purged
        set_aside([NewTask(queue, kind, concurrency_key="hot") for queue, kind in (("q", "j"), ("q", "k"), ("r", "k"))
                   for _ in range(2)])
        back, few = index_reads(world.db, lambda tx: waiting_of_key(tx, "hot", 2))
        assert len(back) == 3 * 2
        set_aside([NewTask("q", "j", concurrency_key="hot") for _ in range(100)])
        back, many = index_reads(world.db, lambda tx: waiting_of_key(tx, "hot", 2))
        assert len(back) == 3 * 2
        assert many < few + 5, (few, many)


def test_waiting_tasks_still_count_as_ready(world):
    from pulse_trio.store.views.queries import queue_depths

    holder = world.worker("q", keys=True, capacity=1)
    world.offer(holder, concurrency_key="hot")
    _flood(world, "hot", 40)
    world.submit()
    w = world.worker("q", keys=True, capacity=5)
    world.assign(w, 5)
    assert _waiting(world, "hot") == 40
    depths = world.store.run_sync(queue_depths, now=world.now)
    assert depths["q"]["states"]["READY"] == 40 and depths["q"]["states"]["OFFERED"] == 2
    view = world.task(world.sql("SELECT task_id FROM tasks WHERE pick_state = 'KEY_WAIT' LIMIT 1")[0][0])
    assert view.task.state == "READY"


def test_a_finish_that_lets_set_aside_work_compete_again_says_so_on_one_ack(world):
    """The service tells a serve group's other members of such a finish (docs/operations.md §14)."""
    from pulse_trio.store import FinishReport, finish

    holder = world.worker("q", keys=True, capacity=3)
    first = world.running(holder, concurrency_key="hot")
    alone = world.running(holder, concurrency_key="cold")
    quiet = world.running(holder, concurrency_key="calm")
    report = FinishReport("SUCCEEDED", "{}")
    (ack,) = world.run(finish, commands=[world.command(holder, quiet, 2, report=report)])
    assert not ack.freed_work, "nothing of the key waited"
    _flood(world, "hot", 3)
    taker = world.worker("q", keys=True)
    assert world.assign(taker, 1) == () and _waiting(world, "hot") == 3  # met at its limit: set aside
    acks = world.run(finish, commands=[world.command(holder, o, 2, report=report) for o in (alone, first)])
    assert [a.freed_work for a in acks] == [True, False], "one ack of the batch: its permits freed waiting work"
    assert _waiting(world, "hot") == 2


def test_a_retried_task_the_claim_took_before_its_key_filled_is_offered_again(world):
    """A claim takes a keyed task, then meets the key at its limit: it sets aside the rest, not that task.

    (It once set it aside too; retried after its backoff, it came back READY but waiting, and with no
    permit of its key out, no release ever brought it back.)"""
    w = world.worker("q", capacity=10, keys=True)
    keyed = dict(concurrency_key="k1", concurrency_limit=1, backoff_initial_ms=1_000, backoff_max_ms=1_000)
    first = world.submit(**keyed)
    world.advance(1)
    second = world.submit(**keyed)

    (offer,) = world.assign(w, 2)  # the key's one permit goes to `first`; `second` meets the limit
    assert offer.task.task_id == first
    world.start(w, offer)
    report = FinishReport("FAILED", "{}", "boom", None, True)
    world.run(finish, commands=[world.command(w, offer, 2, report=report)])  # retry: SCHEDULED
    assert world.task(first).task.state == "SCHEDULED"

    # The released permit brought `second` back; it runs and succeeds, releasing the permit again.
    (offer2,) = world.assign(w, 1)
    assert offer2.task.task_id == second
    world.start(w, offer2)
    world.finish(w, offer2, 2)

    world.advance(2_000)  # past the retry's backoff
    world.run(promote)
    assert world.task(first).task.state == "READY"
    assert world.sql("SELECT outstanding FROM key_counters WHERE concurrency_key = 'k1'") == [(0,)]
    world.advance(600_000)
    for timer in (lapse, expire, promote, release_after_quarantine):  # no timer brings it back either
        world.run(timer)
    # No permit of k1 is held, so the READY retry must be offered to a free session that declared keys.
    offers = world.assign(w, 1)
    assert [o.task.task_id for o in offers] == [first], world.sql(
        "SELECT task_id, state, waits_for_key, pick_state FROM tasks WHERE task_id = %s", (first,))
    assert world.sql("SELECT task_id FROM tasks WHERE waits_for_key AND state <> 'READY'") == []
