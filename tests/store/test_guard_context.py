"""Guards are evaluated in one place, against one typed context per chart."""

from __future__ import annotations

import types

import pytest

from pulse_trio.charts import persistent_charts
from pulse_trio.store.guard_context import CONTEXTS, LeaseContext, NodeContext
from pulse_trio.store.registry import GUARDS, decide, screen
from pulse_trio.store.results import LEASE_NOT_FOUND


def test_every_persistent_chart_has_one_context_type():
    assert set(CONTEXTS) == {c.name for c in persistent_charts()}


def test_decide_refuses_a_context_of_another_type():
    with pytest.raises(TypeError):
        decide("node", "start", "NONE", types.SimpleNamespace())
    with pytest.raises(TypeError):
        decide("node", "start", "NONE", LeaseContext())
    assert decide("node", "start", "NONE", NodeContext()) == "ALIVE"


@pytest.mark.parametrize("trigger,first", [
    ("start", ("lease_secret_matches",)), ("renew", ("lease_secret_matches",)),
    ("finish", ("lease_secret_matches",)), ("resume", ("instance_secret_matches", "lease_secret_matches")),
])
def test_lease_not_found_comes_only_from_the_first_guards(trigger, first):
    """leases._screen and resume tell "unknown lease" from decide's refusal code: it must mean exactly that."""
    from pulse_trio.charts import chart

    order = chart("lease").refusal_order(trigger)
    not_found = tuple(n for n in order if GUARDS[("lease", n)].code == LEASE_NOT_FOUND)
    assert not_found == first == order[:len(first)]


def test_screen_stops_after_the_named_guard():
    draining = types.SimpleNamespace(state="DRAINING")
    refused = screen("lease", "assign", LeaseContext(session=draining), through="session_dispatchable")
    assert refused is not None and "session_dispatchable" in refused.message
    active = types.SimpleNamespace(state="ACTIVE")  # no task: the later guards are never read
    assert screen("lease", "assign", LeaseContext(session=active), through="session_dispatchable") is None
