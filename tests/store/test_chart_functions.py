"""The chart files name the store function of each trigger: the names are the registry's, checked here.

A function that moved to another module fails this test with the name to
write; ``pulse-trio statecharts functions --write`` writes them all.
"""

from __future__ import annotations

import importlib

from pulse_trio.charts import CHARTS, load_specs
from pulse_trio.charts.function_names import Live, differences
from pulse_trio.cli import main as cli_main
from pulse_trio.cli.statecharts import live_name, store_functions
from pulse_trio.store import REGISTRY


def test_every_chart_names_the_registered_function_of_each_trigger_and_its_kind():
    found = differences(load_specs(), store_functions())
    assert not found, "\n".join(map(str, found)) + "\n(`pulse-trio statecharts functions --write` mends runs)"


def test_every_registered_function_is_named_by_its_chart():
    named = {(c.name, t) for c in CHARTS.values() for t in c.spec.functions}
    assert set(REGISTRY) == named


def test_each_name_imports_the_registered_function_itself():
    for (chart, trigger), registration in REGISTRY.items():
        runs = CHARTS[chart].spec.functions[trigger].runs
        module, _, name = runs.partition(":")
        assert getattr(importlib.import_module(module), name) is registration.function, f"{chart}.{trigger}: {runs}"
        assert live_name(registration.function) == runs


def test_differences_name_what_to_write():
    specs = load_specs(["lease"])
    named = specs["lease"].functions
    live = {key: value for key, value in store_functions().items() if key[0] == "lease"}
    live[("lease", "finish")] = Live("pulse_trio.store.elsewhere:finish", True)
    live[("lease", "revoke")] = Live(live[("lease", "revoke")].runs, True)
    del live[("lease", "renew")]
    assert [str(d) for d in differences(specs, live)] == [
        f"statecharts/lease.json functions.renew: the chart names {named['renew'].runs!r}, but the store "
        "registers no function",
        f"statecharts/lease.json functions.finish.runs: the chart says {named['finish'].runs!r}, the store "
        "registers 'pulse_trio.store.elsewhere:finish'",
        "statecharts/lease.json functions.revoke.kind: the chart says 'step', the store registers 'entry'",
    ]


def test_the_command_checks_the_files(capsys):
    assert cli_main(["statecharts", "functions"]) == 0
    assert cli_main(["statecharts", "functions", "--check"]) == 0
    assert capsys.readouterr().err == ""
