"""The installed pytest fixtures, run as a user's suite runs them: a pytest sub-run of its own."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from sql_support import user_with_password

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
    import json

    with user_with_password(database_server, "pulse_plugin_user", "ALL ON `pulse\\_pytest\\_%%`.*") as login:
        password = login.password
        (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
        (tmp_path / "test_user_suite.py").write_text(textwrap.dedent(SECRETS_IN_A_FAILURE))
        env = {**os.environ, "PULSE_TEST_DATABASE_URL": login.url(redact=False), "PYTHONPATH": str(WORKTREE),
               "SECRETS_FILE": str(tmp_path / "secrets.json")}
        done = subprocess.run([sys.executable, "-m", "pytest", "-vv", "-p", "no:xdist", "test_user_suite.py"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert "1 failed, 1 passed" in done.stdout and "PulseServer(" in done.stdout, done.stdout[-4000:]
    secrets = json.loads((tmp_path / "secrets.json").read_text())
    assert secrets[3] == password
    shown = [secret for secret in secrets if secret in done.stdout + done.stderr]
    assert not shown, f"{len(shown)} secret(s) of the session printed in the failure"


CLIENT_LEFT_OPEN = '''
import gc

import pytest


@pytest.mark.anyio
async def test_a_uses_the_client_without_closing_it(pulse_client, pulse_queue):
    handle = await pulse_client.submit(pulse_queue, "invoice.send", {"invoice": 991})
    assert (await pulse_client.get(handle.task_id))["task_id"] == handle.task_id


def test_b_after_it():
    gc.collect()  # what is left open of the previous test warns now
'''


def test_pulse_client_left_open_leaves_no_socket_behind(database_server, tmp_path):
    """The README uses ``pulse_client`` without ``async with``: a suite that turns warnings into errors passes it."""
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\nfilterwarnings = error\n"
                                         "asyncio_default_fixture_loop_scope = function\n")
    (tmp_path / "test_user_suite.py").write_text(textwrap.dedent(CLIENT_LEFT_OPEN))
    env = {**os.environ, "PULSE_TEST_DATABASE_URL": database_server.url(redact=False), "PYTHONPATH": str(WORKTREE)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "test_user_suite.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert "3 passed" in done.stdout and "failed" not in done.stdout and "error" not in done.stdout, \
        done.stdout[-4000:]


SERVER_ANSWERS = '''
import httpx


def test_the_server_answers(pulse_server):
    assert httpx.get(pulse_server.http_url + "/readyz").status_code == 200
'''


def test_a_run_whose_temp_folder_has_a_long_path_gets_its_managed_database(tmp_path):
    """tox's ``--basetemp={envtmpdir}`` or a deep CI checkout: too long a path for mariadbd's socket to live in."""
    short = Path(tempfile.mkdtemp(prefix="pt-"))  # the sub-run's TMPDIR: whatever the plugin puts there is seen
    base = short / ("a-deep-checkout-" * 5) / ".tox" / "py311" / "tmp"
    base.parent.mkdir(parents=True)
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    (tmp_path / "test_user_suite.py").write_text(textwrap.dedent(SERVER_ANSWERS))
    env = {name: value for name, value in os.environ.items() if name != "PULSE_TEST_DATABASE_URL"}
    env.update(PYTHONPATH=str(WORKTREE), TMPDIR=str(short))
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", f"--basetemp={base}",
                               "test_user_suite.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
        assert "1 passed" in done.stdout, done.stdout[-4000:]
        assert sorted(path.name for path in short.iterdir()) == [base.parents[2].name], "a folder was left behind"
    finally:
        shutil.rmtree(short, ignore_errors=True)


HOLDS_THE_SERVER = '''
import os
import time


def test_holds_the_server_until_killed(pulse_server):
    with open(os.environ["READY_FILE"], "w") as out:
        out.write(pulse_server.http_url)
    time.sleep(300)
'''


def _children(pid: int) -> dict[int, str]:
    """The live processes whose parent is ``pid``: number and name (from /proc)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
            if int(rest[1]) == pid and rest[0] != "Z":
                found[int(entry.name)] = name
    return found


def _alive(pid: int) -> bool:
    """Running (a zombie nobody reaped has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_test_run_leaves_no_serve_and_no_mariadbd_running(tmp_path, signum):
    """A CI job's time limit ends pytest with SIGTERM, or SIGKILL: the processes its fixtures started die with it."""
    base = Path(tempfile.mkdtemp(prefix="pt-"))  # short: the managed MariaDB's socket path has a length limit
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    (tmp_path / "test_user_suite.py").write_text(textwrap.dedent(HOLDS_THE_SERVER))
    env = {name: value for name, value in os.environ.items() if name != "PULSE_TEST_DATABASE_URL"}
    env.update(PYTHONPATH=str(WORKTREE), READY_FILE=str(tmp_path / "ready"))
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:timeout",
                            f"--basetemp={base / 't'}", "test_user_suite.py"],
                           cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "ready").exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (tmp_path / "ready").exists(), "the sub-run never got its pulse_server"
        children = _children(run.pid)
        assert "mariadbd" in children.values() and len(children) == 2, children
        run.send_signal(signum)
        run.wait(timeout=30)
        deadline = time.monotonic() + 15
        while any(map(_alive, children)) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = {pid: name for pid, name in children.items() if _alive(pid)}
        assert not left, f"still running after pytest was killed: {left}"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        for pid in children:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(base, ignore_errors=True)
