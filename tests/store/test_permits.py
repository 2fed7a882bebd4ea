"""Chart `key_permit`: limits, strictly increasing tokens, release, quarantine."""

from __future__ import annotations

from pulse_trio.store import expire, lapse, release_after_quarantine


def test_tokens_strictly_increase_per_key_and_limit_holds(world):
    w = world.worker("q", keys=True, capacity=100)
    tokens = []
    for _ in range(4):
        offer = world.running(w, concurrency_key="acct")
        tokens.append(offer.task.concurrency_token)
        world.submit(concurrency_key="acct")
        assert world.assign(w, 5) == (), "limit 1: the second task waits"
        world.finish(w, offer, 2)
        (queued,) = world.assign(w, 5)  # the waiting one, now that the permit is back
        tokens.append(queued.task.concurrency_token)
        world.start(w, queued)
        world.finish(w, queued, 2)
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens) and tokens[0] == 1
    assert world.sql("SELECT last_token, outstanding FROM key_counters WHERE concurrency_key = 'acct'") == [(8, 0)]


def test_limit_greater_than_one(world):
    w = world.worker("q", keys=True, capacity=100)
    for _ in range(5):
        world.submit(concurrency_key="pool", concurrency_limit=3)
    offers = world.assign(w, 10)
    assert [o.task.concurrency_token for o in offers] == [1, 2, 3]


def test_keys_are_independent(world):
    w = world.worker("q", keys=True, capacity=100)
    world.submit(concurrency_key="a")
    world.submit(concurrency_key="b")
    world.submit(concurrency_key="a")
    offers = world.assign(w, 10)
    assert sorted((o.task.concurrency_key, o.task.concurrency_token) for o in offers) == [("a", 1), ("b", 1)]


def test_lapse_releases_the_permit(world):
    w = world.worker("q", keys=True)
    world.offer(w, concurrency_key="acct")
    world.submit(concurrency_key="acct")
    world.advance(30_000)
    world.run(lapse)
    offers = world.assign(w, 5)
    assert [o.task.concurrency_token for o in offers] == [2], "the lapsed task or the next one, with a new token"


def test_expiry_quarantines_for_the_lease_ttl_then_releases(world):
    w = world.worker("q", keys=True)
    world.running(w, concurrency_key="acct", lease_ttl_ms=10_000)
    world.submit(concurrency_key="acct")
    world.advance(10_000)
    world.run(expire)
    assert world.assign(w, 5) == (), "quarantined permits still count"
    world.advance(9_999)
    assert world.run(release_after_quarantine).count == 0
    world.advance(1)
    assert world.run(release_after_quarantine).count == 1
    (offer,) = world.assign(w, 5)
    assert offer.task.concurrency_token == 2


def test_quarantine_length_can_be_configured(world):
    w = world.worker("q", keys=True)
    world.running(w, concurrency_key="acct")
    world.advance(30_000)
    world.run(expire, permit_quarantine_ms=1_000)
    world.advance(1_000)
    assert world.run(release_after_quarantine).count == 1
    assert world.sql("SELECT outstanding FROM key_counters") == [(0,)]
