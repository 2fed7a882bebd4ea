"""Running `pulse-trio` commands and a `pulse-trio serve` process for the CLI tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

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


def mariadbd_child(parent: int, state: Path) -> int | None:
    """The pid of ``parent``'s mariadbd child serving ``state``, if it has started one yet."""
    with contextlib.suppress(OSError):
        for pid in Path(f"/proc/{parent}/task/{parent}/children").read_text().split():
            with contextlib.suppress(OSError):
                if f"--pid-file={state}" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                    return int(pid)
    return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie of ours is not running
        if Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z"):
            return False
    return True


def gone_within(pid: int, seconds: float) -> bool:
    """Whether ``pid`` has ended within ``seconds``."""
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def stop_left_running(mariadbd: int | None) -> None:
    """A test's clean-up: a managed mariadbd its serve left running is stopped, so the next test starts afresh."""
    if mariadbd is not None and alive(mariadbd):
        os.kill(mariadbd, signal.SIGTERM)
        gone_within(mariadbd, 30)
