"""tests/cli: the `pulse-trio` command as a user runs it (real subprocesses).

Under --import-mode=importlib a test folder is not importable, so this
folder is put on ``sys.path`` for ``cli_support``. Every command runs with
``PULSE_STATE_DIR`` in the test's own folder, never the real home.
"""

from __future__ import annotations

import os
import sys

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture(autouse=True)
def _private_state_dir(tmp_path, monkeypatch):
    """The managed database's home for this test: a folder of its own."""
    monkeypatch.setenv("PULSE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("PULSE_DATABASE_URL", raising=False)
