"""docs/worker.md §14.5 names every module of the SDK, and only those.

The section is the map of ``pulse_trio.sdk`` for a reader looking for where
a behaviour lives; a module added without its entry is one the map hides.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SDK = ROOT / "pulse_trio" / "sdk"


def _section() -> str:
    text = (ROOT / "docs" / "worker.md").read_text("utf-8")
    return text.split("\n### 14.5 Modules\n", 1)[1].split("\n## ", 1)[0]


def test_the_module_map_names_every_sdk_module():
    modules = {path.stem for path in SDK.glob("*.py") if path.stem != "__init__"}
    # Entries are separated by "·", each opening with the module's name in code.
    named = set(re.findall(r"(?:\A|·)\s*`(\w+)`", _section().strip()))
    assert sorted(modules - named) == [], "SDK modules docs/worker.md §14.5 does not name"
    assert sorted(named - modules) == [], "modules docs/worker.md §14.5 names that the SDK lacks"
