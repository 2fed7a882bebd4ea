"""SIGTERM stops ``serve`` within its bound when the database hangs (SIGSTOP) or refuses (stopped).

Two ``serve`` processes share a private MariaDB; a worker holds a session
on the first. With ``mariadbd`` frozen, the first is stopped: it must exit 0
well inside the systemd unit's ``TimeoutStopSec`` (docs/operations.md §4),
though neither its session's disconnect nor its STOPPED can be recorded;
once the database answers again, the other instance declares it LOST.
Then, with the database stopped, the second is stopped the same way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from chaos_fleet import Fleet, own_database
from pulse_trio.client import Client

pytestmark = pytest.mark.chaos

NODE_ARGS = ("--node-heartbeat", "0.2", "--node-lapse", "1")
#: What docs/operations.md §4 promises (10 s, plus the URL's connect_timeout for a connection being opened).
STOP_BOUND_S = 20.0


def _stop(process: subprocess.Popen) -> tuple[int | None, float]:
    """SIGTERM; (exit code, seconds it took), or (None, the bound) when it was killed at the bound."""
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=STOP_BOUND_S), time.monotonic() - started
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return None, STOP_BOUND_S


def _wait(what: str, check, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_sigterm_stops_serve_within_its_bound_whatever_the_database_does(tmp_path):
    with own_database(tmp_path, "pulse_stop") as (server, db, token):
        fleet = Fleet(db, token, tmp_path / "executions.jsonl", serve_args=Fleet.SERVE_ARGS + NODE_ARGS)
        try:
            fleet.start_servers(0, 1)
            fleet.start_worker(0)
            with Client(db) as client:
                _wait("a worker session on each node", lambda: len(client.workers()) == 1
                      and len(client.nodes()) == 2)
                node_of = {node["pid"]: node["node_id"] for node in client.nodes()}
            stopping, staying = fleet.servers[0], fleet.servers[1]
            mariadbd = server._process
            assert mariadbd is not None
            os.kill(mariadbd.pid, signal.SIGSTOP)
            try:
                time.sleep(0.5)  # every loop now waits on the database
                frozen = _stop(stopping)
            finally:
                os.kill(mariadbd.pid, signal.SIGCONT)
            assert frozen[0] == 0, f"stop with the database frozen: {frozen}; logs in {fleet.logs}"
            with Client(db) as client:  # left to the other instance, which declares it lost
                _wait("the stopped node declared lost", lambda: any(
                    n["node_id"] == node_of[stopping.pid] and n["state"] == "LOST"
                    and n["lost_by"] == node_of[staying.pid] for n in client.nodes(include_stopped=True)))
            server.stop()
            refused = _stop(staying)
            assert refused[0] == 0, f"stop with the database stopped: {refused}; logs in {fleet.logs}"
        finally:
            fleet.stop_all()
    print(f"\nstopped in {frozen[1]:.1f} s (database frozen), {refused[1]:.1f} s (database stopped)")
