"""A claim takes the session's lease count from its caller when given (``held``), else counts it.

The serve process holding a session knows every lease the session got and
never counts fewer than the database holds; passing that count spares the
claim a read of the session's leases. The capacity on the locked session
row still bounds what is offered.
"""

from __future__ import annotations

from pulse_trio.store import assign, new_credentials


def _claim(world, w, n, **kwargs):
    return world.run(assign, session_id=w.session_id, credentials=new_credentials(n), start_timeout_ms=30_000,
                     default_lease_ttl_ms=30_000, **kwargs)


def test_the_callers_count_bounds_the_offers(world):
    w = world.worker("q", capacity=3)
    for i in range(5):
        world.submit()
    full = _claim(world, w, 3, held=3)  # the caller counts three leases: no free slot
    assert full.offers == () and full.free_slots == 0
    one = _claim(world, w, 3, held=2)
    assert len(one.offers) == 1 and one.free_slots == 1


def test_without_a_count_the_claim_counts_the_leases(world):
    w = world.worker("q", capacity=3)
    for i in range(5):
        world.submit()
    assert len(_claim(world, w, 2).offers) == 2
    rest = _claim(world, w, 3)
    assert len(rest.offers) == 1 and rest.free_slots == 1, "two leases counted in the database"
    assert world.sql("SELECT COUNT(*) FROM leases WHERE owner_session_id = %s", (w.session_id,)) == [(3,)]


def test_the_capacity_on_the_session_row_still_decides(world):
    w = world.worker("q", capacity=2)
    for i in range(4):
        world.submit()
    assert len(_claim(world, w, 4, held=0).offers) == 2
