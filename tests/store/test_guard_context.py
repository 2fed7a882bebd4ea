"""Guards are evaluated in one place, against one typed context per chart."""

from __future__ import annotations

import types

import pytest

from pulse_trio.charts import persistent_charts
from pulse_trio.store.engine.guard_context import CONTEXTS, LeaseContext, NodeContext
from pulse_trio.store.engine.registry import GUARDS, decide, screen
from pulse_trio.store.engine.results import LEASE_NOT_FOUND


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


@pytest.mark.parametrize("chart,trigger", [
    ("task", "offer"), ("task", "lapse"), ("task", "cancel"), ("lease", "revoke"),
    ("lease", "cancel"), ("key_permit", "release"), ("key_permit", "quarantine"), ("instance", "node_gone"),
    ("cancellation", "resolve"), ("cancellation", "escalate"),
])
def test_the_steps_that_pass_an_empty_context_have_no_guard(chart, trigger):
    from pulse_trio.charts import chart as get

    assert not any(t.guards for t in get(chart).transitions_for(trigger))


def test_contexts_stay_frozen_and_refuse_unknown_fields():
    import dataclasses

    ctx = LeaseContext(revision=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.revision = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        LeaseContext(nope=1)  # type: ignore[call-arg]
    assert dataclasses.replace(ctx, revision=3).revision == 3 and ctx.lease is None
