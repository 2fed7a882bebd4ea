"""docs/statecharts/*.md are generated from the chart files and must be fresh."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pulse_trio.charts import CHARTS
from pulse_trio.charts.render import HEADER, Implementations, dot, mermaid, page, render
from pulse_trio.cli import main as cli_main
from pulse_trio.cli.statecharts import store_implementations

DOCS = Path(__file__).parents[2] / "docs" / "statecharts"
STORE = store_implementations()


def main(argv: list[str]) -> int:
    return cli_main(["statecharts", "render", *argv])


def test_committed_pages_are_fresh():
    stale = render(DOCS, STORE, check=True)
    assert not stale, f"stale: {[p.name for p in stale]}; run `pulse-trio statecharts render`"


def test_every_http_route_a_chart_names_is_one_the_api_serves():
    """A chart's descriptions become its page: a route they name must be in docs/openapi.json."""
    import json
    import re

    document = json.loads((DOCS.parent / "openapi.json").read_text())
    served = {(method.upper(), re.sub(r"\{[^}]*\}", "{}", path))
              for path, operations in document["paths"].items() for method in operations}
    named = re.compile(r"\b(GET|PUT|POST|PATCH|DELETE) (/v1/[\w/{}.-]+)")
    unknown = []
    for name, loaded in CHARTS.items():
        texts = [loaded.spec.description] + [t.description for t in loaded.spec.transitions]
        for method, path in (m for text in texts for m in named.findall(text)):
            if (method, re.sub(r"\{[^}]*\}", "{}", path)) not in served:
                unknown.append((name, method, path))
    assert not unknown


def test_a_page_whose_chart_file_was_removed_or_renamed_is_stale(tmp_path, capsys):
    """A chart renamed from ``permit`` to ``key_permit`` (or deleted) leaves its generated page behind."""
    out = tmp_path / "statecharts"
    shutil.copytree(DOCS, out)
    orphan, notes = out / "permit.md", out / "notes.md"
    orphan.write_text(HEADER.format(name="permit") + "\n\n# Statechart `permit`\n")
    (out / "permit.svg").write_text("<svg/>")
    notes.write_text("# Hand-written, not generated\n")
    assert render(out, STORE, check=True) == [orphan]
    assert render(out, STORE, ["lease"], check=True) == []  # a few charts: the rest of the folder is not judged
    assert main(["--check", "--output", str(out)]) == 1
    assert "stale: " + str(orphan) in capsys.readouterr().err
    assert main(["--no-svg", "--output", str(out)]) == 0
    assert "removed " + str(orphan) in capsys.readouterr().out
    assert not orphan.exists() and not (out / "permit.svg").exists() and notes.exists()
    assert render(out, STORE, check=True) == []


def test_a_missing_readme_is_stale_and_not_written_around(tmp_path, capsys):
    out = tmp_path / "statecharts"
    shutil.copytree(DOCS, out)
    (out / "README.md").unlink()
    assert render(out, STORE, check=True) == [out / "README.md"]
    assert main(["--no-svg", "--output", str(out)]) == 1
    assert "README.md: missing" in capsys.readouterr().err


def test_mermaid_comes_from_transitions_graph_machine():
    text = mermaid(CHARTS["lease"])
    assert text.startswith("---\nlease\n---\nstateDiagram-v2")
    assert "OFFERED --> RUNNING: start [lease_secret_matches" in text
    assert "[*] --> NONE" in text


def test_every_transition_and_its_function_is_listed():
    text = page(CHARTS["task"], STORE)
    for t in CHARTS["task"].spec.transitions:
        assert f"| `{t.trigger}` | {t.source} | {t.dest} |" in text
    functions = CHARTS["task"].spec.functions
    assert f"`{functions['submit'].runs}` (entry)" in text
    assert f"`{functions['offer'].runs}` (step)" in text
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


def test_a_page_without_the_store_still_names_the_functions():
    """The functions come from the chart file; only the guards' codes come from the store."""
    text = page(CHARTS["task"], Implementations())
    assert "| `submit` | NONE |" in text and f"`{CHARTS['task'].spec.functions['submit'].runs}` (entry)" in text
    assert "refuses with" not in text


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


def test_the_readme_table_is_drawn_between_its_markers(tmp_path):
    from pulse_trio.charts import ChartError
    from pulse_trio.charts.render import COMPOSITES_BEGIN, COMPOSITES_END, composites_table, readme

    table = composites_table()
    assert ("| `lease.finish` | entry | `task.finish`, `key_permit.release` (keyed), `cancellation.resolve` "
            "(a cancel intent is open) |") in table
    assert "| `key_permit.release` | step | `task.key_freed` (tasks of the key wait) |" in table
    assert "`schedule.fire` | entry | `task.submit` (an entry) |" in table
    text = f"before\n{COMPOSITES_BEGIN}\nold rows\n{COMPOSITES_END}\nafter\n"
    assert readme(text) == f"before\n{COMPOSITES_BEGIN}\n{table}{COMPOSITES_END}\nafter\n"
    with pytest.raises(ChartError, match="goes between"):
        readme("no markers\n")
    (tmp_path / "README.md").write_text(text)
    stale = render(tmp_path, STORE, check=True)
    assert tmp_path / "README.md" in stale
    render(tmp_path, STORE, svg=False)
    assert (tmp_path / "README.md").read_text() == readme(text)
    assert render(tmp_path, STORE, ["lease"], check=True) == []  # one chart: the README is not drawn


def test_a_chart_page_says_what_each_function_runs_and_who_runs_it():
    text = page(CHARTS["key_permit"], STORE)
    assert ("| `release` | step | `task.key_freed` (tasks of the key wait) | `lease.finish` (keyed), `lease.lapse`, "
            "`lease.revoke` (keyed) |") in text
    assert "## Composite transactions" not in page(CHARTS["queue"], STORE)
