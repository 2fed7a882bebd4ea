"""A real ``pulse-trio serve`` in a child process, for tests and examples (the pytest plugin uses it).

Blocking and loop-free on purpose: it starts the process, waits until the
process says it serves (``READY=1``, sd_notify's datagram, on a socket only
it was given), and stops it with SIGTERM (the orderly shutdown). Ports
are chosen by the operating system; the database must be migrated already,
or ``serve`` migrates it (it is allowed to create it). Its settings are its
arguments alone, and its database URL: the environment's ``PULSE_`` serve
settings are not passed on.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

from pulse_trio.child_process import child_environment, killed_with_parent, python_command
from pulse_trio.cli.common import EXIT_CANNOT_LISTEN
from pulse_trio.config import env_name, without_serve_settings
from pulse_trio.dburl import DatabaseConfig
from pulse_trio.ports import free_port, start_on_fresh_ports

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
#: How ``serve`` is given its database: ``--database-url``'s variable.
DATABASE_URL_VARIABLE = env_name("database_url")


class ServeExited(RuntimeError):
    """``serve`` exited before it answered; ``returncode`` says why (``EXIT_CANNOT_LISTEN``: a port was taken)."""

    def __init__(self, returncode: int, log_tail: str = "") -> None:
        super().__init__(f"pulse-trio serve exited with {returncode}: {log_tail}")
        self.returncode = returncode


@dataclasses.dataclass(eq=False)
class ServeProcess:
    """``with ServeProcess(database) as serve:`` -> ``serve.http_url``, ``serve.worker_url``.

    Ports left 0 are chosen when it starts; given ones (a restart on the same
    addresses) are used as they are.
    """

    database: DatabaseConfig
    extra_args: tuple[str, ...] = ()
    worker_port: int = 0
    http_port: int = 0
    process: subprocess.Popen[bytes] | None = dataclasses.field(default=None, repr=False)
    #: Its log (stderr) goes to a file, never a pipe nobody drains: a full pipe would stall the server.
    log: Any = dataclasses.field(default=None, repr=False)
    #: How a port left 0 is chosen (given, so a test can hand it a port that is already taken).
    choose_port: Callable[[], int] = dataclasses.field(default=free_port, repr=False)
    #: How many times ``serve`` was started: more than once when a chosen port was taken first.
    launches: int = 0
    #: Killed when the thread that started it ends, even by SIGKILL (Linux): see ``killed_with_parent``.
    die_with_parent: bool = False
    #: The ``NOTIFY_SOCKET`` it was given (its ``READY=1`` says it serves), and that socket's private folder.
    notify: socket.socket | None = dataclasses.field(default=None, repr=False)
    notify_dir: str | None = dataclasses.field(default=None, repr=False)

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def worker_url(self) -> str:
        return f"ws://127.0.0.1:{self.worker_port}/v1/worker"

    def start(self) -> ServeProcess:
        """Start it and wait until it answers.

        A port chosen here is free when chosen, but any process (a client's
        outgoing connection takes its port from the same range) may take it
        before ``serve`` binds it: ``serve`` then exits at once with
        ``EXIT_CANNOT_LISTEN`` having recorded nothing, and it is started
        again on fresh ports. Ports the caller gave are never changed.
        """
        choose_worker, choose_http = not self.worker_port, not self.http_port

        def launch() -> ServeProcess:
            if choose_worker:
                self.worker_port = self.choose_port()
            if choose_http:
                self.http_port = self.choose_port()
            try:
                self._launch()
                self._wait_answering()
            except BaseException:
                self.stop()
                raise
            return self

        return start_on_fresh_ports(launch, lambda error: (choose_worker or choose_http) and isinstance(
            error, ServeExited) and error.returncode == EXIT_CANNOT_LISTEN)

    def _launch(self) -> None:
        self.launches += 1
        self.log = tempfile.TemporaryFile()
        self.notify_dir = tempfile.mkdtemp(prefix="pulse-serve-")
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        path = os.path.join(self.notify_dir, "notify")
        self.notify.bind(path)
        self.process = subprocess.Popen(
            python_command("pulse_trio", "serve", "--worker-listen", f"127.0.0.1:{self.worker_port}",
                           "--http-listen", f"127.0.0.1:{self.http_port}", "--log-level", "warning", *self.extra_args),
            # The URL (and its password) in the environment, which only its user reads, not the arguments anyone may.
            env=child_environment(without_serve_settings(os.environ), NOTIFY_SOCKET=path,
                                  **{DATABASE_URL_VARIABLE: self.database.url(redact=False)}),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log,
            preexec_fn=killed_with_parent() if self.die_with_parent else None)

    def _wait_answering(self) -> None:
        """Until this process says ``READY=1``: its node has joined and both its ports listen.

        Not until something answers on its HTTP port: another ``serve`` that
        took the chosen port first would answer there while this one exits
        for want of it, and would be taken for it.
        """
        assert self.process is not None and self.notify is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        self.notify.settimeout(0.05)
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServeExited(self.process.returncode, self.log_tail())
            try:
                if b"READY=1" in self.notify.recv(4096).split(b"\n"):
                    return
            except TimeoutError:
                pass
        raise RuntimeError(f"pulse-trio serve did not answer on {self.http_url} within {START_TIMEOUT_S:g} s: "
                           f"{self.log_tail()}")

    def log_tail(self, chars: int = 2000) -> str:
        """The end of its log so far (for a failure's message)."""
        if self.log is None:
            return ""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-chars:]

    def stop(self) -> None:
        """SIGTERM, then wait (SIGKILL if it does not stop in time)."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self.log is not None:
            self.log.close()
            self.log = None
        if self.notify is not None:
            self.notify.close()
            self.notify = None
        if self.notify_dir is not None:
            shutil.rmtree(self.notify_dir, ignore_errors=True)
            self.notify_dir = None

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


