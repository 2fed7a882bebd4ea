"""The bench's child processes: real `serve` and `worker run` commands.

Every bench mode runs what ships, as separate processes, so the figures
include the real sockets, frames and transactions. The :class:`Fleet`
stops whatever it started, in order, even when the run fails half way.
"""

from __future__ import annotations

import resource
import secrets
import socket
import subprocess
import sys
import time
import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from pulse_trio.child_process import child_environment, python_command
from pulse_trio.contract.limits import ENDPOINT_PATH
from pulse_trio.dburl import DatabaseConfig
from pulse_trio.store.engine.writer import connect, drop_database
from pulse_trio.store.schema.migrate import migrate
from pulse_trio.store.token.tokens import create_token

T = TypeVar("T")


def worker_url(port: int) -> str:
    """The worker endpoint of an instance on this host."""
    return f"ws://127.0.0.1:{port}{ENDPOINT_PATH}"


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the server exited during start-up")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"the server did not listen on {port} within {timeout}s")


def progress(message: str) -> None:
    """A line for people on stderr (stdout carries only the JSON result)."""
    sys.stderr.write(f"pulse-trio bench: {message}\n")
    sys.stderr.flush()


def fresh_database(server: DatabaseConfig) -> DatabaseConfig:
    config = server.with_database(f"pulse_bench_{secrets.token_hex(4)}")
    migrate(config)
    return config


def on_fresh_database(server: DatabaseConfig, body: Callable[[DatabaseConfig, "Fleet"], T]) -> T:
    """Run ``body(db, fleet)`` on a new migrated database; stop the fleet and drop the database after."""
    db = fresh_database(server)
    try:
        with Fleet() as fleet:
            return body(db, fleet)
    finally:
        drop_database(db)


def bench_tokens(db: DatabaseConfig, *, worker_queues: Sequence[str],
                 producer_queues: Sequence[str] = ()) -> tuple[str, str | None]:
    """A worker token (and a producer token when ``producer_queues`` is given) for one run."""
    conn = connect(db)
    try:
        now = dt.datetime.now(dt.timezone.utc)
        worker, _ = create_token(conn, role="worker", queues=list(worker_queues), label="bench", now=now)
        producer = create_token(conn, role="producer", queues=list(producer_queues), label="bench",
                                now=now)[0] if producer_queues else None
    finally:
        conn.close()
    return worker, producer


def raise_fd_limit() -> int:
    """Lift this process's soft open-files limit to the hard one; children inherit it.

    The connection bench holds thousands of sockets in the server and in
    the session holders; the usual soft limit of 1024 would cut it short.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard
    return soft


class Fleet:
    """Child processes of one bench run, stopped (SIGTERM, then SIGKILL) on exit."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self.servers: list[subprocess.Popen] = []

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], **kwargs: object) -> subprocess.Popen:
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        kwargs.setdefault("stdout", subprocess.DEVNULL)
        kwargs.setdefault("stderr", subprocess.DEVNULL)
        proc = subprocess.Popen(list(argv), env=dict(env), **kwargs)  # type: ignore[call-overload]
        self.procs.append(proc)
        return proc

    def server(self, db: DatabaseConfig, env: Mapping[str, str], *, worker_port: int, http_port: int = 0,
               poll_interval: float = 0.01, extra: Sequence[str] = ()) -> subprocess.Popen:
        """One `pulse-trio serve`, waited for until its worker port listens.

        The database URL goes in its environment, not on its command line, which ``ps`` shows every user of
        the machine: a URL may hold a password.
        """
        proc = self.spawn(
            python_command("pulse_trio", "serve",
                           "--worker-listen", f"127.0.0.1:{worker_port}", "--http-listen", f"127.0.0.1:{http_port}",
                           "--poll-interval", f"{poll_interval:g}", *extra),
            {**env, "PULSE_DATABASE_URL": db.url(redact=False)})
        self.servers.append(proc)
        wait_port(worker_port, proc)
        if http_port:
            wait_port(http_port, proc)
        return proc

    def worker(self, registry: str, env: Mapping[str, str], *, worker_port: int, capacity: int,
               concurrency_keys: bool = False, backend: str = "asyncio") -> subprocess.Popen:
        """One `pulse-trio worker run` of a bench registry (no-op handlers) on ``backend`` (asyncio or trio)."""
        return self.spawn(
            python_command("pulse_trio", "worker", "run", registry,
                           "--url", worker_url(worker_port), "--capacity", str(capacity), "--quiet",
                           "--backend", backend, *(["--concurrency-keys"] if concurrency_keys else [])), env)

    def check_alive(self) -> None:
        """Fail, naming it, if a process of the run has exited.

        A server or worker gone mid-run leaves tasks nobody will run: a
        wait that does not look would sit out its whole deadline and then
        report a timeout instead of what happened.
        """
        for proc in self.procs:
            if proc.poll() is not None:
                role = "server" if proc in self.servers else "worker"
                raise RuntimeError(f"a {role} process (pid {proc.pid}) exited with {proc.returncode} during the run")

    def stop_all(self) -> None:
        """Workers and holders first, then the servers.

        A worker drains on SIGTERM: it reports what it holds before it exits.
        Stopped together with its server, it would find no server to report
        to and wait out its leases (or be killed), so a stopped run took tens
        of seconds to end.
        """
        others = [proc for proc in reversed(self.procs) if proc not in self.servers]
        for group in (others, self.servers):
            for proc in group:
                if proc.poll() is None:
                    proc.terminate()
            for proc in group:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def serve_flags(*, history: bool, server_processes: int) -> tuple[str, ...]:
    """The `serve` flags a bench adds: a quick purge when it brings a history, the processes behind each address."""
    return (*(("--purge-interval", "1") if history else ()),
            *(("--processes", str(server_processes)) if server_processes > 1 else ()))


def bench_env(**extra: str) -> dict[str, str]:
    """The environment of the bench's processes: this one's, ``extra``, and this package's code first."""
    return child_environment(**extra)


def wait_until(condition: Callable[[], bool], timeout: float, what: str, *, interval: float = 0.1,
               fleet: Fleet | None = None) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds, or at once when a
    process of ``fleet`` has exited."""
    deadline = time.monotonic() + timeout
    while not condition():
        if fleet is not None:
            fleet.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)
