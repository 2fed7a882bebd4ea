"""`pulse-trio serve` as a process: two at once on one database, fresh or not."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from pulse_trio.cli.common import EXIT_CANNOT_LISTEN
from pulse_trio.ports import free_port, start_on_fresh_ports
from pulse_trio.store.schema.migrate import code_version, current_version
from sql_support import user_with_password

pytestmark = pytest.mark.live  # it runs serve and a managed mariadbd as processes


def _wait_listening(port: int, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else "serve exited"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


def _handshake_status(port: int, token: str = "") -> str:
    request = (
        "GET /v1/worker HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Protocol: pulse.worker.v1\r\n"
        + (f"Authorization: Bearer {token}\r\n" if token else "") + "\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request.encode())
        return s.recv(4096).decode(errors="replace").split("\r\n", 1)[0]


def _serves_together(db, tmp_path) -> tuple[list[int], list[subprocess.Popen]]:
    """Two serve processes started at once, each on a port chosen here.

    A chosen port can be taken (by any outgoing connection) before its serve
    binds it; that serve exits with EXIT_CANNOT_LISTEN having recorded
    nothing, and the pair is started again on fresh ports, as
    ``ServeProcess`` does.
    """
    exit_codes: list[int | None] = []

    def start() -> tuple[list[int], list[subprocess.Popen]]:
        ports = [free_port(), free_port()]
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "pulse_trio", "serve", "--database-url", db.url(redact=False),
                 "--worker-listen", f"127.0.0.1:{port}", "--http-listen", "127.0.0.1:0",
                 "--state-dir", str(tmp_path)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for port in ports
        ]
        try:
            for port, proc in zip(ports, procs):
                _wait_listening(port, proc)
        except AssertionError:
            exit_codes[:] = _stop(procs)
            raise
        return ports, procs

    return start_on_fresh_ports(start, lambda _: EXIT_CANNOT_LISTEN in exit_codes)


def _stop(procs: list[subprocess.Popen]) -> list[int]:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    return [proc.wait(timeout=20) for proc in procs]


def test_two_instances_start_together_on_a_fresh_database(database_server, tmp_path):
    db = database_server.with_database("pulse_two_serves")
    ports, procs = _serves_together(db, tmp_path)
    try:
        assert current_version(db) == code_version()
        token = subprocess.run(
            [sys.executable, "-m", "pulse_trio", "token", "create", "--role", "worker",
             "--database-url", db.url(redact=False)], capture_output=True, text=True, check=True).stdout.strip()
        for port in ports:
            assert " 101 " in _handshake_status(port, token) + " "
            assert " 401 " in _handshake_status(port) + " "
    finally:
        assert _stop(procs) == [0, 0]


def test_serve_without_a_database_url_runs_and_stops_a_managed_mariadb(tmp_path):
    state = tmp_path / "state"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PULSE_DATABASE_URL"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pulse_trio", "serve", "--state-dir", str(state), "--worker-listen", f"127.0.0.1:{port}",
         "--http-listen", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _wait_listening(port, proc, timeout=60)
        assert (state / "mariadb" / "data" / "mysql").is_dir()
        pid = int((state / "mariadb" / "mysqld.pid").read_text())
        os.kill(pid, 0)  # the private server is running
        token = subprocess.run(
            [sys.executable, "-m", "pulse_trio", "token", "create", "--role", "worker", "--state-dir", str(state)],
            capture_output=True, text=True, check=True, env=env).stdout.strip()
        assert " 101 " in _handshake_status(port, token) + " "
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the managed mariadbd outlived serve")


def test_commands_racing_on_a_fresh_state_dir_share_one_managed_mariadb(tmp_path):
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if k != "PULSE_DATABASE_URL"}
    procs = [subprocess.Popen([sys.executable, "-m", "pulse_trio", "token", "create", "--role", "worker",
                               "--state-dir", str(state)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(3)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    assert all(out.strip().startswith("pt_") for out, _ in outputs)
    listed = subprocess.run([sys.executable, "-m", "pulse_trio", "token", "list", "--state-dir", str(state)],
                            capture_output=True, text=True, env=env, check=True)
    assert len(json.loads(listed.stdout)["tokens"]) == 3


def test_a_serve_process_whose_chosen_port_was_taken_starts_again_on_fresh_ports(database_server):
    """The port it chose is taken before serve binds it: serve exits having recorded nothing, and starts again."""
    from pulse_trio.ports import free_port
    from pulse_trio.serve_process import ServeProcess

    db = database_server.with_database("pulse_port_taken")
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        chosen = iter([taken])
        with ServeProcess(db, choose_port=lambda: next(chosen, None) or free_port()) as serve:
            assert serve.launches == 2 and serve.worker_port not in (taken, 0)
            assert _handshake_status(serve.worker_port).startswith("HTTP/1.1 401")
    given = ServeProcess(db, worker_port=taken)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        with pytest.raises(RuntimeError, match="exited with 5"):
            given.start()  # a port the caller gave is never changed



def test_a_serve_process_whose_chosen_port_another_serve_took_is_not_mistaken_for_that_serve(database_server):
    """Another serve took the HTTP port it chose: that one answers /healthz there, but this one exited; it starts again."""
    from pulse_trio.serve_process import ServeProcess
    from pulse_trio.store.engine.writer import drop_database

    theirs, ours = (database_server.with_database(name) for name in ("pulse_port_theirs", "pulse_port_ours"))
    try:
        with ServeProcess(theirs) as other:
            chosen = iter([free_port(), other.http_port])  # the worker port is chosen first, then the HTTP one
            with ServeProcess(ours, choose_port=lambda: next(chosen, None) or free_port()) as serve:
                assert serve.http_port != other.http_port and serve.launches == 2
                assert serve.process is not None and serve.process.poll() is None
                with urllib.request.urlopen(f"{serve.http_url}/healthz", timeout=5) as answer:
                    assert answer.status == 200
    finally:
        for database in (theirs, ours):
            drop_database(database)


def test_the_database_password_is_not_on_the_serve_process_command_line(database_server):
    """Every local user can read a process's arguments (``ps``); the password reaches serve in its environment."""
    from pulse_trio.serve_process import ServeProcess
    from pulse_trio.store.engine.writer import drop_database

    with user_with_password(database_server, "pulse_pw_user", "ALL ON `pulse_pw_db`.*") as login:
        db = login.with_database("pulse_pw_db")
        try:
            with ServeProcess(db) as serve:
                assert serve.process is not None
                with open(f"/proc/{serve.process.pid}/cmdline", "rb") as cmdline:
                    arguments = cmdline.read().decode()
                assert "serve" in arguments and db.password not in arguments
                with urllib.request.urlopen(f"{serve.http_url}/readyz", timeout=5) as answer:
                    assert answer.status == 200  # it did reach the database with that password
        finally:
            drop_database(db)


def test_the_test_service_answers_on_its_advertised_urls_whatever_pulse_tls_variables_say(
        database_server, tls, monkeypatch):
    """The caller's PULSE_TLS_* (set for their real service) do not reach it: it serves http:// and ws:// as it says."""
    from pulse_trio.serve_process import ServeProcess
    from pulse_trio.store.engine.writer import drop_database

    cert, key, _ = tls
    monkeypatch.setenv("PULSE_TLS_CERT", str(cert))  # the environment, not the product's code
    monkeypatch.setenv("PULSE_TLS_KEY", str(key))
    db = database_server.with_database("pulse_tls_variables")
    try:
        with ServeProcess(db) as serve:
            with urllib.request.urlopen(f"{serve.http_url}/healthz", timeout=5) as answer:
                assert answer.status == 200
            assert _handshake_status(serve.worker_port).startswith("HTTP/1.1 401")  # plain ws://
    finally:
        drop_database(db)
