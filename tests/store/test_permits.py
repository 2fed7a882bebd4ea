"""Chart `key_permit`: limits, strictly increasing tokens, release, quarantine."""

from __future__ import annotations

from pulse_trio.store import NewTask, expire, lapse, release_after_quarantine, start, submit
from sql_support import index_reads, purge_held_back

DAY_MS = 86_400_000


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


def _quarantined(world, w, count: int, *, quarantine_ms: int) -> None:
    """``count`` keys, each with a permit quarantined for ``quarantine_ms`` (its running lease expired)."""
    world.run(submit, tasks=[NewTask("q", "k", concurrency_key=f"key-{quarantine_ms}-{i}", lease_ttl_ms=10_000)
                             for i in range(count)])
    offers = world.assign(w, count)
    world.run(start, commands=[world.command(w, offer, 1) for offer in offers])
    world.advance(10_000)
    expired = 0
    while expired < count:  # in batches
        expired += world.run(expire, permit_quarantine_ms=quarantine_ms).count
    assert expired == count


def test_the_quarantine_timer_reads_the_quarantines_over_only_while_purge_lags(world):
    """The timer reads ``key_permits_due`` from its first QUARANTINED entry up to ``now``, never the
    quarantines that run on.

    The permits it released leave their entries behind as delete marks until InnoDB purges them, which a
    long transaction (a backup's snapshot) holds back. (Counted in the range's estimate while the
    statistics still counted them QUARANTINED, they once made MariaDB read every quarantined permit, those
    quarantined for a day too, through a ref on the state.)"""
    w = world.worker("q", keys=True, capacity=1000)
    _quarantined(world, w, 300, quarantine_ms=DAY_MS)
    _quarantined(world, w, 300, quarantine_ms=1_000)
    world.sql("ANALYZE TABLE key_permits")  # the statistics as the server's own recount takes them, at some point
    with purge_held_back(world.db):  # what a snapshot may still see, purge keeps
        world.advance(1_000)
        assert world.run(release_after_quarantine).count == 300
        _quarantined(world, w, 1, quarantine_ms=1_000)
        world.advance(1_000)
        done, read = index_reads(world.db, lambda tx: release_after_quarantine(tx, now=world.now))
        assert done.count == 1
        assert read < 20, read  # not the entries of the 300 permits quarantined for a day
