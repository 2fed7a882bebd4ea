"""Several users of one managed MariaDB: whoever stops last stops the server that serves the state dir, promptly."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

import pytest

from pulse_trio.managed_db import ManagedMariaDB

pytestmark = pytest.mark.live  # it runs mariadbd processes


@pytest.fixture
def state_dir(tmp_path):
    yield tmp_path
    if ManagedMariaDB(tmp_path)._answers():  # a server the test failed to stop: leak none
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((tmp_path / "mysqld.pid").read_text().strip()), signal.SIGKILL)


def test_the_last_user_stops_the_server_after_another_user_restarted_it(state_dir):
    """A's server dies (an OOM kill); B starts it again; B stops first, A last: A stops B's server, not only its dead child."""
    a = ManagedMariaDB(state_dir, fast=True)
    a.start()
    a._process.send_signal(signal.SIGKILL)
    a._process.wait()
    b = ManagedMariaDB(state_dir, fast=True)
    b.start()
    b.stop()  # A still uses it
    assert a._answers()
    a.stop()
    assert not a._answers(), "the last user stopped, yet a server still serves the state dir"


def test_the_last_user_stops_a_server_that_another_object_of_this_process_started_promptly(state_dir):
    """The starter stops first; the other stops the server, this process's child, through the pid file:
    it reaps it rather than waiting its whole timeout on the zombie."""
    a = ManagedMariaDB(state_dir, fast=True)
    a.start()
    b = ManagedMariaDB(state_dir, fast=True)
    b.start()  # reuses A's server
    a.stop()
    started = time.monotonic()
    b.stop(timeout=15)
    assert not b._answers()
    assert time.monotonic() - started < 8, "stop() waited for a zombie until its timeout"


def test_a_stale_pid_file_is_not_trusted_when_nothing_answers(state_dir):
    """The server died with nobody to restart it: the last user signals no process the old pid file names."""
    a = ManagedMariaDB(state_dir, fast=True)
    a.start()
    a._process.send_signal(signal.SIGKILL)
    a._process.wait()
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        a.pid_path.write_text(f"{bystander.pid}\n")  # the number now belongs to another process
        a.stop(timeout=2)
        assert bystander.poll() is None, "the stale pid file's process was signalled"
    finally:
        bystander.kill()
        bystander.wait()
