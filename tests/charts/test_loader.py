"""Chart declarations load into one transitions Machine each, with nothing re-declared in Python."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from transitions import MachineError

from pulse_trio.charts import CHARTS, ChartError, chart, load_specs, parse_chart

ROOT = Path(__file__).parents[2]
EXPECTED_TRIGGERS = {
    "lease": {"assign", "start", "renew", "resume", "finish", "lapse", "expire", "revoke"},
    "cancellation": {"request", "notify", "escalate", "resolve"},
    "key_permit": {"acquire", "release", "quarantine", "release_after_quarantine"},
    "task": {"submit", "promote"},
    "instance": {"register", "set_capacity", "disconnect", "node_gone"},
    "node": {"start", "heartbeat", "lose", "rejoin", "stop"},
    "cluster_setting": {"set"},
}


def test_package_data_link_points_at_the_statecharts_folder():
    link = ROOT / "pulse_trio" / "charts" / "definitions"
    assert link.is_symlink() and link.resolve() == (ROOT / "statecharts").resolve()
    assert sorted(p.stem for p in (ROOT / "statecharts").glob("*.json")) == sorted(CHARTS)


@pytest.mark.parametrize("name,triggers", sorted(EXPECTED_TRIGGERS.items()))
def test_every_trigger_the_docs_name_is_declared(name, triggers):
    assert triggers <= set(chart(name).spec.triggers)


def test_session_chart_has_the_protocol_states():
    spec = chart("session").spec
    assert not spec.persistent and spec.initial == "awaiting_hello"
    assert spec.states == ("awaiting_hello", "active", "draining", "closing", "closed")


def test_persistent_charts_start_from_none_and_reach_every_state():
    for c in CHARTS.values():
        reachable, frontier = {c.spec.initial}, [c.spec.initial]
        while frontier:
            state = frontier.pop()
            for t in c.spec.transitions:
                if t.source == state and t.dest not in reachable:
                    reachable.add(t.dest)
                    frontier.append(t.dest)
        assert reachable == set(c.spec.states), (c.name, set(c.spec.states) - reachable)


def test_one_machine_per_chart_without_auto_transitions():
    """Only the server's in-memory chart fires, so only it has a Machine; persistent and worker charts are data."""
    assert not any(hasattr(c, "machine") for c in CHARTS.values() if c.spec.persistent or c.spec.side == "worker")
    for c in (c for c in CHARTS.values() if not c.spec.persistent and c.spec.side == "server"):
        assert c.machine.auto_transitions is False
        assert not any(name.startswith("to_") for name in c.machine.events)
        assert set(c.machine.events) == set(c.spec.triggers)


class _Session:
    def __init__(self):
        self.drain = False

    def drain_requested(self):
        return self.drain


def test_session_models_attach_and_fire_without_joining_the_machine():
    """Models are fired through the chart; the machine keeps no list of them (it would grow with sessions)."""
    c = chart("session")
    s = _Session()
    c.attach(s)
    assert s.state == "awaiting_hello"
    assert c.machine.models == [] and not hasattr(s, "hello")
    with pytest.raises(MachineError):
        c.fire(s, "capacity")  # nothing but hello before hello
    c.fire(s, "hello")
    with pytest.raises(MachineError):
        c.fire(s, "hello")  # a second hello: the server answers invalid_transition
    assert s.state == "active"
    s.drain = True
    c.fire(s, "capacity")
    assert s.state == "draining"
    with pytest.raises(MachineError):
        c.fire(s, "dispatch")  # never offer to a draining session
    c.fire(s, "command")
    s.drain = False
    c.fire(s, "capacity")
    assert s.state == "active"
    other = _Session()
    c.attach(other)
    assert other.state == "awaiting_hello" and s.state == "active"
    c.fire(s, "shutdown")
    c.fire(s, "finalize")
    assert s.state == "closed"
    with pytest.raises(ChartError):
        c.fire(s, "no_such_trigger")


def test_candidates_come_from_the_chart_index():
    assert chart("instance").candidates("set_capacity", "ACTIVE") == [
        ("ACTIVE", (("sequence_newer", True), ("drain_requested", False))),
        ("DRAINING", (("sequence_newer", True), ("drain_requested", True))),
    ]
    assert chart("lease").candidates("start", "RUNNING") == []
    assert chart("lease").can("start", "OFFERED") and not chart("lease").can("start", "LAPSED")


def _raw(name):
    return json.loads((ROOT / "statecharts" / f"{name}.json").read_text())


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d.pop("initial"), "missing"),
    (lambda d: d.update(extra=1), "unknown fields"),
    (lambda d: d.update(initial="NOPE"), "initial state"),
    (lambda d: d["transitions"].append({"trigger": "x", "source": "NONE", "dest": "MARS"}), "not declared"),
    (lambda d: d["transitions"].append(dict(d["transitions"][0])), "declared twice"),
    (lambda d: d["transitions"].append({"trigger": "READY", "source": "NONE", "dest": "READY"}), "shadows"),
    (lambda d: d["transitions"].append({"trigger": "bad name", "source": "NONE", "dest": "READY"}), "identifier"),
    (lambda d: d["states"].append("READY"), "twice"),
    (lambda d: d["model"].update(extra={}), "model: an object"),
    (lambda d: d["model"]["fields"].update(attempt="0"), "model.fields"),
    (lambda d: d["model"]["guards"].update(nobody_names_me="true"), "not named by any transition"),
    (lambda d: d["transitions"][0].update(effects="task.attempt = 1"), "effects must be a list"),
    (lambda d: d.update(side="client"), "side must be one of"),
    (lambda d: d.update(side="worker"), "a worker's chart lives in memory"),
    (lambda d: d["functions"].pop("purge"), r"missing \['purge'\]"),
    (lambda d: d["functions"].update(nosuch={"runs": "m:f", "kind": "entry"}), r"unknown \['nosuch'\]"),
    (lambda d: d["functions"].update(purge="pulse_trio.store.task.retention:purge"), "an object with runs, kind"),
    (lambda d: d["functions"]["purge"].pop("kind"), "an object with runs, kind"),
    (lambda d: d["functions"]["purge"].update(extra=1), "an object with runs, kind"),
    (lambda d: d["functions"]["purge"].update(runs="pulse_trio.store.task.retention.purge"), "module:function"),
    (lambda d: d["functions"]["purge"].update(kind="timer"), "kind must be one of"),
    (lambda d: d["functions"]["purge"].update(steps="task.cancel"), "steps: a list"),
    (lambda d: d["functions"]["purge"].update(steps=["cancel"]), "named chart.trigger"),
    (lambda d: d["functions"]["purge"].update(steps=["task.cancel", "task.cancel"]), "named twice"),
    (lambda d: d["functions"]["purge"].update(steps=[{"step": "task.cancel"}]), "with a condition"),
    (lambda d: d["functions"]["purge"].update(steps=[{"step": "task.cancel", "when": " "}]), "with a condition"),
    (lambda d: d.update(persistent=False), "an in-memory chart has no store function"),
    # A forgotten list: "due" was read as the guards 'd', 'u', 'e'.
    (lambda d: _transition(d, "promote").update(guards="due"), "guards must be a list"),
    (lambda d: d["transitions"][2].update(guards=None), "guards must be a list"),
    (lambda d: d["transitions"][2].update(guards=3), "guards must be a list"),
    (lambda d: d.update(transitions=None), "transitions must be a list"),
    (lambda d: d.update(transitions=7), "transitions must be a list"),
    (lambda d: d.update(name=5), "name must be an identifier"),
    (lambda d: d["transitions"].append({"trigger": "promote", "source": [], "dest": "READY"}), "source must be"),
    # Guards are a conjunction: the same set in another order can never fire (the first declared wins).
    (lambda d: d["transitions"].append({"trigger": "finish", "source": "OFFERED", "dest": "FAILED",
                                        "guards": ["retry_allowed", "status_failed"]}), "declared twice"),
    (lambda d: _transition(d, "submit", "SCHEDULED").update(guards=["!!due"]), "at most one '!'"),
    (lambda d: _transition(d, "submit", "SCHEDULED").update(guards=["due", "!due"]), "named twice"),
    # State names go into SQL between quotes, into Promela #defines and into varchar(16) ascii columns.
    *[(lambda d, s=state: _with_state(d, s), "ASCII identifiers")
      for state in ("ON HOLD", "O'HOLD", "on-hold", "ÉTAT", "A_STATE_OF_17_CHR")],
])
def test_malformed_declarations_are_refused_at_load(mutate, message):
    data = copy.deepcopy(_raw("task"))
    mutate(data)
    with pytest.raises(ChartError, match=message) as refused:
        parse_chart(data, origin="task.json")
    assert str(refused.value).startswith("task.json: ")


def _transition(data: dict, trigger: str, dest: str | None = None) -> dict:
    return next(t for t in data["transitions"] if t["trigger"] == trigger and dest in (None, t["dest"]))


def _with_state(data: dict, state: str) -> None:
    data["states"].append(state)
    data["transitions"].append({"trigger": "hold", "source": "READY", "dest": state})
    data["functions"]["hold"] = {"runs": "pulse_trio.store.task.tasks:hold", "kind": "entry"}


def test_a_guard_of_the_session_chart_written_as_a_string_fails_at_load_not_at_fire_time():
    """The in-memory chart would build its Machine with conditions 'd', 'r', 'a', ... and break at a frame."""
    data = copy.deepcopy(_raw("session"))
    next(t for t in data["transitions"] if t.get("guards") == ["drain_requested"])["guards"] = "drain_requested"
    with pytest.raises(ChartError, match="session.json: .*guards must be a list"):
        parse_chart(data, origin="session.json")


def test_state_names_fit_the_state_columns():
    """Every state column of the schema is as wide as the loader lets a state name be, in ASCII."""
    import re

    from pulse_trio.charts.loader import STATE_NAME_WIDTH

    schema = (ROOT / "pulse_trio" / "store" / "schema" / "schema.sql").read_text()
    columns = re.findall(r"^\s*`(\w*state)` (.*)$", schema, re.M)
    assert len(columns) >= 10
    for name, definition in columns:
        assert definition.startswith(f"varchar({STATE_NAME_WIDTH}) CHARACTER SET ascii"), (name, definition)


def test_each_trigger_names_its_store_function_and_steps():
    lease = load_specs()["lease"]
    finish = lease.functions["finish"]
    assert finish.runs.endswith(":finish") and finish.entry
    assert [(s.name, s.when) for s in finish.steps] == [
        ("task.finish", ""), ("key_permit.release", "keyed"), ("cancellation.resolve", "a cancel intent is open")]
    assert not lease.functions["revoke"].entry
    assert all(not spec.functions for spec in load_specs().values() if not spec.persistent)


def _check(mutate):
    from pulse_trio.charts.loader import check_functions

    specs = {name: parse_chart(_raw(name), origin=f"{name}.json") for name in CHARTS}
    mutate(specs)
    check_functions(specs)


def _with_steps(specs, chart, trigger, *steps):
    import dataclasses

    from pulse_trio.charts.loader import StepCall

    spec = specs[chart]
    fn = dataclasses.replace(spec.functions[trigger], steps=tuple(StepCall(s) for s in steps))
    specs[chart] = dataclasses.replace(spec, functions={**spec.functions, trigger: fn})


@pytest.mark.parametrize("mutate,message", [
    (lambda s: _with_steps(s, "queue", "pause", "task.nosuch"), "which no persistent chart declares"),
    (lambda s: _with_steps(s, "lease", "assign", "key_permit.acquire", "task.wait_for_key"),
     "task.offer is a step, but no function runs it"),
    (lambda s: _with_steps(s, "task", "key_freed", "lease.revoke"), "in a loop"),
    (lambda s: s.update(queue=parse_chart({k: v for k, v in _raw("queue").items() if k != "functions"},
                                          origin="queue.json")), "names the store function of each trigger"),
])
def test_the_functions_across_the_charts_are_checked_at_load(mutate, message):
    _check(lambda specs: None)
    with pytest.raises(ChartError, match=message):
        _check(mutate)


def test_the_model_check_data_is_loaded_and_optional():
    """``model`` and ``effects`` are for the model checker (docs/statecharts/verification.md §2); the store ignores them."""
    lease = load_specs()["lease"]
    assert lease.model.guards["revision_current"] == "cmd.revision == lease.revision"
    assert "lease.revision = lease.revision + 1" in next(t for t in lease.transitions if t.trigger == "finish").effects
    bare = copy.deepcopy(_raw("key_permit"))
    del bare["model"]
    for t in bare["transitions"]:
        t.pop("effects", None)
    spec = parse_chart(bare, origin="key_permit.json")
    assert spec.model is None and all(t.effects == () for t in spec.transitions)


def test_load_specs_matches_the_files():
    specs = load_specs()
    assert specs["lease"] == parse_chart(_raw("lease"), origin="lease.json")


def test_no_python_module_redeclares_a_transition():
    """The store, the charts package and the SDK build no transition table of their own (the loader converts data)."""
    import re

    paths = [*(ROOT / "pulse_trio" / "store").rglob("*.py"), *(ROOT / "pulse_trio" / "charts").rglob("*.py"),
             *(ROOT / "pulse_trio" / "sdk").rglob("*.py")]
    for path in paths:
        if path.name == "loader.py":
            continue
        text = path.read_text()
        assert not re.search(r"[\"']trigger[\"']\s*:", text), f"{path} declares transitions in Python"
        assert "add_transition(" not in text, path


def test_a_moved_function_is_renamed_in_its_chart_file_and_nothing_else(tmp_path):
    """What `pulse-trio statecharts functions --write` does after a module moved."""
    from pulse_trio.charts.function_names import Live, differences, rewrite

    original = (ROOT / "statecharts" / "lease.json").read_text()
    (tmp_path / "lease.json").write_text(original)
    specs = {"lease": parse_chart(_raw("lease"), origin="lease.json")}
    live = {("lease", t): Live(f.runs, f.entry) for t, f in specs["lease"].functions.items()}
    live[("lease", "finish")] = Live("pulse_trio.store.elsewhere:finish", True)
    live[("lease", "cancel")] = Live(live[("lease", "cancel")].runs, True)  # a kind: by hand
    found = differences(specs, live)
    assert [(d.trigger, d.what) for d in found] == [("finish", "runs"), ("cancel", "kind")]
    assert rewrite(tmp_path, found) == [tmp_path / "lease.json"]
    old = specs["lease"].functions["finish"].runs
    assert (tmp_path / "lease.json").read_text() == original.replace(
        f'"runs": "{old}"', '"runs": "pulse_trio.store.elsewhere:finish"')
    assert original.count(old) == 1
