"""The examples run as a user runs them: the example app's own tests, with the installed pytest fixtures."""

from __future__ import annotations

import os
import re
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


#: A file of the repository named in prose: ``tests/sdk/test_testing.py``, ``docs/worker.md``.
REPOSITORY_PATH = re.compile(r"(?<![\w/.-])(?:tests|examples|pulse_trio|docs|scripts)/[\w./-]+\.(?:py|md|ini|toml)\b")


def test_every_file_the_examples_and_the_worker_guide_point_to_exists():
    """A reader sent to a file for how the example is tested finds it."""
    root = EXAMPLES.parent
    cited = {(source.relative_to(root).as_posix(), path)
             for source in [*EXAMPLES.iterdir(), root / "docs" / "worker.md"] if source.is_file()
             for path in REPOSITORY_PATH.findall(source.read_text())}
    assert ("examples/billing_worker.py", "docs/worker.md") in cited  # the pattern finds what it must
    missing = sorted(f"{source} -> {path}" for source, path in cited if not (root / path).is_file())
    assert not missing, missing
