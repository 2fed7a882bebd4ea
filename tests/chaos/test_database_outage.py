"""The database goes away for longer than a lease ttl and a node lapse, under load.

A private MariaDB (``ManagedMariaDB``) is stopped for ``OUTAGE_S`` seconds while
two ``serve`` processes and two workers (one keyed) run a workload, then
started again. A producer keeps submitting with idempotency keys through the
outage (each submit retried until it answers). Afterwards every guarantee of
``chaos_checks.check_guarantees`` must hold, every idempotency key must name
exactly one task, and every serve process must still be alive and serving.
"""

from __future__ import annotations

import threading
import time

import pytest

import chaos_checks
from chaos_fleet import Fleet, own_database
from sql_support import rows as sql_rows
from pulse_trio.client import Client
from pulse_trio.client.producer import build_task

pytestmark = pytest.mark.chaos

KEYED = {"db:a": (1, 6), "db:b": (2, 10)}


def _workload(unkeyed: int) -> list:
    tasks = []
    for key, (limit, count) in KEYED.items():
        tasks += [build_task("chaos", "work", {"key": key, "n": n}, concurrency_key=key, concurrency_limit=limit,
                             retry_uncertain=True, max_attempts=10) for n in range(count)]
    return tasks + [build_task("chaos", "work", {"n": n}, retry_uncertain=True, max_attempts=10)
                    for n in range(unkeyed)]


OUTAGE_S = 4.0
NODE_ARGS = ("--node-heartbeat", "0.2", "--node-lapse", "1")


def test_database_outage_longer_than_a_lease(tmp_path):
    with own_database(tmp_path, "pulse_outage") as (server, db, token):
        fleet = Fleet(db, token, tmp_path / "executions.jsonl", serve_args=Fleet.SERVE_ARGS + NODE_ARGS)
        produced: dict[str, str] = {}  # idempotency key -> task id answered
        errors: list[str] = []
        stop = threading.Event()

        def producer() -> None:
            n = 0
            with Client(db) as client:
                while not stop.is_set():
                    key = f"idem-{n}"
                    for _ in range(200):
                        try:
                            produced[key] = client.submit("chaos", "work", {"idem": n, "sleep": 0.1},
                                                          idempotency_key=key, retry_uncertain=True,
                                                          max_attempts=10)["task_id"]
                            break
                        except Exception as exc:  # the database is away: try again
                            errors.append(f"{type(exc).__name__}: {exc}"[:120])
                            time.sleep(0.1)
                    n += 1
                    time.sleep(0.05)

        try:
            fleet.start_servers(0, 1)
            for i in (0, 1):
                fleet.start_worker(i, keys=i == 1)
            with Client(db) as client:
                ids = {t["task_id"] for t in client.submit_many(_workload(80))}
            thread = threading.Thread(target=producer, daemon=True)
            thread.start()
            time.sleep(0.8)
            server.stop()
            time.sleep(OUTAGE_S)
            server.start()
            time.sleep(1.5)
            stop.set()
            thread.join(timeout=30)
            assert not thread.is_alive(), "the producer hung"
            ids |= set(produced.values())
            states = chaos_checks.wait_settled(db, len(ids), timeout=60)
            alive = {i: p.poll() for i, p in fleet.servers.items()}
        finally:
            fleet.stop_all()
        dupes = sql_rows(db, "SELECT idempotency_key, COUNT(*) FROM tasks WHERE idempotency_key IS NOT NULL"
                             " GROUP BY idempotency_key HAVING COUNT(*) > 1")
        mismatch = [(k, v) for k, v in produced.items()
                    if [tuple(r) for r in sql_rows(db, "SELECT task_id FROM tasks WHERE idempotency_key = %s",
                                                   (k,))] != [(v,)]]
        with Client(db) as client:
            summary = chaos_checks.check_run(db, client, fleet, ids, states)
    print(f"\nchaos: {summary}; producer errors {len(errors)} {sorted(set(errors))[:8]}; produced {len(produced)}")
    assert alive == {0: None, 1: None}, f"serve exited: {alive}; logs in {fleet.logs}"
    assert not dupes and not mismatch, (dupes, mismatch[:5])
