"""The service on a real Galera cluster: work through two nodes, and the writer lost under load.

Real ``pulse-trio serve`` and ``pulse-trio worker run`` processes (the
chaos group's fleet and recording worker) run a workload while the writer
node is SIGKILLed or isolated from the quorum. Afterwards every task has
SUCCEEDED (nothing lost, no UNKNOWN), every repeated execution followed a
lost lease and was flagged ``effect_uncertain``, and the killed node
rejoins by IST with the same data (``chaos_checks.check_guarantees``).
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import subprocess
import sys
import time

import pymysql
import pytest

import chaos_checks
from chaos_fleet import WORKER, Fleet
from pulse_trio.client import Client
from pulse_trio.client.producer import build_task
from pulse_trio.store.engine.writer import connect, writer_for
from pulse_trio.store.schema.migrate import migrate
from pulse_trio.store.token.tokens import create_token

pytestmark = pytest.mark.galera

#: Liveness fast enough to fence and sweep within the test, slow enough that a
#: failover of the writer (a few seconds) is not always a lapse.
NODE_ARGS = ("--node-heartbeat", "0.5", "--node-lapse", "3")
SERVE_ARGS = ("--lease-ttl", "3", "--start-timeout", "3", "--poll-interval", "0.05") + NODE_ARGS


class ClusterFleet(Fleet):
    """The chaos fleet, with one database URL per server and every server's URL for each worker."""

    def __init__(self, db, token, log, urls: list[str]) -> None:
        super().__init__(db, token, log, servers=len(urls), serve_args=SERVE_ARGS)
        self.urls = urls

    LISTEN_TIMEOUT_S = 60.0

    def _spawn_server(self, i: int) -> None:
        with self._stderr(f"server{i}") as err:
            self.servers[i] = subprocess.Popen(
                [sys.executable, "-m", "pulse_trio", "serve", "--database-url", self.urls[i],
                 "--worker-listen", f"127.0.0.1:{self.ports[i]}", "--http-listen", "127.0.0.1:0",
                 "--log-level", "warning", *self.serve_args],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=self.env)

    def server_log_count(self, i: int, text: str) -> int:
        return sum(path.read_text(errors="replace").count(text) for path in self.logs.glob(f"*-server{i}.log"))

    def wait_connected(self, worker: int, server: int, timeout: float) -> None:
        """Until worker ``worker``'s log says it connected to server ``server``."""
        said = f"connected to ws://127.0.0.1:{self.ports[server]}/v1/worker"
        deadline = time.monotonic() + timeout
        while not any(said in path.read_text(errors="replace") for path in self.logs.glob(f"*-worker{worker}-*.log")):
            assert time.monotonic() < deadline, f"worker {worker} never connected to server {server}; logs in {self.logs}"
            time.sleep(0.05)

    def start_all_url_worker(self, i: int, capacity: int = 16) -> None:
        urls = ",".join(f"ws://127.0.0.1:{port}/v1/worker" for port in self.ports[i:] + self.ports[:i])
        backend = self.backend_of(i)  # asyncio and Trio workers alternate, as in the chaos fleet
        with self._stderr(f"worker{i}-{backend}") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "pulse_trio", "worker", "run", WORKER, "--capacity", str(capacity),
                 "--name", f"galera-{i}", "--url", urls, "--backend", backend],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                env=dict(self.env, PULSE_WORKER_BACKEND=backend))
        self.workers[i] = proc
        self.worker_keys[proc.pid] = False


def _prepare(cluster, database: str, tmp_path):
    config = cluster.config(database)
    writer_for(config).reset()
    migrate(config)
    with contextlib.closing(connect(config)) as conn:
        token, _ = create_token(conn, role="worker", queues=["chaos"], label="galera",
                                now=dt.datetime.now(dt.timezone.utc))
        conn.commit()
    return config, token


def _settle(db, count: int, timeout: float) -> collections.Counter[str]:
    """Like ``chaos_checks.wait_settled``, through a failover: a read that meets no writer is tried again."""
    deadline = time.monotonic() + timeout
    states: collections.Counter[str] = collections.Counter()
    while time.monotonic() < deadline:
        try:
            states = chaos_checks.task_states(db)
        except pymysql.err.MySQLError:  # this process's writer is gone too: have it re-checked
            selector = writer_for(db)
            if selector.writer is not None:
                selector.failed(selector.writer)
            time.sleep(0.5)
            continue
        if sum(states[s] for s in chaos_checks.TERMINAL) == count:
            return states
        time.sleep(0.25)
    return states


def test_two_thousand_tasks_through_instances_on_two_nodes_run_once_each(cluster, database_name, tmp_path):
    """Each instance writes through its own node (two writers): slower, never wrong."""
    n1, n2, _ = cluster.nodes
    db, token = _prepare(cluster, database_name, tmp_path)
    fleet = ClusterFleet(db, token, tmp_path / "executions.jsonl",
                         [cluster.url(database_name, [n1]), cluster.url(database_name, [n2])])
    started = time.monotonic()
    with Client(db) as client:
        try:
            fleet.start_servers(0, 1)
            for i in (0, 1):
                fleet.start_all_url_worker(i, capacity=32)
            tasks = [build_task("chaos", "work", {"n": n, "sleep": 0}) for n in range(2000)]
            ids = {t["task_id"] for t in client.submit_many(tasks)}
            states = _settle(db, len(ids), timeout=120)
        finally:
            fleet.stop_all()
        summary = chaos_checks.check_run(db, client, fleet, ids, states)
    executions = chaos_checks.read_executions(fleet.log)
    assert all(len(runs) == 1 for runs in executions.values()), "a task ran twice with no lease lost"
    print(f"\ngalera two writers: 2000 tasks in {time.monotonic() - started:.1f}s; {summary}")


@pytest.mark.parametrize("fault", ["sigkill", "isolate"])
def test_losing_the_writer_under_load_loses_nothing(cluster, database_name, tmp_path, fault):
    n1, n2, n3 = cluster.nodes
    db, token = _prepare(cluster, database_name, tmp_path)
    url = cluster.url(database_name)
    fleet = ClusterFleet(db, token, tmp_path / "executions.jsonl", [url, url])
    with Client(db) as client:
        try:
            fleet.start_servers(0, 1)
            for i in (0, 1):
                fleet.start_all_url_worker(i, capacity=16)
            tasks = [build_task("chaos", "work", {"n": n, "sleep": 0.1}, retry_uncertain=True, max_attempts=10)
                     for n in range(800)]
            ids = {t["task_id"] for t in client.submit_many(tasks)}
            time.sleep(0.7)
            done_at_fault = sum(chaos_checks.task_states(db)[s] for s in chaos_checks.TERMINAL)
            assert done_at_fault < len(ids) / 2, "the fault must hit the run under load"
            lost_at = time.monotonic()
            if fault == "sigkill":
                n1.kill()
            else:
                n1.isolate()
            states = _settle(db, len(ids), timeout=90)
            settled_in = time.monotonic() - lost_at
        finally:
            fleet.stop_all()
        moved = f"writing to 127.0.0.1:{n2.port} now"
        for i in (0, 1):  # every instance moved to the next node in list order
            assert fleet.server_log_count(i, moved) >= 1, f"server {i} did not fail over; logs in {fleet.logs}"
            # and no lease command (a finish among them) that reached it was answered ``internal``
            assert fleet.server_log_count(i, "failed in the store") == 0, f"logs in {fleet.logs}"
        summary = chaos_checks.check_run(db, client, fleet, ids, states)

    if fault == "sigkill":  # the killed node rejoins by IST and holds the same rows
        rejoin_started = time.monotonic()
        n1.restart_after_crash()
        n1.wait_synced(60, cluster_size=3)
        rejoined_in = time.monotonic() - rejoin_started
        assert "IST received" in n1.log_text() or "Receiving IST" in n1.log_text()
    else:
        n1.isolate(False)
        n1.wait_synced(60, cluster_size=3)
        rejoined_in = 0.0
    with contextlib.closing(n1.connect()) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION wsrep_sync_wait = 1")
        cur.execute(f"SELECT COUNT(*) FROM `{database_name}`.tasks WHERE state = 'SUCCEEDED'")
        assert cur.fetchone()[0] == len(ids)
    print(f"\ngalera {fault}: {len(ids)} tasks, {done_at_fault} done at the fault, settled {settled_in:.1f}s after it; "
          f"rejoin {rejoined_in:.1f}s; {summary}")


def test_an_instance_cut_off_from_every_writer_fences_and_its_workers_go_elsewhere(cluster, database_name, tmp_path):
    """Instance 0 can reach only node 1; node 1 is isolated: instance 0 ends its sessions, work goes on via 1."""
    n1, n2, _ = cluster.nodes
    db, token = _prepare(cluster, database_name, tmp_path)
    fleet = ClusterFleet(db, token, tmp_path / "executions.jsonl",
                         [cluster.url(database_name, [n1]), cluster.url(database_name, [n2])])
    with Client(db) as client:
        try:
            fleet.start_servers(0, 1)
            fleet.start_all_url_worker(0, capacity=8)  # instance 0's URL first
            tasks = [build_task("chaos", "work", {"n": n, "sleep": 0.1}, retry_uncertain=True, max_attempts=10)
                     for n in range(200)]
            ids = {t["task_id"] for t in client.submit_many(tasks)}
            # The fault must find the worker on instance 0: a worker slow to start (a loaded machine) would
            # otherwise be refused there once node 1 is away, and never hold a session for the fence to end.
            fleet.wait_connected(0, 0, timeout=60)
            time.sleep(0.5)
            n1.isolate()
            states = _settle(db, len(ids), timeout=90)
        finally:
            fleet.stop_all()
        assert fleet.server_log_count(0, "the database writer is unreachable; ending 1 session(s)") >= 1, fleet.logs
        summary = chaos_checks.check_run(db, client, fleet, ids, states)
    print(f"\ngalera fencing: {summary}")
