"""Running `pulse-trio` commands and a `pulse-trio serve` process for the CLI tests."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

from pulse_trio.serve_process import ServeProcess

COMMAND = [sys.executable, "-m", "pulse_trio"]


def run(*args: str, timeout: float = 60, stdin: str | None = None, cwd: str | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """One command to its end (the environment is the test's, PULSE_STATE_DIR included)."""
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=timeout, input=stdin,
                          cwd=cwd, env=env)


@contextlib.contextmanager
def serve(db, *extra: str) -> Iterator[tuple[int, int]]:
    """A `pulse-trio serve` process on ``db``; yields (worker port, HTTP port) once both answer.

    Through ``ServeProcess``, which starts it again on fresh ports when one it chose was taken
    before ``serve`` bound it.
    """
    with ServeProcess(db, extra_args=extra) as process:
        yield process.worker_port, process.http_port
