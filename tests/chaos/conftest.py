"""The chaos group's helpers (fleet, proxy, checks) are plain modules in this folder.

The suite runs with ``--import-mode=importlib``, where sibling modules are
not importable, so this folder is put on ``sys.path`` and tests do
``import chaos_checks`` (the ``chaos_`` prefix keeps the names apart from
other folders' helpers).
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
