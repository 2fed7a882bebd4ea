"""Contract tests: plain synchronous tests of the sans-IO wire layer.

The suite runs with ``--import-mode=importlib``, where sibling modules are
not importable, so this folder is put on ``sys.path`` for the shared
``contract_support`` helpers.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
