"""Fault injection: SIGKILL server instances and worker processes under a running workload.

Two ``serve`` processes share one database; two SDK worker processes run
a workload of tasks whose handlers may run again (``retry_uncertain``).
Server instances and workers are killed with SIGKILL and restarted while
the work runs. Afterwards every task must have SUCCEEDED, no outcome may
be missing, and every repeated execution must have been flagged
``effect_uncertain`` (it followed a lost lease).
"""

from __future__ import annotations

import collections
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pulse_trio.client import Client
from pulse_trio.client.producer import build_task

pytestmark = pytest.mark.chaos

TASKS = 150
WORKER = str(Path(__file__).with_name("recording_worker.py")) + ":registry"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


class Fleet:
    def __init__(self, db, token: str, log: Path) -> None:
        self.db, self.log = db, log
        self.env = dict(os.environ, PULSE_WORKER_TOKEN=token, PULSE_CHAOS_LOG=str(log))
        self.ports = [_free_port(), _free_port()]
        self.servers: dict[int, subprocess.Popen] = {}
        self.workers: dict[int, subprocess.Popen] = {}

    def start_server(self, i: int) -> None:
        self.servers[i] = subprocess.Popen(
            [sys.executable, "-m", "pulse_trio", "serve", "--database-url", self.db.url(redact=False),
             "--worker-listen", f"127.0.0.1:{self.ports[i]}", "--http-listen", "127.0.0.1:0",
             "--lease-ttl", "1", "--start-timeout", "1", "--poll-interval", "0.05"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env)
        _wait_port(self.ports[i])

    def start_worker(self, i: int) -> None:
        self.workers[i] = subprocess.Popen(
            [sys.executable, "-m", "pulse_trio", "worker", "run", WORKER, "--quiet", "--capacity", "8",
             "--url", f"ws://127.0.0.1:{self.ports[i]}/v1/worker"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env)

    @staticmethod
    def kill(proc: subprocess.Popen) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def stop_all(self) -> None:
        for proc in [*self.workers.values(), *self.servers.values()]:
            if proc.poll() is None:
                proc.terminate()
        for proc in [*self.workers.values(), *self.servers.values()]:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_sigkill_servers_and_workers_loses_nothing(db, token_factory, tmp_path):
    fleet = Fleet(db, token_factory("worker", ["chaos"]), tmp_path / "executions.jsonl")
    client = Client(db)
    try:
        for i in (0, 1):
            fleet.start_server(i)
            fleet.start_worker(i)
        submitted = client.submit_many([build_task("chaos", "work", {"n": n}, retry_uncertain=True,
                                                   max_attempts=10) for n in range(TASKS)])
        ids = {t["task_id"] for t in submitted}
        time.sleep(0.8)
        fleet.kill(fleet.servers[0])      # (a) an instance dies with sessions and leases on it
        fleet.start_server(0)
        time.sleep(0.7)
        fleet.kill(fleet.workers[1])      # (d) a worker dies mid-task
        fleet.start_worker(1)
        time.sleep(0.7)
        fleet.kill(fleet.servers[1])
        fleet.start_server(1)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            states = collections.Counter(client.get(t)["state"] for t in ids)
            if states["SUCCEEDED"] == TASKS:
                break
            time.sleep(0.5)
        views = {t: client.get(t) for t in ids}
    finally:
        fleet.stop_all()
        client.close()
    states = collections.Counter(v["state"] for v in views.values())
    assert states == {"SUCCEEDED": TASKS}, states  # nothing lost, every outcome recorded
    executions = collections.defaultdict(list)
    for line in fleet.log.read_text().splitlines():
        record = json.loads(line)
        executions[record["task_id"]].append(record)
    assert set(executions) == ids
    for task_id, runs in executions.items():
        runs.sort(key=lambda r: r["attempt"])
        assert runs[0]["attempt"] == 1 or runs[0]["uncertain"]
        for later in runs[1:]:
            # A second authorized execution happens only after a lost lease, and says so.
            assert later["uncertain"] and later["attempt"] > runs[0]["attempt"], runs
        outcome = views[task_id]["outcome"]
        assert outcome["status"] == "SUCCEEDED" and outcome["result"]["done"] in {r["attempt"] for r in runs}
    repeated = sum(len(runs) > 1 for runs in executions.values())
    print(f"\nchaos: {TASKS} tasks, {sum(map(len, executions.values()))} executions, {repeated} repeated")


def test_restarting_mariadb_under_load_loses_nothing(tmp_path):
    """(b) The database goes away and comes back: the service retries, nothing is lost or doubled silently."""
    import datetime as dt

    from pulse_trio.dburl import connect
    from pulse_trio.managed_db import ManagedMariaDB
    from pulse_trio.store.migrate import migrate
    from pulse_trio.tokens import create_token

    server = ManagedMariaDB(tmp_path / "mariadb", fast=True)
    db = server.start().with_database("pulse_chaos")
    migrate(db)
    conn = connect(db)
    token, _ = create_token(conn, role="worker", queues=["chaos"], label="chaos", now=dt.datetime.now(dt.timezone.utc))
    conn.close()
    fleet = Fleet(db, token, tmp_path / "executions.jsonl")
    try:
        for i in (0, 1):
            fleet.start_server(i)
            fleet.start_worker(i)
        with Client(db) as client:
            ids = {t["task_id"] for t in client.submit_many(
                [build_task("chaos", "work", {"n": n}, retry_uncertain=True, max_attempts=10) for n in range(80)])}
        time.sleep(0.8)
        server.stop()                 # every pooled connection breaks mid-work
        time.sleep(1.0)
        server.start()
        deadline = time.monotonic() + 90
        with Client(db) as client:
            while time.monotonic() < deadline:
                states = collections.Counter(client.get(t)["state"] for t in ids)
                if states["SUCCEEDED"] == len(ids):
                    break
                time.sleep(0.5)
    finally:
        fleet.stop_all()
        server.stop()
    assert states == {"SUCCEEDED": len(ids)}, states
    runs = collections.defaultdict(list)
    for line in fleet.log.read_text().splitlines():
        record = json.loads(line)
        runs[record["task_id"]].append(record)
    for task_runs in runs.values():
        task_runs.sort(key=lambda r: r["attempt"])
        assert all(r["uncertain"] for r in task_runs[1:]), task_runs
