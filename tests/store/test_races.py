"""Several instances on one database never both win (threads on the real database).

Each thread plays one server instance: its own Store (own pool), its own
session, its own view of `now`. A barrier lines the threads up so the
transactions really overlap.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from pulse_trio.store import (
    NewTask, Refusal, assign, expire, lapse, new_credentials, register, request_cancel, retry, submit,
)
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.engine.inputs import NewInstance, SubscribedQueue

ROUNDS = 12


def together(n, fn):
    """Run fn(i) in n threads released at the same instant; return the results in order."""
    barrier = threading.Barrier(n)

    def go(i):
        barrier.wait()
        return fn(i)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(go, range(n)))


@pytest.fixture
def stores(db):
    made = [Store(db, pool_size=2) for _ in range(4)]
    yield made
    for s in made:
        s.close()


def _offers(world, stores, workers, n=1):
    return together(len(workers), lambda i: stores[i].run_sync(
        assign, session_id=workers[i].session_id, credentials=new_credentials(n), now=world.now,
        start_timeout_ms=30_000, default_lease_ttl_ms=30_000).offers)


def test_two_claimers_never_get_the_same_ready_task(world, stores):
    workers = [world.worker("q", capacity=1000) for _ in range(4)]
    for _ in range(ROUNDS):
        world.submit()
        results = _offers(world, stores, workers)
        assert sum(len(r) for r in results) == 1
    claimed = [o.task.task_id for r in _offers(world, stores, workers, 0) for o in r]
    assert claimed == []
    assert world.sql("SELECT COUNT(*), COUNT(DISTINCT task_id) FROM leases") == [(ROUNDS, ROUNDS)]


def test_batches_from_racing_instances_are_disjoint(world, stores):
    workers = [world.worker("q", capacity=1000) for _ in range(4)]
    world.run(submit, tasks=[NewTask("q", "k") for _ in range(200)])
    results = _offers(world, stores, workers, 40)
    ids = [o.task.task_id for r in results for o in r]
    assert len(ids) == len(set(ids))  # the guarantee: no task in two batches
    # Liveness: under load MariaDB's SKIP LOCKED can return an empty page to a
    # claimer racing a commit (seen here about one run in five under CPU load);
    # the dispatcher simply claims again at its next pass, as this does.
    for worker, store, got in zip(workers, stores, results):
        if len(got) < 40:
            more = store.run_sync(assign, session_id=worker.session_id, credentials=new_credentials(40 - len(got)),
                                  now=world.now, start_timeout_ms=30_000, default_lease_ttl_ms=30_000).offers
            ids += [o.task.task_id for o in more]
    assert len(ids) == len(set(ids)) == 160


def test_one_key_permit_is_never_granted_twice(world, stores):
    workers = [world.worker("q", capacity=1000, keys=True) for _ in range(4)]
    for round_ in range(ROUNDS):
        key = f"acct:{round_}"
        for _ in range(4):
            world.submit(concurrency_key=key)
        results = _offers(world, stores, workers, 4)
        granted = [o for r in results for o in r]
        assert len(granted) == 1, granted
    assert world.sql("SELECT MAX(outstanding) FROM key_counters") == [(1,)]


def test_tokens_stay_strictly_increasing_under_concurrent_grants(world, stores):
    workers = [world.worker("q", capacity=1000, keys=True) for _ in range(4)]
    world.run(submit, tasks=[NewTask("q", "k", concurrency_key="pool", concurrency_limit=3) for _ in range(40)])
    seen = []
    for _ in range(8):
        granted = [o for r in _offers(world, stores, workers, 3) for o in r]
        assert len(granted) <= 3
        for offer, w in [(o, w) for o in granted for w in workers if _owns(world, w, o)]:
            world.start(w, offer)
            world.finish(w, offer, 2)
        seen.extend(sorted(o.task.concurrency_token for o in granted))
    assert seen == sorted(seen) and len(seen) == len(set(seen))
    rows = world.sql("SELECT concurrency_token FROM key_permits ORDER BY acquired_at, concurrency_token")
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)


def _owns(world, w, offer):
    return world.sql("SELECT owner_session_id FROM leases WHERE lease_id = %s",
                     (offer.lease.lease_id,)) == [(w.session_id,)]


def test_an_expiring_lease_is_ended_once(world, stores):
    w = world.worker("q", capacity=1000)
    for _ in range(ROUNDS):
        world.running(w)
    world.advance(30_000)
    results = together(4, lambda i: stores[i].run_sync(expire, now=world.now, limit=3))
    assert sum(r.count for r in results) <= ROUNDS
    while world.run(expire).count:
        pass
    ended = Counter(e.lease_id for r in results for e in r.ended)
    assert all(v == 1 for v in ended.values())
    assert world.sql("SELECT COUNT(*) FROM leases WHERE state = 'EXPIRED'") == [(ROUNDS,)]


def test_renew_racing_expiry_one_of_them_wins(world, stores):
    import datetime as dt

    w = world.worker("q", capacity=1000)
    outcomes = Counter()
    for _ in range(ROUNDS):
        offer = world.running(w)
        world.advance(29_999)
        renew_at, expire_at = world.now, world.now + dt.timedelta(milliseconds=2)

        def act(i):
            if i == 0:
                from pulse_trio.store import RenewCommand, renew
                return stores[0].run_sync(renew, commands=[world.command(w, offer, 2, kind=RenewCommand)],
                                          now=renew_at)[0]
            return stores[1].run_sync(expire, now=expire_at)

        renewed, expired = together(2, act)
        won_renew = not isinstance(renewed, Refusal)
        assert won_renew != (expired.count == 1), (renewed, expired)
        outcomes["renew" if won_renew else "expire"] += 1
        state = world.sql("SELECT state FROM leases WHERE lease_id = %s", (offer.lease.lease_id,))[0][0]
        assert state == ("RUNNING" if won_renew else "EXPIRED")
        if won_renew:
            world.finish(w, offer, 3)
        world.advance(1000)
    assert sum(outcomes.values()) == ROUNDS


def test_lapse_timers_of_two_instances_share_the_work(world, stores):
    w = world.worker("q", capacity=1000)
    world.run(submit, tasks=[NewTask("q", "k") for _ in range(60)])
    world.assign(w, 60)
    world.advance(30_000)
    results = together(4, lambda i: stores[i].run_sync(lapse, now=world.now, limit=20))
    total = sum(r.count for r in results)
    while True:
        more = world.run(lapse).count
        total += more
        if not more:
            break
    assert total == 60
    assert world.sql("SELECT COUNT(*) FROM tasks WHERE state = 'READY'") == [(60,)]


def test_concurrent_submits_with_one_idempotency_key_make_one_task(world, stores):
    for round_ in range(ROUNDS):
        results = together(4, lambda i: stores[i].run_sync(
            submit, tasks=[NewTask("q", "k", idempotency_key=f"key-{round_}")], now=world.now)[0])
        assert len({r.task_id for r in results}) == 1 and sum(r.created for r in results) == 1


def test_concurrent_manual_retries_make_one_retry(world, stores):
    for _ in range(ROUNDS // 2):
        task_id = world.submit()
        world.run(request_cancel, task_id=task_id)
        results = together(4, lambda i: stores[i].run_sync(retry, source_task_id=task_id, now=world.now))
        assert len({r.task_id for r in results}) == 1 and sum(r.created for r in results) == 1


def test_cancel_racing_finish_is_decided_by_commit_order(world, stores):
    w = world.worker("q", capacity=1000)
    for _ in range(ROUNDS):
        offer = world.running(w)

        def act(i):
            if i == 0:
                return stores[0].run_sync(request_cancel, task_id=offer.task.task_id, now=world.now)
            from pulse_trio.store import FinishReport, finish
            return stores[1].run_sync(finish, commands=[
                world.command(w, offer, 2, report=FinishReport("CANCELLED", "{}", "stopped"))], now=world.now)[0]

        cancelled, finished = together(2, act)
        view = world.task(offer.task.task_id)
        if isinstance(finished, Refusal):
            assert finished.code == "cancel_not_requested" and cancelled.changed
            assert view.task.state == "RUNNING" and view.cancel_state == "REQUESTED"
            world.finish(w, offer, 2, status="CANCELLED", error_code="stopped")
        else:
            assert view.task.state == "CANCELLED" and view.cancel_state == "RESOLVED"


def test_concurrent_registrations_get_distinct_increasing_epochs(world, stores):
    def reg(i):
        return [stores[i].run_sync(register, instance=NewInstance("w", (SubscribedQueue("q"),)), now=world.now)
                .instance.epoch for _ in range(10)]

    per_thread = together(4, reg)
    epochs = [e for t in per_thread for e in t]
    assert len(set(epochs)) == 40
    assert all(t == sorted(t) for t in per_thread), "each instance sees its epochs increase"


def test_cancel_racing_assign_never_leaves_a_live_offer_of_a_cancelled_task(world, stores):
    w = world.worker("q", capacity=1000)
    for _ in range(ROUNDS):
        task_id = world.submit()

        def act(i):
            if i == 0:
                return stores[0].run_sync(request_cancel, task_id=task_id, now=world.now)
            return stores[1].run_sync(assign, session_id=w.session_id, credentials=new_credentials(1), now=world.now,
                                      start_timeout_ms=30_000, default_lease_ttl_ms=30_000)

        cancelled, assigned = together(2, act)
        assert cancelled.changed and cancelled.task_state == "CANCELLED"
        leases = world.sql("SELECT state FROM leases WHERE task_id = %s", (task_id,))
        assert leases in ([], [("REVOKED",)]), leases
        assert len(assigned.offers) == len(leases)
