"""`pulse-trio bench producer`: what the HTTP producer path costs.

Two figures, on one `serve` process and a fresh database, no worker (the
tasks stay READY, so only the producer side is measured):

* **submit throughput**: ``--tasks`` tasks submitted one request each with
  :class:`pulse_trio.producer.Client` (one kept-alive connection), then the
  same number with ``submit_many`` in batches of ``--batch``; tasks per
  second of each, as the producer timed it;
* **idle waiters**: the database statements per second the server runs
  while nobody waits, while one request waits for an outcome, and while
  ``--waiters`` requests wait (long-polls on as many READY tasks), each
  read as MariaDB's ``Questions`` counter over ``--idle`` seconds once every
  long-poll is in (the server's ``pulse_http_outcome_waiters`` gauge says
  so: their first reads are not counted). The long-polls' whole cost is the
  difference to the first; ``probes_per_s_*`` counts the statements that
  serve them (``pulse_http_outcome_probes_total``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import threading
import time
from typing import Any

import pymysql

from pulse_trio.bench.http_client import InstanceHttp
from pulse_trio.bench.processes import Fleet, bench_env, on_fresh_database, progress, wait_until
from pulse_trio.dburl import DatabaseConfig
from pulse_trio.ports import free_port
from pulse_trio.store.engine.writer import connect

QUEUE = "bench_producer"


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerOptions:
    tasks: int = 2000
    batch: int = 100
    waiters: int = 1000
    idle_s: float = 10.0


def run(server: DatabaseConfig, options: ProducerOptions) -> dict[str, object]:
    return on_fresh_database(server, lambda db, fleet: _run(db, options, fleet))


def _questions(conn: pymysql.connections.Connection) -> int:
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Questions'")
        return int(cur.fetchone()[1])


def _queries_per_s(db: DatabaseConfig, seconds: float) -> float:
    """Statements per second the server ran over ``seconds``, less this reading's own.

    Both readings go over one held connection, so the only statement of its
    own between them is the second ``SHOW``: a fresh connection per reading
    also counted its session set-up, a few statements that inflated every
    figure by their number over ``seconds``.
    """
    conn = connect(db)
    try:
        conn.autocommit(True)
        before = _questions(conn)
        time.sleep(seconds)
        return round((_questions(conn) - before - 1) / seconds, 2)
    finally:
        conn.close()


def _run(db: DatabaseConfig, options: ProducerOptions, fleet: Fleet) -> dict[str, object]:
    from pulse_trio.producer import Client, task
    from pulse_trio.store.token.tokens import create_token

    conn = connect(db)
    try:
        token, _ = create_token(conn, role="producer", queues=[QUEUE], label="bench",
                                now=dt.datetime.now(dt.timezone.utc))
    finally:
        conn.close()
    worker_port, http_port = free_port(), free_port()
    fleet.server(db, bench_env(), worker_port=worker_port, http_port=http_port, poll_interval=0.5)
    url = f"http://127.0.0.1:{http_port}"
    report: dict[str, Any] = {"mode": "producer", "tasks": options.tasks, "batch": options.batch}
    with Client(url, token, timeout=60) as client:
        for _ in range(20):  # first connection, first statements: not the figure
            client.submit(QUEUE, "warm_up")
        started = time.perf_counter()
        for _ in range(options.tasks):
            client.submit(QUEUE, "one_by_one")
        one_by_one = time.perf_counter() - started
        progress(f"one by one: {options.tasks / one_by_one:.0f} tasks/s")
        bodies = [task(QUEUE, "batched") for _ in range(options.tasks)]
        started = time.perf_counter()
        for start in range(0, options.tasks, options.batch):
            client.submit_many(bodies[start:start + options.batch])
        batched = time.perf_counter() - started
        progress(f"submit_many: {options.tasks / batched:.0f} tasks/s")
        report["submit_per_s"] = {"one_by_one": round(options.tasks / one_by_one, 1),
                                  "submit_many": round(options.tasks / batched, 1)}
        waited = [h.task_id for h in client.submit_many([task(QUEUE, "awaited") for _ in range(options.waiters)])]
    report["idle_waiters"] = _idle_waiters(db, http_port, token, waited, options)
    return report


def _idle_waiters(db: DatabaseConfig, http_port: int, token: str, task_ids: list[str],
                  options: ProducerOptions) -> dict[str, object]:
    """Statements per second with no waiter, one, and ``len(task_ids)``, each counted once every long-poll is in."""
    import httpx
    import trio

    url = f"http://127.0.0.1:{http_port}"
    metrics = InstanceHttp(http_port)
    figures: dict[str, object] = {"waiters": len(task_ids), "idle_s": options.idle_s}
    figures["queries_per_s_no_waiter"] = _queries_per_s(db, options.idle_s)
    progress(f"no waiter: {figures['queries_per_s_no_waiter']} statements/s")
    for label, ids in (("one_waiter", task_ids[:1]), ("all_waiters", task_ids)):
        measured = threading.Event()

        async def hold(ids: list[str] = ids, measured: threading.Event = measured) -> None:
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
            async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"},
                                         limits=limits, timeout=600) as http:
                async with trio.open_nursery() as nursery:
                    for task_id in ids:
                        nursery.start_soon(functools.partial(http.get, f"/v1/tasks/{task_id}/outcome",
                                                             params={"wait": "60"}))
                    while not measured.is_set():
                        await trio.sleep(0.1)
                    nursery.cancel_scope.cancel()

        thread = threading.Thread(target=trio.run, args=(hold,))
        thread.start()
        try:
            wait_until(lambda: metrics.gauge("pulse_http_outcome_waiters") == len(ids), 300,
                       f"{len(ids)} long-polls to be in")
            probes = metrics.gauge("pulse_http_outcome_probes_total") or 0
            figures[f"queries_per_s_{label}"] = _queries_per_s(db, options.idle_s)
            probed = (metrics.gauge("pulse_http_outcome_probes_total") or 0) - probes
            figures[f"probes_per_s_{label}"] = round(probed / options.idle_s, 2)
        finally:
            measured.set()
            thread.join()
        progress(f"{len(ids)} waiter(s): {figures[f'queries_per_s_{label}']} statements/s")
    metrics.close()
    return figures
