"""The bench run: a real server process, real SDK worker processes, real MariaDB.

1. a fresh database (on the managed MariaDB or the given server);
2. one ``pulse-trio serve`` process (or several, ``--instances``), each
   alone or a group behind one address (``--server-processes``: its CPU is
   its whole process tree's);
3. ``--backlog`` READY tasks of a kind no worker takes, to show how pick-up
   cost behaves with a deep queue; ``--history`` finished tasks past the
   retention (``bench fill-finished``), which the servers purge during the
   run (``--purge-interval 1``), to show what the purge costs the run;
4. ``--workers`` processes of ``pulse-trio worker run`` with ``--capacity``;
5. ``--tasks`` no-op tasks submitted in batches; the run ends when all of
   them have finished. Everything goes through offer, start and finish
   under the full contract.

Besides throughput, latencies and CPU, the report has the slot utilisation
(held lease time over slots x span) and the number of claims, read from
the lease rows the run wrote.

The result is one JSON object on stdout. Figures are reported, never
asserted: the test suite only checks that the command runs.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time

from pulse_trio.bench import measure
from pulse_trio.bench.fill_finished import FillOptions, fill, history_left
from pulse_trio.bench.noop_worker import KIND, QUEUE
from pulse_trio.bench.processes import (
    Fleet, bench_env, bench_tokens, on_fresh_database, progress, serve_flags, wait_until,
)
from pulse_trio.client import Client
from pulse_trio.client.producer import build_task
from pulse_trio.dburl import DatabaseConfig
from pulse_trio.ports import free_port

SUBMIT_BATCH = 500
#: The queue of ``--history``'s finished tasks (never the bench's own).
HISTORY_QUEUE = "bench-history"


@dataclasses.dataclass(frozen=True, slots=True)
class BenchOptions:
    workers: int = 2
    capacity: int = 64
    tasks: int = 2000
    payload_bytes: int = 0
    backlog: int = 0
    instances: int = 1
    #: ``serve --processes`` of each instance: serve processes behind its one address.
    server_processes: int = 1
    keyed_share: float = 0.0
    #: Spread the tasks over this many fairness keys (0: none), round robin.
    fairness_keys: int = 0
    timeout_s: float = 600.0
    worker_backend: str = "asyncio"
    history: int = 0
    #: Submit every task before the workers connect, so the figures (CPU, statements) hold only the
    #: dispatch: the claims and the lease commands, not the submits' placement.
    submit_first: bool = False


def purge_rates(history: int, left: int, run_s: float, *, left_end: int | None = None,
                end_s: float | None = None) -> dict[str, float | None]:
    """The purge's tasks per second while the run went (under load) and from its end to ``end_s`` (idle)."""
    rates: dict[str, float | None] = {
        "purge_tasks_per_s_under_load": round((history - left) / run_s, 1) if run_s > 0 else None}
    if left_end is not None and end_s is not None:
        rates["purge_tasks_per_s_after_run"] = round((left - left_end) / (end_s - run_s), 1) if end_s > run_s else None
    return rates


#: The concurrency keys ``--keyed-share``'s tasks take in turn.
CONCURRENCY_KEYS = 16


def concurrency_key(index: int, share: float) -> str | None:
    """The concurrency key of the run's ``index``-th task, or None: ``share`` of the tasks, evenly spread.

    The keyed tasks take the keys in turn by their own count, so every run
    contends on all of them. Keyed every ``round(1 / share)``-th task
    instead, the share run was not the one asked, and ``index %
    CONCURRENCY_KEYS`` put the keyed tasks on only some of the keys when
    that step shared a factor with their number.
    """
    keyed_before = math.floor(index * share)
    if math.floor((index + 1) * share) == keyed_before:
        return None
    return f"key-{keyed_before % CONCURRENCY_KEYS}"


def run(server: DatabaseConfig, options: BenchOptions) -> dict[str, object]:
    return on_fresh_database(server, lambda db, fleet: _run(db, options, fleet))


#: A capacity whose throughput is within this share of the sweep's best counts as at the ceiling.
CEILING_SHARE = 0.95


def sweep(server: DatabaseConfig, options: BenchOptions, capacities: list[int]) -> dict[str, object]:
    """The same run at each capacity in turn, each on a fresh database: where throughput stops growing.

    ``ceiling_capacity`` is the smallest capacity whose throughput is within
    CEILING_SHARE of the best run's: past it, more slots per worker add
    leases in flight but no throughput.
    """
    runs = []
    for capacity in capacities:
        progress(f"sweep: capacity {capacity}")
        runs.append(run(server, dataclasses.replace(options, capacity=capacity)))
    rows = [{
        "capacity": capacity,
        "end_to_end_tasks_per_s": result["end_to_end_tasks_per_s"],
        "workers_cpu_s_per_task": result["workers_cpu_s_per_task"],
        "server_cpu_s_per_task": result["server_cpu_s_per_task"],
        "database_cpu_s_per_task": result["database_cpu_s_per_task"],
        "assign_to_finish_ms_p50": result["assign_to_finish_ms"]["p50"],  # type: ignore[index]
    } for capacity, result in zip(capacities, runs)]
    best = max(row["end_to_end_tasks_per_s"] for row in rows)  # type: ignore[type-var]
    ceiling = min(row["capacity"] for row in rows  # type: ignore[type-var]
                  if row["end_to_end_tasks_per_s"] >= CEILING_SHARE * best)  # type: ignore[operator]
    return {"sweep": rows, "ceiling_capacity": ceiling, "best_tasks_per_s": best, "runs": runs}


def _run(db: DatabaseConfig, options: BenchOptions, fleet: Fleet) -> dict[str, object]:
    token, _ = bench_tokens(db, worker_queues=[QUEUE])
    env = bench_env(PULSE_WORKER_TOKEN=token)
    ports = [free_port() for _ in range(options.instances)]
    history = None
    if options.history:
        history = fill(db, FillOptions(tasks=options.history, queue=HISTORY_QUEUE))
        progress(f"history of {options.history} finished tasks filled in {history['seconds']}s")
    extra = serve_flags(history=bool(options.history), server_processes=options.server_processes)
    servers = [fleet.server(db, env, worker_port=port, extra=extra) for port in ports]
    progress(f"{options.instances} server instance(s) up")

    client = Client(db)
    try:
        if options.backlog:
            for start in range(0, options.backlog, SUBMIT_BATCH):
                client.submit_many([build_task(QUEUE, "backlog") for _ in range(min(SUBMIT_BATCH,
                                                                                      options.backlog - start))])
            progress(f"backlog of {options.backlog} READY tasks submitted")
        payload = {"pad": "x" * max(0, options.payload_bytes - 10)} if options.payload_bytes else {}

        def submit_all() -> float:
            started = time.perf_counter()
            for start in range(0, options.tasks, SUBMIT_BATCH):
                batch = []
                for i in range(start, min(start + SUBMIT_BATCH, options.tasks)):
                    key = concurrency_key(i, options.keyed_share)
                    tenant = f"tenant-{i % options.fairness_keys}" if options.fairness_keys else None
                    batch.append(build_task(QUEUE, KIND, payload, concurrency_key=key, concurrency_limit=4,
                                            fairness_key=tenant))
                client.submit_many(batch)
            submit_s = time.perf_counter() - started
            progress(f"{options.tasks} tasks submitted in {submit_s:.2f}s")
            return submit_s

        if options.submit_first:
            submit_s = submit_all()
        workers = [
            fleet.worker("pulse_trio.bench.noop_worker:registry", env, worker_port=ports[i % len(ports)],
                         capacity=options.capacity, concurrency_keys=True, backend=options.worker_backend)
            for i in range(options.workers)]
        wait_until(lambda: len(client.workers()) >= options.workers, 60, "the workers connecting", fleet=fleet)
        progress(f"{options.workers} {options.worker_backend} worker(s) with capacity {options.capacity} connected")

        server_pids = [pid for server in servers for pid in measure.process_tree(server.pid)]
        before = [measure.ProcessSample.read(pid) for pid in server_pids]
        db_pid = measure.database_pid(db)
        others_before = (measure.cpu_seconds([w.pid for w in workers]),
                         measure.cpu_seconds([db_pid]) if db_pid else 0.0)
        work = measure.DatabaseWork(db)
        submit_started = time.perf_counter()
        if not options.submit_first:
            submit_s = submit_all()
        deadline = time.monotonic() + options.timeout_s
        history_gone_s = None
        with measure.Progress(db, KIND) as run:
            while not run.all_finished():
                fleet.check_alive()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {run.finished()} of {options.tasks} tasks finished"
                                       f" in {options.timeout_s}s")
                if history is not None and history_gone_s is None and not history_left(db, HISTORY_QUEUE):
                    history_gone_s = time.perf_counter() - submit_started
                time.sleep(0.1)
        run_s = time.perf_counter() - submit_started
        after = [measure.ProcessSample.read(pid) for pid in server_pids]
        others_after = (measure.cpu_seconds([w.pid for w in workers]),
                        measure.cpu_seconds([db_pid]) if db_pid else 0.0)
        database_work = work.per_task(options.tasks)
        if history is not None:
            left = history_left(db, HISTORY_QUEUE, count=True)
            # A short run may end before the servers' first purge pass: the figures above are
            # taken, so wait (within the run's deadline) for the purge to finish what it started.
            while history_gone_s is None and time.monotonic() < deadline:
                if not history_left(db, HISTORY_QUEUE):
                    history_gone_s = time.perf_counter() - submit_started
                else:
                    time.sleep(0.1)
            end_s = history_gone_s if history_gone_s is not None else time.perf_counter() - submit_started
            left_end = 0 if history_gone_s is not None else history_left(db, HISTORY_QUEUE, count=True)
            history = {"tasks": options.history, "rows": history["rows"], "left_after_run": left,
                       "purged_during_run_s": round(history_gone_s, 2) if history_gone_s else None,
                       **purge_rates(options.history, left, run_s, left_end=left_end, end_s=end_s)}
    finally:
        client.close()
    timings = measure.task_timings(db, KIND)
    slots = measure.slot_use(db, KIND, options.workers * options.capacity)
    span = timings.pop("span_s") or float("nan")
    if options.submit_first:
        span = run_s  # the tasks were created before the workers came: time the window measured
    cpu = sum(a.cpu_seconds - b.cpu_seconds for a, b in zip(after, before))
    return {
        "options": dataclasses.asdict(options),
        "end_to_end_tasks_per_s": round(options.tasks / span, 1),
        "submit_tasks_per_s": round(options.tasks / submit_s, 1),
        **timings,
        **database_work,
        **slots,
        "server_cpu_s_per_task": round(cpu / options.tasks, 6),
        #: The serve processes whose CPU that is (with --server-processes: each group's parent and members).
        "server_processes_measured": len(server_pids),
        "workers_cpu_s_per_task": round((others_after[0] - others_before[0]) / options.tasks, 6),
        "database_cpu_s_per_task": (round((others_after[1] - others_before[1]) / options.tasks, 6)
                                    if db_pid else None),
        "server_peak_rss_mib": round(max(a.peak_rss_bytes for a in after) / 2**20, 1),
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        **({"history": history} if history is not None else {}),
    }


