"""Real processes for chaos runs: `pulse-trio serve` instances and SDK workers (`pulse-trio worker run`).

Every process's stderr goes to a file under ``logs`` (named after the
process and its start number) so a failing run can be read afterwards.
The fleet remembers, per worker pid, whether it declared concurrency keys
and when it was SIGKILLed (``CLOCK_MONOTONIC``, after the kill was
reaped): an execution with no ``end`` record ended by then at the latest.

Workers alternate between the SDK's two event loops (even indexes run
asyncio, odd ones Trio), so every chaos run holds the service's guarantees
against workers on both backends at once.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from pulse_trio.managed_db import ManagedMariaDB
from pulse_trio.ports import free_port
from pulse_trio.store.engine.writer import connect
from pulse_trio.store.schema.migrate import migrate
from pulse_trio.store.token.tokens import create_token

WORKER = str(Path(__file__).with_name("recording_worker.py")) + ":registry"
#: The worker backends, by worker index modulo their number.
BACKENDS = ("asyncio", "trio")


def wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


@contextlib.contextmanager
def own_database(tmp_path: Path, name: str) -> Iterator[tuple[ManagedMariaDB, object, str]]:
    """A MariaDB of the run's own, to stop and start under load: (server, migrated database, worker token)."""
    server = ManagedMariaDB(tmp_path / "mariadb", fast=True)
    try:
        db = server.start().with_database(name)
        migrate(db)
        conn = connect(db)
        try:
            token, _ = create_token(conn, role="worker", queues=["chaos"], label="chaos",
                                    now=dt.datetime.now(dt.timezone.utc))
        finally:
            conn.close()
        yield server, db, token
    finally:
        server.stop()


def monotonic() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


class Fleet:
    """``servers`` and ``workers`` by index; ``worker_keys``/``killed_at`` by pid."""

    SERVE_ARGS = ("--lease-ttl", "1", "--start-timeout", "1", "--poll-interval", "0.05")

    def __init__(self, db, token: str, log: Path, *, servers: int = 2,
                 serve_args: tuple[str, ...] = SERVE_ARGS) -> None:
        self.db, self.log = db, log
        self.logs = log.parent / "logs"
        self.logs.mkdir(exist_ok=True)
        self.env = dict(os.environ, PULSE_WORKER_TOKEN=token, PULSE_CHAOS_LOG=str(log))
        self.ports = [free_port() for _ in range(servers)]
        self.serve_args = serve_args
        self.servers: dict[int, subprocess.Popen] = {}
        self.workers: dict[int, subprocess.Popen] = {}
        self.worker_keys: dict[int, bool] = {}  # pid -> started with --concurrency-keys
        self.killed_at: dict[int, float] = {}  # pid -> when its SIGKILL was reaped
        self.backends: set[str] = set()  # the worker backends started
        self._starts = 0

    def _stderr(self, name: str):
        self._starts += 1
        return open(self.logs / f"{self._starts:03d}-{name}.log", "wb")

    #: How long a server may take to listen once started.
    LISTEN_TIMEOUT_S = 30.0

    def start_server(self, i: int) -> None:
        self.start_servers(i)

    def start_servers(self, *indexes: int) -> None:
        """Start servers ``indexes`` together, then wait until each listens: their starts overlap."""
        for i in indexes:
            self._spawn_server(i)
        for i in indexes:
            wait_port(self.ports[i], timeout=self.LISTEN_TIMEOUT_S)

    def _spawn_server(self, i: int) -> None:
        with self._stderr(f"server{i}") as err:
            self.servers[i] = subprocess.Popen(
                [sys.executable, "-m", "pulse_trio", "serve", "--database-url", self.db.url(redact=False),
                 "--worker-listen", f"127.0.0.1:{self.ports[i]}", "--http-listen", "127.0.0.1:0",
                 "--log-level", "warning", *self.serve_args],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=self.env)

    def start_worker(self, i: int, *, keys: bool = False, url: str | None = None, capacity: int = 8) -> None:
        url = url or f"ws://127.0.0.1:{self.ports[i % len(self.ports)]}/v1/worker"
        backend = self.backend_of(i)
        with self._stderr(f"worker{i}-{backend}") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "pulse_trio", "worker", "run", WORKER, "--capacity", str(capacity),
                 "--name", f"chaos-{i}", *(["--concurrency-keys"] if keys else []), "--url", url,
                 "--backend", backend],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                env=dict(self.env, PULSE_CHAOS_KEYS="1" if keys else "0", PULSE_WORKER_BACKEND=backend))
        self.workers[i] = proc
        self.worker_keys[proc.pid] = keys

    def backend_of(self, i: int) -> str:
        """Worker ``i``'s event loop (noted as started)."""
        backend = BACKENDS[i % len(BACKENDS)]
        self.backends.add(backend)
        return backend

    def kill(self, proc: subprocess.Popen) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        self.killed_at[proc.pid] = monotonic()

    def stop_all(self) -> None:
        """Workers first (SIGTERM drains them), then the servers; SIGKILL whatever hangs."""
        for group in (self.workers, self.servers):
            for proc in group.values():
                if proc.poll() is None:
                    proc.terminate()
            for proc in group.values():
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    self.kill(proc)

    def worker_log_count(self, text: str) -> int:
        """How many lines of all worker logs contain ``text`` (for reports, never for verdicts)."""
        return sum(path.read_text(errors="replace").count(text) for path in self.logs.glob("*-worker*.log"))
