"""SPIN checks the model generated from statecharts/*.json (docs/statecharts/verification.md).

The default tier and the renewals tier run in the normal suite;
``PULSE_MODEL_CHECK=large`` adds the world with retries (minutes), and
``PULSE_MODEL_CHECK=combined`` the one with retries and renewals, which
outgrows 12 GB. Mutation tests copy the charts, weaken a guard
and require SPIN to find a counterexample naming the property it breaks.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from pulse_trio.charts.loader import ChartError, ChartSpec, load_specs, parse_chart
from pulse_trio.charts.model_check import DEFAULT, RENEWALS, TIERS, Tier, check
from pulse_trio.charts.promela import dead_ends, final_states, generate, load_environment, undriven, unfired

pytestmark = pytest.mark.live  # it compiles and runs SPIN's verifier (tiers: tests/conftest.py)

ROOT = Path(__file__).parents[2]
#: Small enough for a counterexample to turn up in seconds, big enough to have one.
MUTANT = dataclasses.replace(DEFAULT, name="mutant", max_attempts=2)


def _without_guard(specs: dict[str, ChartSpec], chart: str, trigger: str, guard: str) -> dict[str, ChartSpec]:
    """The charts with ``guard`` struck from every transition of ``chart``.``trigger``."""
    spec = specs[chart]
    transitions = tuple(dataclasses.replace(t, guards=tuple(g for g in t.guards if g != guard))
                        if t.trigger == trigger else t for t in spec.transitions)
    assert transitions != spec.transitions, f"{chart}.{trigger} has no guard {guard}"
    return {**specs, chart: dataclasses.replace(spec, transitions=transitions)}


def _without_effect(specs: dict[str, ChartSpec], chart: str, trigger: str, dest: str,
                    effect: str) -> dict[str, ChartSpec]:
    spec = specs[chart]
    transitions = tuple(dataclasses.replace(t, effects=tuple(e for e in t.effects if e != effect))
                        if (t.trigger, t.dest) == (trigger, dest) else t for t in spec.transitions)
    mutated = dict(specs)
    mutated[chart] = dataclasses.replace(spec, transitions=transitions)
    return mutated


def _failure(outcomes) -> str:
    return "\n".join(o.report() for o in outcomes)


def test_the_real_charts_hold_every_property(tmp_path):
    outcomes = check(DEFAULT, workdir=tmp_path)
    assert all(o.ok for o in outcomes), _failure(outcomes) + "\n" + outcomes[-1].output[-3000:]
    assert [o.search for o in outcomes] == ["safety", "liveness"]
    assert outcomes[0].states > 100_000  # the world is not trivially small


def test_the_world_with_renewals_holds_every_property(tmp_path):
    outcomes = check(RENEWALS, workdir=tmp_path)
    assert all(o.ok for o in outcomes), _failure(outcomes) + "\n" + outcomes[-1].output[-3000:]
    assert [o.search for o in outcomes] == ["safety", "liveness"]
    assert outcomes[0].states > 2_000_000  # bigger than the default world: the renewals are in it


@pytest.mark.skipif(os.environ.get("PULSE_MODEL_CHECK") != "large",
                    reason="the world with retries takes minutes and gigabytes (docs/statecharts/verification.md §4),"
                           " past what the suite may use: PULSE_MODEL_CHECK=large runs it; the default and"
                           " renewals worlds above are checked in every run")
@pytest.mark.timeout(3700)  # the search's own limit is an hour
def test_the_large_world_holds_every_property(tmp_path):
    outcomes = check(TIERS["large"], workdir=tmp_path, timeout=3600)
    assert all(o.ok for o in outcomes), _failure(outcomes)


@pytest.mark.skipif(os.environ.get("PULSE_MODEL_CHECK") != "combined",
                    reason="the world with retries and renewals outgrows its 12 GB bound"
                           " (docs/statecharts/verification.md §4): PULSE_MODEL_CHECK=combined runs it on a"
                           " machine with more to give it")
@pytest.mark.timeout(3700)
def test_the_combined_world_holds_every_property(tmp_path):
    outcomes = check(TIERS["combined"], workdir=tmp_path, timeout=3600)
    assert all(o.ok for o in outcomes), _failure(outcomes)


def _own_children(name: str) -> list[int]:
    """Processes called ``name`` that this test process started."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            status = dict(line.split(":\t", 1) for line in (entry / "status").read_text().splitlines() if ":\t" in line)
        except OSError:
            continue
        if status.get("Name", "").strip() == name and status.get("PPid", "").strip() == str(os.getpid()):
            found.append(int(entry.name))
    return found


@pytest.mark.timeout(600)
def test_a_verifier_killed_mid_search_is_not_reported_as_holding(tmp_path):
    """SIGKILL, as the OOM killer sends: the verifier prints no summary, and that proves nothing."""
    result: dict = {}
    runner = threading.Thread(target=lambda: result.update(
        outcomes=check(DEFAULT, workdir=tmp_path, liveness=False, timeout=500)))
    runner.start()
    killed = None
    while runner.is_alive() and killed is None:
        pids = _own_children("pan_safety")
        if pids:
            time.sleep(0.5)  # let it start searching
            os.kill(pids[0], signal.SIGKILL)
            killed = pids[0]
        time.sleep(0.05)
    runner.join()
    assert killed is not None, "the verifier finished before it could be killed"
    (outcome,) = result["outcomes"]
    assert not outcome.ok, f"{outcome.report()!r} (output {outcome.output!r})"
    assert outcome.report() == f"safety: verifier did not finish (exit {-signal.SIGKILL})"


@pytest.mark.parametrize(("chart", "trigger", "guard", "prop"), [
    ("lease", "finish", "revision_current", "revision_current"),
    ("lease", "start", "revision_current", "revision_current"),
    ("key_permit", "acquire", "permit_available", "key_limit"),
    ("lease", "assign", "task_ready", "steps_agree"),
])
def test_a_weakened_guard_is_caught_and_named(tmp_path, chart, trigger, guard, prop):
    specs = _without_guard(load_specs(), chart, trigger, guard)
    outcomes = check(MUTANT, specs, workdir=tmp_path, liveness=False)
    failed = outcomes[-1]
    assert not failed.ok, f"removing {guard} from {chart}.{trigger} went unnoticed"
    assert failed.property == prop, failed.report()
    assert failed.steps and any(s.chart == chart and s.trigger == trigger for s in failed.steps), failed.report()
    report = failed.report()
    assert report.splitlines()[0] == f"safety: property {prop} violated; counterexample:"
    assert f"{chart}[" in report and "task[0]: submit NONE -> READY" in report


@pytest.mark.parametrize(("chart", "trigger", "dest", "effect", "prop"), [
    ("task", "expire", "READY", "task.uncertain = 1", "effect_uncertain"),
    ("lease", "cancel", "RUNNING", "lease.cancel = 1", "cancel_kept"),
])
def test_a_dropped_effect_is_caught_and_named(tmp_path, chart, trigger, dest, effect, prop):
    specs = _without_effect(load_specs(), chart, trigger, dest, effect)
    failed = check(MUTANT, specs, workdir=tmp_path, liveness=False)[-1]
    assert not failed.ok and failed.property == prop, failed.report()


@pytest.mark.parametrize(("chart", "trigger", "dest", "effect"), [
    ("key_permit", "acquire", "HELD", "env.key_last_token = env.key_last_token + 1"),
    ("instance", "register", "ACTIVE", "env.epoch_counter = env.epoch_counter + 1"),
])
def test_a_token_or_epoch_that_does_not_grow_is_caught(tmp_path, chart, trigger, dest, effect):
    """Every permit taking the same token (every session the same epoch) leaves the counter where it was:
    it never goes down, yet a new one is not larger than every earlier one, which is what fences."""
    specs = _without_effect(load_specs(), chart, trigger, dest, effect)
    assert specs[chart] != load_specs()[chart]
    failed = check(dataclasses.replace(DEFAULT, name="fencing"), specs, workdir=tmp_path, liveness=False)[-1]
    assert not failed.ok and failed.property == "fencing_grows", failed.report()
    assert any(s.chart == chart and s.trigger == trigger for s in failed.steps), failed.report()


def test_every_trigger_of_every_driven_chart_is_fired_by_the_model_or_listed_as_not():
    """What the environment never fires SPIN never sees: the //@undriven line says so, or generation fails."""
    specs, env = load_specs(), load_environment()
    assert unfired(specs, env) == list(env.undriven)
    assert {"task.wait_for_key", "task.key_freed"}.isdisjoint(env.undriven)
    # One call fewer: the gap is refused, not silent (release_after_quarantine is another trigger, not a call).
    gap = load_environment(env.text.replace("APPLY(fire_key_permit_release, ", "APPLY(skip_release, "))
    with pytest.raises(ChartError, match=r"never fires \['key_permit.release'\]"):
        generate(specs, DEFAULT.sizes(), DEFAULT.constants(), gap)
    stale = load_environment(env.text.replace("//@undriven ", "//@undriven task.offer "))
    with pytest.raises(ChartError, match=r"lists \['task.offer'\] on its //@undriven line, but fires them"):
        generate(specs, DEFAULT.sizes(), DEFAULT.constants(), stale)


def test_a_broken_key_freed_is_caught_by_the_model(tmp_path):
    """``task.key_freed`` made to leave a set-aside task OFFERED with no lease: it is never dispatched again."""
    data = json.loads((ROOT / "statecharts" / "task.json").read_text())
    for t in data["transitions"]:
        if t["trigger"] == "key_freed":
            t["dest"] = "OFFERED"
    specs = {**load_specs(), "task": parse_chart(data, origin="task.json")}
    failed = check(dataclasses.replace(DEFAULT, name="key_freed"), specs, workdir=tmp_path, liveness=False)[-1]
    assert not failed.ok, failed.report()
    assert any(s.chart == "task" and s.trigger == "key_freed" for s in failed.steps), failed.report()


def test_a_chart_the_environment_does_not_drive_still_generates():
    specs = load_specs()
    extra = parse_chart({"name": "schedule", "persistent": True, "initial": "NONE",
                         "states": ["NONE", "ACTIVE", "PAUSED", "ENDED"],
                         "transitions": [{"trigger": "create", "source": "NONE", "dest": "ACTIVE"},
                                         {"trigger": "pause", "source": "ACTIVE", "dest": "PAUSED"},
                                         {"trigger": "resume", "source": "PAUSED", "dest": "ACTIVE"},
                                         {"trigger": "end", "source": ["ACTIVE", "PAUSED"], "dest": "ENDED"}]})
    model = generate({**specs, "schedule": extra}, DEFAULT.sizes(), DEFAULT.constants())
    assert model == generate(specs, DEFAULT.sizes(), DEFAULT.constants())
    assert "schedule" in undriven({**specs, "schedule": extra})
    assert dead_ends(extra) == []


def test_no_chart_file_has_a_dead_end():
    """The generic check of every chart file, driven or not: every reachable state can still end."""
    for name, spec in load_specs().items():
        assert dead_ends(spec) == [], f"{name}: {dead_ends(spec)} can never reach {final_states(spec)}"


def test_a_purge_back_to_the_initial_state_keeps_a_state_final():
    purged = parse_chart({"name": "kept", "persistent": True, "initial": "NONE", "states": ["NONE", "LIVE", "DONE"],
                          "transitions": [{"trigger": "make", "source": "NONE", "dest": "LIVE"},
                                          {"trigger": "end", "source": "LIVE", "dest": "DONE"},
                                          {"trigger": "note", "source": "DONE", "dest": "DONE"},
                                          {"trigger": "purge", "source": "DONE", "dest": "NONE"}]})
    assert final_states(purged) == ["DONE"] and dead_ends(purged) == []


def test_a_dead_end_is_found():
    trap = parse_chart({"name": "trap", "persistent": True, "initial": "NONE", "states": ["NONE", "A", "B", "C"],
                        "transitions": [{"trigger": "go", "source": "NONE", "dest": "A"},
                                        {"trigger": "spin", "source": "A", "dest": "B"},
                                        {"trigger": "spin", "source": "B", "dest": "A"},
                                        {"trigger": "end", "source": "NONE", "dest": "C"}]})
    assert dead_ends(trap) == ["A", "B"]


def test_every_driven_guard_has_a_meaning_and_every_property_is_documented():
    env = load_environment()
    specs = load_specs()
    for name in env.drives:
        assert specs[name].guard_names <= set(specs[name].model.guards), name
    text = (os.path.dirname(__file__) + "/../../docs/statecharts/verification.md")
    with open(text, encoding="utf-8") as f:
        doc = f.read()
    for prop in env.properties:
        assert f"`{prop.name}`" in doc, prop.name
    assert {p.name for p in env.properties} >= {"single_execution_right", "revision_current", "fencing_grows",
                                                 "key_limit", "cancel_kept", "receipt_no_grant",
                                                 "effect_uncertain", "terminates", "no_dead_end"}


def test_a_meaning_naming_an_unknown_field_fails_generation():
    specs = load_specs()
    spec = specs["lease"]
    broken = dataclasses.replace(spec, model=dataclasses.replace(
        spec.model, guards={**spec.model.guards, "revision_current": "cmd.revision == lease.generation"}))
    with pytest.raises(Exception, match="lease has no field or state 'generation'"):
        generate({**specs, "lease": broken}, DEFAULT.sizes(), DEFAULT.constants())
    assert copy.copy(Tier("x")).sizes()["node"] == 2
