"""Several users of one managed MariaDB: whoever stops last stops the server that serves the state dir, promptly."""

from __future__ import annotations

import contextlib
import os
import signal
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

