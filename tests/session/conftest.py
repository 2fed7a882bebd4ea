"""Session tests: ``ServerSession`` driven in memory, frames in, events and frames out.

No socket, no database, no Trio. The suite runs with
``--import-mode=importlib``, where sibling modules are not importable, so
this folder (for ``session_support``) and the contract folder (for the
wire examples and schema validators of ``contract_support``) are put on
``sys.path``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
for folder in (_HERE, _HERE.parent / "contract"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
