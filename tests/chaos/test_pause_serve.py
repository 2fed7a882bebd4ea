"""A ``serve`` instance frozen (SIGSTOP) for longer than the lease ttl while its workers hold leases.

Two ``serve`` processes share one database; worker 0 (asyncio, no keys)
and worker 1 (trio, keys) reach server 0 only, worker 2 reaches server 1.
Server 0 is stopped for 3 s (lease ttl 1 s) with leases started on it, then
continued. Every guarantee of ``chaos_checks.check_guarantees`` must hold.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

import chaos_checks
from chaos_fleet import Fleet
from pulse_trio.client import Client
from pulse_trio.client.producer import build_task

pytestmark = pytest.mark.chaos

NODE_ARGS = ("--node-heartbeat", "0.2", "--node-lapse", "1")
KEYED = {"stop:a": (1, 8), "stop:b": (2, 12)}


def _workload(unkeyed: int) -> list:
    tasks = []
    for key, (limit, count) in KEYED.items():
        tasks += [build_task("chaos", "work", {"key": key, "n": n, "sleep": 0.4}, concurrency_key=key,
                             concurrency_limit=limit, retry_uncertain=True, max_attempts=10) for n in range(count)]
    return tasks + [build_task("chaos", "work", {"n": n, "sleep": 0.4}, retry_uncertain=True, max_attempts=10)
                    for n in range(unkeyed)]


def test_sigstop_serve_longer_than_a_lease_loses_nothing(db, token_factory, tmp_path):
    """Frozen past the ttl and the node lapse: the others take its leases over, and it comes back fenced."""
    fleet = Fleet(db, token_factory("worker", ["chaos"]), tmp_path / "executions.jsonl",
                  serve_args=Fleet.SERVE_ARGS + NODE_ARGS)
    limits = {key: limit for key, (limit, _) in KEYED.items()}
    with Client(db) as client:
        try:
            fleet.start_servers(0, 1)
            url0 = f"ws://127.0.0.1:{fleet.ports[0]}/v1/worker"
            url1 = f"ws://127.0.0.1:{fleet.ports[1]}/v1/worker"
            fleet.start_worker(0, url=url0)
            fleet.start_worker(1, keys=True, url=url0)
            fleet.start_worker(2, keys=True, url=url1)
            deadline = time.monotonic() + 30
            while len(client.workers()) < 3:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            with chaos_checks.PermitSampler(db, limits) as sampler:
                ids = {t["task_id"] for t in client.submit_many(_workload(120))}
                time.sleep(0.7)
                pid = fleet.servers[0].pid
                os.kill(pid, signal.SIGSTOP)
                time.sleep(3.0)
                os.kill(pid, signal.SIGCONT)
                states = chaos_checks.wait_settled(db, len(ids), timeout=45)
        finally:
            fleet.stop_all()
        summary = chaos_checks.check_run(db, client, fleet, ids, states)
    assert not sampler.violations, sampler.violations[:10]
    print(f"\nchaos: {summary}")
