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


SECRETS_IN_A_FAILURE = '''
import json
import os


def test_a_keeps_what_must_not_be_shown(pulse_server):
    secrets = [pulse_server.producer_token, pulse_server.worker_token, pulse_server.operator_token,
               pulse_server.database.password]
    with open(os.environ["SECRETS_FILE"], "w") as out:
        json.dump(secrets, out)


def test_b_fails_on_the_server_it_was_given(pulse_server):
    assert pulse_server.http_url.startswith("https://")
'''


def test_a_failure_that_shows_pulse_server_shows_no_token_and_no_database_password(database_server, tmp_path):
    """pytest prints the objects of a failed assertion (all of them with -vv): the session's secrets stay out."""
    import dataclasses
    import json

    from pulse_trio.store.engine.writer import connect

    user, password = "pulse_plugin_user", "pw-" + os.urandom(8).hex()
    root = connect(database_server, database=False)
    try:
        with root.cursor() as cursor:
            for host in ("localhost", "%"):
                cursor.execute("CREATE OR REPLACE USER %s@%s IDENTIFIED BY %s", (user, host, password))
                cursor.execute("GRANT ALL ON `pulse\\_pytest\\_%%`.* TO %s@%s", (user, host))
        url = dataclasses.replace(database_server, user=user, password=password).url(redact=False)
        (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
        (tmp_path / "test_user_suite.py").write_text(textwrap.dedent(SECRETS_IN_A_FAILURE))
        env = {**os.environ, "PULSE_TEST_DATABASE_URL": url, "PYTHONPATH": str(WORKTREE),
               "SECRETS_FILE": str(tmp_path / "secrets.json")}
        done = subprocess.run([sys.executable, "-m", "pytest", "-vv", "-p", "no:xdist", "test_user_suite.py"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    finally:
        with root.cursor() as cursor:
            for host in ("localhost", "%"):
                cursor.execute("DROP USER IF EXISTS %s@%s", (user, host))
        root.close()
    assert "1 failed, 1 passed" in done.stdout and "PulseServer(" in done.stdout, done.stdout[-4000:]
    secrets = json.loads((tmp_path / "secrets.json").read_text())
    assert secrets[3] == password
    shown = [secret for secret in secrets if secret in done.stdout + done.stderr]
    assert not shown, f"{len(shown)} secret(s) of the session printed in the failure"
