"""Chart `lease`, trigger `assign`: batch pick-up, order, subscriptions, capacity, keys."""

from __future__ import annotations

import datetime as dt

from pulse_trio.store import NewTask, Refusal, assign, new_credentials, submit


def test_batch_assign_offers_in_priority_then_age_order(world):
    low_old = world.submit(priority=0, due_at=world.now - dt.timedelta(seconds=100))
    world.advance(1)
    high = world.submit(priority=3)
    world.advance(1)
    mid = world.submit(priority=1)
    w = world.worker("q")
    offers = world.assign(w, 10)
    # effective_at: low_old = -100 s, high = -90 s, mid = -30 s (step 30 s)
    assert [o.task.task_id for o in offers] == [low_old, high, mid]
    assert all(o.lease.revision == 1 and o.lease.state == "OFFERED" for o in offers)
    assert all(o.lease.expires_at == world.now + dt.timedelta(milliseconds=30_000) for o in offers)
    assert {o.task.attempt for o in offers} == {1}
    assert world.sql("SELECT COUNT(*) FROM tasks WHERE state = 'OFFERED'") == [(3,)]


def test_aging_a_low_priority_task_overtakes_newer_high_priority_ones(world):
    old_low = world.submit(priority=0)
    world.advance(31_000)  # more than one priority step of waiting
    world.submit(priority=1)
    w = world.worker("q")
    (first,) = world.assign(w, 1)
    assert first.task.task_id == old_low


def test_only_subscribed_queues_and_kinds(world):
    world.submit(queue="a", kind="x")
    want = world.submit(queue="a", kind="y")
    world.submit(queue="b", kind="y")
    w = world.worker("a", kinds={"a": ["y"]})
    assert [o.task.task_id for o in world.assign(w, 10)] == [want]


def test_several_queues_are_merged_in_pick_up_order(world):
    a1 = world.submit(queue="a")
    world.advance(1)
    b1 = world.submit(queue="b")
    world.advance(1)
    a2 = world.submit(queue="a")
    w = world.worker("a", "b")
    assert [o.task.task_id for o in world.assign(w, 3)] == [a1, b1, a2]


def test_capacity_is_never_exceeded(world):
    for _ in range(5):
        world.submit()
    w = world.worker("q", capacity=2)
    assert len(world.assign(w, 10)) == 2
    assert world.assign(w, 10) == ()
    world.capacity(w, 3)
    assert len(world.assign(w, 10)) == 1


def test_draining_or_zero_capacity_gets_nothing(world):
    world.submit()
    w = world.worker("q", capacity=0)
    assert world.assign(w, 5) == ()
    world.capacity(w, 5, drain=True)
    assert world.assign(w, 5) == ()
    world.capacity(w, 5, drain=False)
    assert len(world.assign(w, 5)) == 1


def test_unknown_or_disconnected_session(world):
    from pulse_trio.store import disconnect

    result = world.run(assign, session_id="ses_X", credentials=new_credentials(1), start_timeout_ms=1,
                       default_lease_ttl_ms=1)
    assert isinstance(result, Refusal) and result.code == "session_not_found"
    w = world.worker("q")
    world.submit()
    world.run(disconnect, session_id=w.session_id)
    assert world.assign(w, 1) == ()


def test_keyed_tasks_only_to_sessions_that_declared_keys(world):
    keyed = world.submit(concurrency_key="customer:1")
    plain = world.submit()
    undeclared = world.worker("q")
    assert [o.task.task_id for o in world.assign(undeclared, 5)] == [plain]
    declared = world.worker("q", keys=True)
    (offer,) = world.assign(declared, 5)
    assert offer.task.task_id == keyed and offer.task.concurrency_key == "customer:1"
    assert offer.task.concurrency_token == 1


def test_blocked_keyed_tasks_do_not_block_what_is_behind_them(world):
    for _ in range(20):
        world.submit(concurrency_key="hot")
        world.advance(1)
    other = world.submit(concurrency_key="cold")
    world.advance(1)  # ties in effective_at fall to random ULID bits: keep the order explicit
    plain = world.submit()
    w = world.worker("q", keys=True)
    offers = world.assign(w, 3)
    assert [o.task.concurrency_key for o in offers] == ["hot", "cold", None]
    assert offers[2].task.task_id == plain and offers[1].task.task_id == other


def test_lease_ttl_defaults_to_the_servers_and_tasks_can_override(world):
    w = world.worker("q")
    world.submit(lease_ttl_ms=5_000)
    world.advance(1)
    world.submit()
    first, second = world.assign(w, 2, default_lease_ttl_ms=12_000)
    ttl = dict(world.sql("SELECT task_id, ttl_ms FROM leases"))
    assert ttl[first.task.task_id] == 5_000 and ttl[second.task.task_id] == 12_000


def test_a_task_stored_with_a_lease_shorter_than_the_shortest_gets_the_shortest(world):
    """Submits once took a task's own lease_ttl under half a second; one still waiting gets a lease a worker can
    renew (cluster_settings.LEASE_TTL_MIN_MS), not one that lapses before its first renewal."""
    w = world.worker("q")
    old = world.submit(lease_ttl_ms=5_000)
    world.sql("UPDATE tasks SET lease_ttl_ms = 100 WHERE task_id = %s", (old,))  # as such a submit stored it
    (offer,) = world.assign(w, 1, default_lease_ttl_ms=12_000)
    assert offer.task.task_id == old
    assert world.sql("SELECT ttl_ms FROM leases") == [(500,)]


def test_offer_carries_the_task_fields(world):
    w = world.worker("q")
    (r,) = world.run(submit, tasks=[NewTask("q", "k", payload_json='[1,2]', priority=4, idempotency_key="idem",
                                            max_attempts=5)])
    (offer,) = world.assign(w)
    t = offer.task
    assert (t.task_id, t.payload_json, t.priority, t.idempotency_key, t.max_attempts) == (
        r.task_id, "[1,2]", 4, "idem", 5)
    assert t.effect_uncertain is False and t.retry_of is None and t.concurrency_token is None
    assert offer.lease.epoch == w.epoch and len(offer.lease_secret) == 43


def test_composite_transaction_runs_the_three_charts(world):
    from pulse_trio.dburl import connect
    from pulse_trio.store.engine.tx import Tx

    world.submit(concurrency_key="k1")
    w = world.worker("q", keys=True)
    conn = connect(world.db)
    try:
        with conn.cursor() as cur:
            tx = Tx(cur)
            result = assign(tx, session_id=w.session_id, credentials=new_credentials(1), now=world.now,
                            start_timeout_ms=1000, default_lease_ttl_ms=1000)
        conn.rollback()
    finally:
        conn.close()
    assert len(result.offers) == 1
    assert tx.trail == ["lease.assign", "key_permit.acquire", "task.offer"]


def test_the_ready_probe_names_exactly_the_queues_with_ready_work(world):
    from pulse_trio.store.lease.assign import PROBE_CHUNK, queues_with_ready_work

    w = world.worker("busy", capacity=1)
    world.submit(queue="ready")
    world.submit(queue="later", due_at=world.now + dt.timedelta(hours=1))  # SCHEDULED, not READY
    world.submit(queue="busy")
    world.assign(w)  # its only task is OFFERED now
    many = [f"empty-{i}" for i in range(PROBE_CHUNK + 5)]  # more than one statement's worth
    probe = world.store.run_sync(queues_with_ready_work, queues=["ready", "later", "busy", *many, "ready-2"])
    assert probe == {"ready"}
    world.submit(queue="ready-2")
    assert world.store.run_sync(queues_with_ready_work, queues=[*many, "ready-2"]) == {"ready-2"}


def test_the_depth_question_counts_unkeyed_ready_tasks_per_queue_and_per_kinds(world):
    """At least N READY per queue or kinds of it: keyed, scheduled, offered and other kinds' tasks do not count."""
    from pulse_trio.store.lease.assign import PROBE_CHUNK, sources_ready_at_least

    for _ in range(3):
        world.submit(queue="q", kind="a")
    world.submit(queue="q", kind="b")
    world.submit(queue="q", kind="a", concurrency_key="k1")  # keyed: not every session may take it
    world.submit(queue="q", kind="a", due_at=world.now + dt.timedelta(hours=1))  # SCHEDULED
    w = world.worker("q", capacity=1, kinds={"q": ["b"]})
    world.assign(w)  # the one of kind b is OFFERED now
    ask = lambda wants: world.store.run_sync(sources_ready_at_least, wants=wants)  # noqa: E731
    a, b, ab = frozenset("a"), frozenset("b"), frozenset("ab")
    assert ask({("q", None): 3, ("q", a): 3, ("q", b): 1, ("q", ab): 3}) == {("q", None), ("q", a), ("q", ab)}
    assert ask({("q", None): 4, ("q", a): 4, ("q", ab): 4}) == set()
    many = {(f"empty-{i}", None): 1 for i in range(PROBE_CHUNK + 5)}  # more than one statement's worth
    assert ask({**many, ("q", a): 1}) == {("q", a)}


def test_a_subscription_by_kind_merges_its_kinds_in_pick_up_order(world):
    """Per-kind pages, merged: the same order as one page over the queue filtered by kind."""
    w = world.worker("q", capacity=10, kinds={"q": ["a", "b"]})
    world.run(submit, tasks=[NewTask("q", "other") for _ in range(50)])  # never offered, never in the way
    ids = [world.submit(queue="q", kind=kind, priority=p) for kind, p in
           [("a", 0), ("b", 5), ("a", 9), ("b", 0), ("other", 9), ("a", 5)]]
    offers = world.assign(w, 10)
    by_id = {t: i for i, t in enumerate(ids)}
    got = [by_id[o.task.task_id] for o in offers]
    assert got == [2, 1, 5, 0, 3]  # priority 9, then 5 (older first), then 0 (older first); 'other' skipped
