"""The state sets the store filters on are exactly what the chart files declare."""

from __future__ import annotations

import json
from pathlib import Path

from pulse_trio.charts import states

ROOT = Path(__file__).parents[2]


def _declared(name: str) -> tuple[list[str], set[str]]:
    """(states other than NONE, states some transition leaves for a row state), straight from the JSON.

    A purge (dest NONE) deletes the row: it does not make its sources live.
    """
    data = json.loads((ROOT / "statecharts" / f"{name}.json").read_text())
    sources: set[str] = set()
    for t in data["transitions"]:
        if t["dest"] != "NONE":
            sources.update(t["source"] if isinstance(t["source"], list) else [t["source"]])
    return [s for s in data["states"] if s != "NONE"], sources


def test_task_sets_match_the_task_chart():
    declared, sources = _declared("task")
    assert list(states.TASK_ROW_STATES) == declared
    assert states.HELD_TASK_STATE == "OFFERED"
    lease, _ = _declared("lease")
    # A reader sees a held row as its live lease's state: the row's states with OFFERED told apart.
    assert list(states.TASK_STATES) == ["SCHEDULED", "READY", "OFFERED", "RUNNING", "SUCCEEDED", "FAILED",
                                        "UNKNOWN", "CANCELLED"]
    assert set(states.TASK_STATES) == (set(declared) - {"OFFERED"}) | set(states.LIVE_LEASE_STATES)
    assert set(states.LIVE_LEASE_STATES) <= set(lease)
    assert states.TERMINAL_TASK_STATES == {s for s in declared if s not in sources}
    assert states.TERMINAL_TASK_STATES == {"SUCCEEDED", "FAILED", "UNKNOWN", "CANCELLED"}
    submit = {t["dest"] for t in json.loads((ROOT / "statecharts" / "task.json").read_text())["transitions"]
              if t["trigger"] == "submit"}
    assert set(states.WAITING_TASK_STATES) == submit == {"READY", "SCHEDULED"}


def test_live_lease_and_session_sets_match_their_charts():
    for name, live in (("lease", states.LIVE_LEASE_STATES), ("instance", states.LIVE_SESSION_STATES)):
        declared, sources = _declared(name)
        assert list(live) == [s for s in declared if s in sources]
    assert states.LIVE_LEASE_STATES == ("OFFERED", "RUNNING")
    assert states.LIVE_SESSION_STATES == ("ACTIVE", "DRAINING")


def test_sql_list_quotes_each_name():
    assert states.sql_list(("OFFERED", "RUNNING")) == "('OFFERED', 'RUNNING')"


def test_a_cancel_acts_where_the_cancellation_chart_says():
    """The dashboard's "Cancel…" follows these: the task states a request acts on, from no saved request only."""
    task = json.loads((ROOT / "statecharts" / "task.json").read_text())
    at_once = {t["source"] for t in task["transitions"] if t["trigger"] == "cancel"}
    assert states.CANCEL_REQUEST_FROM == ("NONE",)
    # At once: the row states task.cancel leaves (a held one only while its lease is an unstarted offer);
    # through the worker: a held task whose lease runs, which readers see RUNNING.
    assert set(states.CANCEL_TASK_STATES) == at_once | {"RUNNING"}
    assert states.CANCEL_TASK_STATES == ("SCHEDULED", "READY", "OFFERED", "RUNNING")
    assert not set(states.CANCEL_TASK_STATES) & states.TERMINAL_TASK_STATES


def test_the_dashboard_module_carries_the_cancel_states():
    from pulse_trio.http.ui import charts_module

    text = charts_module().decode()
    assert text.splitlines()[1] == ('export const CHARTS = {"cancel": {"intent_states": ["NONE"], '
                                    '"task_states": ["SCHEDULED", "READY", "OFFERED", "RUNNING"]}};')


def test_a_guard_that_names_no_task_state_is_refused():
    import pytest

    from pulse_trio.charts import Chart, ChartError, parse_chart

    spec = parse_chart({"name": "c", "persistent": True, "initial": "NONE", "states": ["NONE", "A"],
                        "model": {"guards": {"g": "true"}},
                        "transitions": [{"trigger": "request", "source": "NONE", "dest": "A", "guards": ["g"]}]})
    with pytest.raises(ChartError, match="names no task state"):
        states.task_states_guarded(Chart(spec), "request", "NONE")


def test_a_reader_sees_a_held_task_as_its_live_lease():
    assert states.public_state("OFFERED", "RUNNING") == "RUNNING"
    assert states.public_state("OFFERED", "OFFERED") == "OFFERED"
    assert states.public_state("OFFERED", None) == "OFFERED"
    assert states.public_state("READY", None) == "READY"
    assert states.public_state("SUCCEEDED", None) == "SUCCEEDED"
