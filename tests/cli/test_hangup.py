"""SIGHUP, what a closing terminal sends, stops `serve` as SIGTERM does (docs/operations.md §4).

The README's first command runs `serve` in a terminal, with the managed
MariaDB it starts: closing that terminal must not leave the node ALIVE for
others to declare lost, nor that mariadbd running with nobody to stop it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from cli_support import COMMAND, gone_within, mariadbd_child, run, stop_left_running

pytestmark = pytest.mark.live  # it runs serve with a managed mariadbd


def test_sighup_stops_serve_and_the_managed_database_it_started():
    state = Path(os.environ["PULSE_STATE_DIR"]).resolve() / "mariadb"
    assert run("migrate", timeout=120).returncode == 0  # initialised, then stopped again
    with tempfile.TemporaryDirectory(prefix="pulse-hup-") as folder:
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(os.path.join(folder, "notify"))
        notify.settimeout(60)
        serve = subprocess.Popen([*COMMAND, "serve", "--worker-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
                                  "--log-level", "warning"], env=dict(os.environ, NOTIFY_SOCKET=notify.getsockname()),
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        mariadbd = None
        try:
            with notify:  # serve's own READY=1 (the mariadbd it starts is not given this socket)
                assert b"READY=1" in notify.recv(4096)
            mariadbd = mariadbd_child(serve.pid, state)
            assert mariadbd is not None
            serve.send_signal(signal.SIGHUP)
            returncode = serve.wait(60)
            stderr = serve.stderr.read().decode(errors="replace")
            assert returncode == 0 and "Traceback" not in stderr, stderr
            assert gone_within(mariadbd, 10), "the managed mariadbd outlived serve"
        finally:
            if serve.poll() is None:
                serve.kill()
                serve.wait()
            stop_left_running(mariadbd)
    nodes = run("nodes", "--all", timeout=120)  # starts the managed database again, to read what serve left
    assert nodes.returncode == 0, nodes
    assert [node["state"] for node in json.loads(nodes.stdout)["nodes"]] == ["STOPPED"], nodes.stdout
