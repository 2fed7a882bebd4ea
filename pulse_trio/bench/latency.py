"""`pulse-trio bench latency`: what one task waits for when the service is idle.

The throughput bench submits everything at once, so its submit→assign is
queueing. Here tasks are submitted one at a time at a fixed ``--rate``
(each submit waits for its answer; a late submit is sent at once, never
skipped), to one server instance whose workers have free slots, and once
for each producer path:

* ``http``: ``POST /v1/tasks`` on the instance's HTTP API (one kept-alive
  connection, a producer token). The instance wakes its dispatcher as soon
  as the insert has committed (``TaskApi.submit``);
* ``client``: :meth:`pulse_trio.client.Client.submit` straight into the
  database. No instance hears of it: the dispatcher finds it at its next
  poll, so expect about half of ``--poll-interval`` on top.

What is measured, from the rows the run wrote (``measure.task_timings``):

* submit→assign = lease ``offered_at`` − task ``created_at``. ``created_at``
  is stamped just before the INSERT transaction: by the server's clock
  after the request was authenticated and parsed (http), by the producer's
  wall clock (client; same host, so the same clock). ``offered_at`` is
  stamped when the dispatcher starts the claim transaction for the task.
  So the figure holds the INSERT and COMMIT and the dispatcher's reaction
  (for http the wake-up comes right after the commit, before the read-back
  of the task the answer carries); not the claim transaction nor the push.
* assign→finish = task ``finished_at`` − ``offered_at``: the claim
  transaction, the push, the worker's ``task.start`` round trip, the no-op
  handler, and the ``task.finish`` up to the moment its batch starts
  (``finished_at`` is stamped then, before that transaction commits).
* ``producer_call_ms``: each submit call as the producer timed it (HTTP
  round trip including authentication; ``Client.submit`` including its
  read-back of the new task).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable

from pulse_trio.bench import measure
from pulse_trio.bench.fill_finished import FillOptions, fill, history_left
from pulse_trio.bench.http_client import InstanceHttp
from pulse_trio.bench.noop_worker import CLIENT_KIND, HTTP_KIND, QUEUE, WARM_UP_KIND
from pulse_trio.bench.processes import (
    Fleet, bench_env, bench_tokens, on_fresh_database, progress, serve_flags, wait_until,
)
from pulse_trio.bench.runner import HISTORY_QUEUE, purge_rates
from pulse_trio.client import Client
from pulse_trio.config import Settings
from pulse_trio.dburl import DatabaseConfig
from pulse_trio.ports import free_port

PATHS = ("http", "client")
WARM_UP_TASKS = 5
SETTLE_S = 0.5  # idle time between the paths, so one's tail does not meet the other's start


@dataclasses.dataclass(frozen=True, slots=True)
class LatencyOptions:
    rate: float = 50.0
    tasks: int = 500  # per path
    workers: int = 1
    capacity: int = 8
    poll_interval: float = Settings().poll_interval
    paths: tuple[str, ...] = PATHS
    timeout_s: float = 600.0
    worker_backend: str = "asyncio"
    history: int = 0
    #: ``serve --processes``: serve processes behind the one address.
    server_processes: int = 1


def run(server: DatabaseConfig, options: LatencyOptions) -> dict[str, object]:
    return on_fresh_database(server, lambda db, fleet: _run(db, options, fleet))


def _run(db: DatabaseConfig, options: LatencyOptions, fleet: Fleet) -> dict[str, object]:
    worker_token, producer_token = bench_tokens(db, worker_queues=[QUEUE], producer_queues=[QUEUE])
    env = bench_env(PULSE_WORKER_TOKEN=worker_token)
    worker_port, http_port = free_port(), free_port()
    history = None
    if options.history:
        history = fill(db, FillOptions(tasks=options.history, queue=HISTORY_QUEUE))
        progress(f"history of {options.history} finished tasks filled in {history['seconds']}s")
    extra = serve_flags(history=bool(options.history), server_processes=options.server_processes)
    fleet.server(db, env, worker_port=worker_port, http_port=http_port, poll_interval=options.poll_interval,
                 extra=extra)
    began = time.perf_counter()
    progress(f"server up (poll interval {options.poll_interval:g}s)")
    client = Client(db)
    api = InstanceHttp(http_port, producer_token)
    try:
        for _ in range(options.workers):
            fleet.worker("pulse_trio.bench.noop_worker:latency_registry", env, worker_port=worker_port,
                         capacity=options.capacity, backend=options.worker_backend)
        wait_until(lambda: sum(1 for w in client.workers() if w["capacity"] > 0) >= options.workers, 60,
                   "the workers declaring capacity", fleet=fleet)
        progress(f"{options.workers} worker(s) with capacity {options.capacity} connected")
        serve_nodes = len(client.nodes())  # the serve processes (a group's members) ALIVE for the run
        producers: dict[str, Callable[[str], object]] = {
            "http": lambda kind: api.submit(QUEUE, kind),
            "client": lambda kind: client.submit(QUEUE, kind),
        }
        report: dict[str, object] = {}
        warmed = 0
        for path in options.paths:
            kind = HTTP_KIND if path == "http" else CLIENT_KIND
            submit = producers[path]
            for _ in range(WARM_UP_TASKS):  # first connections, first statements: not the figure
                submit(WARM_UP_KIND)
            warmed += WARM_UP_TASKS
            _wait_finished(db, WARM_UP_KIND, warmed, options.timeout_s, fleet)
            time.sleep(SETTLE_S)
            calls, achieved = _paced(submit, kind, options.rate, options.tasks)
            _wait_finished(db, kind, options.tasks, options.timeout_s, fleet)
            timings = measure.task_timings(db, kind)
            timings.pop("span_s", None)
            report[path] = {
                **timings,
                "producer_call_ms": {"p50": measure.ms(measure.percentile(calls, 0.5)),
                                     "p99": measure.ms(measure.percentile(calls, 0.99))},
                "achieved_rate_per_s": round(achieved, 1),
            }
            progress(f"{path}: {options.tasks} tasks at {report[path]['achieved_rate_per_s']}/s, "
                     f"submit→assign p50 {timings['submit_to_assign_ms']['p50']} ms")
            time.sleep(SETTLE_S)
        if history is not None:
            left = history_left(db, HISTORY_QUEUE, count=True)
            run_s = time.perf_counter() - began
            report["history"] = {"tasks": options.history, "left_after_run": left,
                                 **purge_rates(options.history, left, run_s)}
    finally:
        api.close()
        client.close()
    return {
        "mode": "latency",
        "options": dataclasses.asdict(options),
        "poll_interval_s": options.poll_interval,
        "serve_nodes": serve_nodes,
        **report,
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
    }


def _paced(submit: Callable[[str], object], kind: str, rate: float, count: int) -> tuple[list[float], float]:
    """Submit ``count`` tasks at ``rate`` per second, one at a time.

    Returns each call's duration (s) and the rate achieved between the first
    and the last submit (lower than asked when calls take longer than 1/rate).
    """
    interval = 1 / rate
    calls = []
    started = time.perf_counter()
    t0 = started
    for i in range(count):
        delay = started + i * interval - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        t0 = time.perf_counter()
        submit(kind)
        calls.append(time.perf_counter() - t0)
    span = t0 - started
    return calls, (count - 1) / span if span > 0 else float(rate)


def _wait_finished(db: DatabaseConfig, kind: str, count: int, timeout: float, fleet: Fleet) -> None:
    with measure.Progress(db, kind) as progress:
        wait_until(progress.all_finished, timeout, f"{count} {kind} tasks finishing", interval=0.05, fleet=fleet)
