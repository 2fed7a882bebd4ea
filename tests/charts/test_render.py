"""docs/statecharts/*.md are generated from the chart files and must be fresh."""

from __future__ import annotations

from pathlib import Path

import pytest

from pulse_trio.charts import CHARTS
from pulse_trio.charts.render import Implementations, dot, mermaid, page, render
from pulse_trio.cli import main as cli_main
from pulse_trio.cli.statecharts import store_implementations

DOCS = Path(__file__).parents[2] / "docs" / "statecharts"
STORE = store_implementations()


def main(argv: list[str]) -> int:
    return cli_main(["statecharts", "render", *argv])


def test_committed_pages_are_fresh():
    stale = render(DOCS, STORE, check=True)
    assert not stale, f"stale: {[p.name for p in stale]}; run `pulse-trio statecharts render`"


def test_mermaid_comes_from_transitions_graph_machine():
    text = mermaid(CHARTS["lease"])
    assert text.startswith("---\nlease\n---\nstateDiagram-v2")
    assert "OFFERED --> RUNNING: start [lease_secret_matches" in text
    assert "[*] --> NONE" in text


def test_every_transition_and_its_function_is_listed():
    text = page(CHARTS["task"], STORE)
    for t in CHARTS["task"].spec.transitions:
        assert f"| `{t.trigger}` | {t.source} | {t.dest} |" in text
    assert "`pulse_trio.store.task.tasks.submit` (entry)" in text
    assert "`pulse_trio.store.task.steps.offer` (step)" in text
    assert "refuses with `task_not_found`" in text


def test_main_writes_and_checks(tmp_path, capsys):
    assert main(["--output", str(tmp_path), "--no-svg", "lease"]) == 0
    assert (tmp_path / "lease.md").read_text() == page(CHARTS["lease"], STORE)
    assert main(["--output", str(tmp_path), "--check", "lease"]) == 0
    (tmp_path / "lease.md").write_text("old")
    assert main(["--output", str(tmp_path), "--check", "lease"]) == 1
    assert "stale" in capsys.readouterr().err


def test_flags_after_the_separator_and_unknown_charts(tmp_path, capsys):
    assert main(["--output", str(tmp_path), "--no-svg", "--", "--check", "lease"]) == 1  # nothing written yet
    assert not (tmp_path / "lease.md").exists()
    with pytest.raises(SystemExit) as exited:
        main(["--output", str(tmp_path), "nosuch"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.endswith("error: unknown chart(s): nosuch; known: " + ", ".join(sorted(CHARTS)) + "\n")
    assert err.count("\n") == 2  # the stale line of the first call, then the one error line


def test_a_page_without_the_store_says_what_is_missing():
    """The renderer knows only what it is given: the charts package does not reach into the store."""
    text = page(CHARTS["task"], Implementations())
    assert "| `submit` | NONE |" in text and "**missing**" in text


def test_dot_source_has_every_edge():
    text = dot(CHARTS["key_permit"])
    assert '"HELD" -> "QUARANTINED" [label="quarantine"]' in text


def test_svg_is_written_when_graphviz_is_installed(tmp_path, monkeypatch):
    """With a stand-in `dot` on PATH the renderer pipes the DOT source through it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "dot"
    fake.write_text("#!/bin/sh\necho '<svg>'; cat; echo '</svg>'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    out = tmp_path / "docs"
    render(out, STORE, ["key_permit"])
    svg = (out / "key_permit.svg").read_text()
    assert svg.startswith("<svg>") and '"HELD" -> "RELEASED"' in svg
