"""Running `pulse-trio` commands and a `pulse-trio serve` process for the CLI tests."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

from pulse_trio.ports import free_port

COMMAND = [sys.executable, "-m", "pulse_trio"]


def run(*args: str, timeout: float = 60, stdin: str | None = None, cwd: str | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """One command to its end (the environment is the test's, PULSE_STATE_DIR included)."""
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=timeout, input=stdin,
                          cwd=cwd, env=env)


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


def wait_answering(http_port: int, proc: subprocess.Popen, timeout: float = 30) -> None:
    """Until the HTTP API answers: it serves only once the node has joined (ports are bound earlier)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/healthz", timeout=5):
                return
        except (OSError, urllib.error.URLError):
            time.sleep(0.05)
    raise AssertionError(f"the HTTP API on {http_port} does not answer")


@contextlib.contextmanager
def serve(db, *extra: str) -> Iterator[tuple[int, int]]:
    """A `pulse-trio serve` process on ``db``; yields (worker port, HTTP port) once both listen."""
    worker_port, http_port = free_port(), free_port()
    proc = subprocess.Popen([*COMMAND, "serve", "--database-url", db.url(redact=False),
                             "--worker-listen", f"127.0.0.1:{worker_port}",
                             "--http-listen", f"127.0.0.1:{http_port}", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_answering(http_port, proc)
        yield worker_port, http_port
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
