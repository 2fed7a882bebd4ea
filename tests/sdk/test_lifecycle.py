"""The SDK's lease and command lifecycles come from the chart files, and nothing else moves them."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from pulse_trio.charts import ChartError
from pulse_trio.sdk import lease
from pulse_trio.sdk.lifecycle import COMMAND, LEASE, Lifecycle

ROOT = Path(__file__).parents[2]


def _declared(name: str) -> dict[tuple[str, str], str]:
    data = json.loads((ROOT / "statecharts" / f"{name}.json").read_text())
    moves = {}
    for t in data["transitions"]:
        for source in t["source"] if isinstance(t["source"], list) else [t["source"]]:
            moves[t["trigger"], source] = t["dest"]
    return moves


@pytest.mark.parametrize("lifecycle", [LEASE, COMMAND], ids=lambda c: c.name)
def test_every_declared_move_and_no_other(lifecycle):
    moves = _declared(lifecycle.name)
    states = json.loads((ROOT / "statecharts" / f"{lifecycle.name}.json").read_text())["states"]
    for trigger in {t for t, _ in moves}:
        for state in states:
            if (trigger, state) in moves:
                assert lifecycle.next(trigger, state) == moves[trigger, state]
            else:
                with pytest.raises(ChartError, match=f"{trigger} is not declared from {state}"):
                    lifecycle.next(trigger, state)


def test_the_runner_compares_the_charts_own_state_objects():
    """Phases are compared with ``is``: a move returns the very object the module's constant is."""
    assert lease.STARTING is LEASE.initial and lease.PARKED is COMMAND.initial
    assert LEASE.next("started", lease.STARTING) is lease.RUNNING
    assert LEASE.next("handler_returned", lease.RUNNING) is lease.FINISHING
    assert LEASE.next("lost", lease.FINISHING) is lease.RETIRED
    assert COMMAND.next("send", lease.PARKED) is lease.SENT
    assert COMMAND.next("retry_later", lease.SENT) is lease.RETRYING
    with pytest.raises(ChartError, match="has no state 'idle'"):
        LEASE.state("idle")


def test_only_worker_charts_without_guards_are_tables():
    with pytest.raises(ChartError, match="not a guardless worker chart"):
        Lifecycle("lease")


def test_lease_py_changes_a_phase_or_a_command_state_only_through_the_charts():
    """Every assignment to ``.phase`` or ``.state`` in the runner takes its value from a Lifecycle."""
    tree = ast.parse((ROOT / "pulse_trio" / "sdk" / "lease.py").read_text())
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            for leaf in ast.walk(target):
                if isinstance(leaf, ast.Attribute) and leaf.attr in ("phase", "state"):
                    found.append(ast.unparse(node.value))
    assert sorted(found) == ["COMMAND.initial", "COMMAND.next(trigger, self.state)", "LEASE.initial",
                             "LEASE.next(trigger, self.phase)"]
