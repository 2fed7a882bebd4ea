"""docs/operations.md §2 lists every `serve` flag with its variable and default, as the code has them.

docs/operations.md §2 promises that each flag of `serve` has a ``PULSE_…`` variable and says
what it defaults to; an operator reading it for a unit file has nothing
else. A flag added to ``pulse_trio.config`` without its row, or a default
changed on one side only, fails here.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

from pulse_trio import cluster_settings as cs
from pulse_trio import config

OPERATIONS = Path(__file__).resolve().parents[1] / "docs" / "operations.md"


def _section(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0]


def _rows(section: str) -> list[list[str]]:
    """The cells of each table row that starts with a code span."""
    return [[cell.strip() for cell in line.split("|")[1:-1]] for line in section.splitlines()
            if line.startswith("| `")]


def _codes(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _leading_number(cell: str) -> Decimal | None:
    match = re.match(r"`?([0-9]+(?:\.[0-9]+)?)", cell)
    return Decimal(match.group(1)) if match else None


def _documented() -> dict[str, tuple[str, str]]:
    """Each flag named in the two tables of docs/operations.md §2: (its variable, its default cell)."""
    text = OPERATIONS.read_text("utf-8")
    shared = _section(text, "\n### 2.1 ", "\n### 2.2 ")
    own = _section(text, "\n### 2.2 ", "\n## 3. ")
    found: dict[str, tuple[str, str]] = {}
    for flag_cell, env_cell, default in [row[1:4] for row in _rows(shared)] + [row[:3] for row in _rows(own)]:
        for flag, env in zip(_codes(flag_cell), _codes(env_cell), strict=True):
            found[flag] = (env, default)
    return found


def test_every_serve_flag_has_a_row_with_its_variable():
    documented = _documented()
    missing = [flag for flag, _, _, _ in config._OPTIONS if flag not in documented]
    assert missing == [], f"serve flags without a row in docs/operations.md §2: {missing}"
    wrong = [(flag, documented[flag][0], config.env_name(field)) for flag, field, _, _ in config._OPTIONS
             if documented[flag][0] != config.env_name(field)]
    assert wrong == []
    stale = sorted(set(documented) - {flag for flag, _, _, _ in config._OPTIONS})
    assert stale == [], f"rows of docs/operations.md §2 for flags serve does not take: {stale}"


def test_the_defaults_documented_are_the_code_s():
    documented = _documented()
    defaults = config.Settings()
    for setting in cs.SETTINGS:
        cell = documented[setting.flag][1]
        if setting.default_ms is None:
            assert cell.startswith(f"`{setting.null_word}`"), (setting.flag, cell)
        else:
            assert _leading_number(cell) == Decimal(setting.default_ms) / 1000, (setting.flag, cell)
    for flag, field, _, _ in config._OPTIONS:
        value = getattr(defaults, field)
        if field in cs.BY_NAME or value is None or isinstance(value, Path):
            continue  # the cluster's, above; or said in words (a managed database, a free port, none)
        cell = documented[flag][1]
        if isinstance(value, tuple):
            assert cell.startswith(f"`{value[0]}:{value[1]}`"), (flag, cell)
        else:
            assert _leading_number(cell) == Decimal(str(value)), (flag, cell)
