"""Fault injection: SIGKILL server instances and worker processes under a running workload.

Two ``serve`` processes share one database; two SDK worker processes run
a workload of tasks whose handlers may run again (``retry_uncertain``),
unkeyed and keyed (keys with limits 1, 2 and 3). Worker 1 declares
``--concurrency-keys``, worker 0 does not, so keyed tasks may only ever
run on worker 1. Server instances and workers are killed with SIGKILL and
restarted while the work runs. Afterwards every task must have SUCCEEDED,
no outcome may be missing, every repeated execution must have been flagged
``effect_uncertain`` (it followed a lost lease), and the key permits must
have held (``chaos_checks.check_guarantees``), and no session may be left
open on a killed instance: the survivors declare its node lost and
disconnect its sessions (chart ``node``).
"""

from __future__ import annotations

import time

import pytest

import chaos_checks
from chaos_fleet import Fleet, own_database
from sql_support import rows as sql_rows
from pulse_trio.client import Client
from pulse_trio.client.producer import build_task

pytestmark = pytest.mark.chaos

TASKS = 150
#: Fast liveness, so a killed instance's sessions are swept within the test.
NODE_ARGS = ("--node-heartbeat", "0.2", "--node-lapse", "1")
KEYED = {"kill:a": (1, 10), "kill:b": (2, 12), "kill:c": (3, 18)}  # key: (limit, tasks)


def _workload(unkeyed: int, keyed: dict[str, tuple[int, int]]) -> list:
    """Keyed tasks first: they are picked up first, so their chains run while the kills happen."""
    tasks = []
    for key, (limit, count) in keyed.items():
        tasks += [build_task("chaos", "work", {"key": key, "n": n}, concurrency_key=key, concurrency_limit=limit,
                             retry_uncertain=True, max_attempts=10) for n in range(count)]
    return tasks + [build_task("chaos", "work", {"n": n}, retry_uncertain=True, max_attempts=10)
                    for n in range(unkeyed)]


def _open_sessions_on_killed_servers(db, pids: list[int]) -> int:
    """Sessions still recorded open on a serve process that was SIGKILLed (its node row names its pid)."""
    import socket

    return int(sql_rows(
        db, "SELECT COUNT(*) FROM worker_instances i JOIN server_nodes n ON n.node_id = i.node_id"
            " WHERE i.state <> 'DISCONNECTED' AND n.host = %s AND n.pid IN %s",
        (socket.gethostname(), tuple(pids)))[0][0])


def test_sigkill_servers_and_workers_loses_nothing(db, token_factory, tmp_path):
    fleet = Fleet(db, token_factory("worker", ["chaos"]), tmp_path / "executions.jsonl",
                  serve_args=Fleet.SERVE_ARGS + NODE_ARGS)
    limits = {key: limit for key, (limit, _) in KEYED.items()}
    killed_servers: list[int] = []
    with Client(db) as client:
        try:
            fleet.start_servers(0, 1)
            for i in (0, 1):
                fleet.start_worker(i, keys=i == 1)
            with chaos_checks.PermitSampler(db, limits) as sampler:
                ids = {t["task_id"] for t in client.submit_many(_workload(TASKS, KEYED))}
                time.sleep(0.8)
                killed_servers.append(fleet.servers[0].pid)
                fleet.kill(fleet.servers[0])      # (a) an instance dies with sessions and leases on it
                fleet.start_server(0)
                time.sleep(0.7)
                fleet.kill(fleet.workers[1])      # (d) a worker dies mid-task (the keyed one)
                fleet.start_worker(1, keys=True)
                time.sleep(0.7)
                killed_servers.append(fleet.servers[1].pid)
                fleet.kill(fleet.servers[1])
                fleet.start_server(1)
                states = chaos_checks.wait_settled(db, len(ids), timeout=60)
                ghosts_deadline = time.monotonic() + 5  # lapse 1 s, then the next sweep
                while _open_sessions_on_killed_servers(db, killed_servers) and time.monotonic() < ghosts_deadline:
                    time.sleep(0.1)
                ghosts = _open_sessions_on_killed_servers(db, killed_servers)
        finally:
            fleet.stop_all()
        summary = chaos_checks.check_run(db, client, fleet, ids, states)
    assert not sampler.violations, sampler.violations[:10]
    assert ghosts == 0, f"{ghosts} session(s) still open on killed instances"
    print(f"\nchaos: {summary}")


def test_restarting_mariadb_under_load_loses_nothing(tmp_path):
    """(b) The database goes away and comes back: the service retries, nothing is lost or doubled silently."""
    with own_database(tmp_path, "pulse_chaos") as (server, db, token):
        fleet = Fleet(db, token, tmp_path / "executions.jsonl")
        try:
            fleet.start_servers(0, 1)
            for i in (0, 1):
                fleet.start_worker(i, keys=i == 1)
            with Client(db) as client:
                ids = {t["task_id"] for t in client.submit_many(
                    _workload(80, {"db:a": (1, 6), "db:b": (2, 10)}))}
            time.sleep(0.8)
            server.stop()                 # every pooled connection breaks mid-work
            time.sleep(1.0)
            server.start()
            states = chaos_checks.wait_settled(db, len(ids), timeout=60)
        finally:
            fleet.stop_all()
        with Client(db) as client:
            summary = chaos_checks.check_run(db, client, fleet, ids, states)
    print(f"\nchaos: {summary}")
