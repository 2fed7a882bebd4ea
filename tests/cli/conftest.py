"""tests/cli: the `pulse-trio` command as a user runs it (real subprocesses).

``cli_support`` is importable through the ``pythonpath`` of pyproject.toml.
Every command runs with ``PULSE_STATE_DIR`` in the test's own folder, never
the real home.
"""

from __future__ import annotations

import pytest



@pytest.fixture(autouse=True)
def _private_state_dir(tmp_path, monkeypatch):
    """The managed database's home for this test: a folder of its own."""
    monkeypatch.setenv("PULSE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("PULSE_DATABASE_URL", raising=False)
