"""The examples run as a user runs them: the example app's own tests, with the installed pytest fixtures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_example_app_passes_its_tests_with_the_pytest_fixtures(database_server):
    """One sub-run of pytest (its own settings, not trio_mode): AnyIO on asyncio, pytest-trio, pytest-asyncio and a plain test."""
    env = {**os.environ, "PULSE_TEST_DATABASE_URL": database_server.url(redact=False)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "test_invoice_app.py"], cwd=EXAMPLES, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "5 passed" in done.stdout, done.stdout[-2000:]
