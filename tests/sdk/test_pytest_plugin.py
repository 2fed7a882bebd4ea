"""The installed pytest fixtures, run as a user's suite runs them: a pytest sub-run of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.live  # a sub-run that starts the service and workers

WORKTREE = Path(__file__).resolve().parents[2]

TWO_WORKERS_ONE_FAILS = '''
import threading
import time

import pytest


def test_a_two_workers_the_second_one_fails(pulse_worker, pulse_sync_client, pulse_queue):
    async def audit(task):
        pytest.fail("the audit handler saw a payload it did not expect")  # a test's assertion helper

    pulse_worker({"invoice.send": lambda task: {"sent": True}})
    second = pulse_worker({"invoice.audit": audit})
    pulse_sync_client.submit(pulse_queue, "invoice.audit", {})
    deadline = time.monotonic() + 20
    while second.error is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert second.error is not None


def test_b_no_worker_of_the_previous_test_is_left_running():
    alive = [t for t in threading.enumerate() if t.name == "pulse-background-worker" and t.is_alive()]
    assert not alive, f"{len(alive)} worker thread(s) of the previous test still run"
'''


def test_every_worker_of_a_test_is_stopped_even_when_one_of_them_failed(database_server, tmp_path):
    """The failed worker fails the first test's teardown (an ERROR); its other worker is stopped all the same."""
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    (tmp_path / "test_user_suite.py").write_text(textwrap.dedent(TWO_WORKERS_ONE_FAILS))
    env = {**os.environ, "PULSE_TEST_DATABASE_URL": database_server.url(redact=False), "PYTHONPATH": str(WORKTREE)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "test_user_suite.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert "2 passed, 1 error" in done.stdout and "the background worker failed" in done.stdout, done.stdout[-4000:]
