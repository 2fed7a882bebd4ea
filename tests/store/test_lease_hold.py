"""``leases.hold``: what ``leases_owner`` files a lease under, as the lease chart says.

The generated column spells the chart's sets out in SQL (LIVE for the states
that hold a task, REVOKED for a revoked offer, NULL after any other end);
``charts.states.LEASE_HOLDS`` derives them from the chart. A start keeps its
lease LIVE, so it never moves the lease's entry in the index.
"""

from __future__ import annotations

from pulse_trio.charts import CHARTS
from pulse_trio.charts.states import LEASE_HOLDS, LIVE_LEASE_STATES
from pulse_trio.store import request_cancel


def _expression(world) -> str:
    ((expression,),) = world.sql(
        "SELECT GENERATION_EXPRESSION FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'leases' AND COLUMN_NAME = 'hold'")
    return expression


def test_every_lease_state_is_filed_as_the_chart_says(world):
    expression = _expression(world)
    states = [s for s in CHARTS["lease"].spec.states if s != CHARTS["lease"].spec.initial]
    assert set(LEASE_HOLDS) < set(states)
    for state in states:
        ((hold,),) = world.sql(f"SELECT {expression} FROM (SELECT %s AS `state`) AS l", (state,))
        assert hold == LEASE_HOLDS.get(state), state
    assert {LEASE_HOLDS[s] for s in LIVE_LEASE_STATES} == {"LIVE"}, "a start keeps the entry where the offer put it"


def test_the_rows_follow_their_lease_through_start_finish_and_revoke(world):
    w = world.worker("q", capacity=3)
    running, finished = world.running(w), world.running(w)
    world.finish(w, finished, 2)
    world.submit()
    (offered,) = world.assign(w)
    revoked = world.offer(w)
    world.run(request_cancel, task_id=revoked.task.task_id, reason="test")
    rows = dict(world.sql("SELECT lease_id, hold FROM leases"))
    assert rows == {running.lease.lease_id: "LIVE", finished.lease.lease_id: None, offered.lease.lease_id: "LIVE",
                    revoked.lease.lease_id: "REVOKED"}
