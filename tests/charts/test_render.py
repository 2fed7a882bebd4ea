"""docs/statecharts/*.md are generated from the chart files and must be fresh."""

from __future__ import annotations

from pathlib import Path

from pulse_trio.charts import CHARTS
from pulse_trio.charts.render import dot, main, mermaid, page, render

DOCS = Path(__file__).parents[2] / "docs" / "statecharts"


def test_committed_pages_are_fresh():
    stale = render(DOCS, check=True)
    assert not stale, f"stale: {[p.name for p in stale]}; run `pulse-trio statecharts render`"


def test_mermaid_comes_from_transitions_graph_machine():
    text = mermaid(CHARTS["lease"])
    assert text.startswith("---\nlease\n---\nstateDiagram-v2")
    assert "OFFERED --> RUNNING: start [lease_secret_matches" in text
    assert "[*] --> NONE" in text


def test_every_transition_and_its_function_is_listed():
    text = page(CHARTS["task"])
    for t in CHARTS["task"].spec.transitions:
        assert f"| `{t.trigger}` | {t.source} | {t.dest} |" in text
    assert "`pulse_trio.store.tasks.submit` (entry)" in text
    assert "`pulse_trio.store.task_steps.offer` (step)" in text
    assert "refuses with `task_not_found`" in text


def test_main_writes_and_checks(tmp_path, capsys):
    assert main(["--output", str(tmp_path), "--no-svg", "lease"]) == 0
    assert (tmp_path / "lease.md").read_text() == page(CHARTS["lease"])
    assert main(["--output", str(tmp_path), "--check", "lease"]) == 0
    (tmp_path / "lease.md").write_text("old")
    assert main(["--output", str(tmp_path), "--check", "lease"]) == 1
    assert "stale" in capsys.readouterr().err


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
    render(out, ["key_permit"])
    svg = (out / "key_permit.svg").read_text()
    assert svg.startswith("<svg>") and '"HELD" -> "RELEASED"' in svg
