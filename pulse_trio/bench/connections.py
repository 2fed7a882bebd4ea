"""`pulse-trio bench connections`: what K idle registered sessions cost one instance.

One `serve` process; ``--processes`` children of
:mod:`pulse_trio.bench.idle_sessions` open ``--sessions`` real WebSocket
connections between them, each doing the full handshake (subprotocol,
bearer token, ``worker.hello`` → ``worker.welcome``, ``worker.capacity`` →
ack) and then staying idle on a queue no task is sent to.

What is measured:

* ``register_s``: wall time from the ``go`` sent to the ready holders (their
  start-up is not counted) to the last session's capacity ack, and
  ``registrations_per_s`` from it; ``register_ms``: one session's
  connect→ack as its holder timed it;
* the server's RSS (``/proc``) before the first connection and after the
  last registration, and the difference per session;
* the server's CPU share (CPU s / wall s, 100 = one core) while
  registering, and then over ``--idle`` seconds with every session idle;
* the count, from the instance's ``pulse_sessions_connected`` gauge and
  from ``worker_instances`` in the database (``Client.workers()`` lists at
  most 1000 and so cannot confirm a larger K);
* health afterwards: ``/readyz``, and the wall time for one task submitted
  over HTTP to be run by one real SDK worker that connects after the K.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import select
import subprocess
import sys
import time

from pulse_trio.bench import measure
from pulse_trio.bench.http_client import InstanceHttp
from pulse_trio.bench.noop_worker import KIND, QUEUE
from pulse_trio.bench.processes import (
    Fleet, bench_env, bench_tokens, on_fresh_database, progress, raise_fd_limit, wait_until, worker_url,
)
from pulse_trio.child_process import python_command
from pulse_trio.config import Settings
from pulse_trio.dburl import DatabaseConfig
from pulse_trio.ports import free_port

IDLE_QUEUE = "bench.idle"
SESSIONS_PER_PROCESS = 2500
SETTLE_S = 1.0
MIB = 2**20


@dataclasses.dataclass(frozen=True, slots=True)
class ConnectionOptions:
    sessions: int = 5000
    processes: int = 0  # 0: one holder per SESSIONS_PER_PROCESS sessions
    capacity: int = 1  # declared by each idle session; 0 sends no worker.capacity
    in_flight: int = 32  # registrations under way at once, per holder process
    idle_s: float = 5.0
    poll_interval: float = Settings().poll_interval
    timeout_s: float = 600.0

    @property
    def holders(self) -> int:
        return self.processes or max(1, math.ceil(self.sessions / SESSIONS_PER_PROCESS))


def run(server: DatabaseConfig, options: ConnectionOptions) -> dict[str, object]:
    raise_fd_limit()  # the server and the holders inherit it
    return on_fresh_database(server, lambda db, fleet: _run(db, options, fleet))


def _run(db: DatabaseConfig, options: ConnectionOptions, fleet: Fleet) -> dict[str, object]:
    worker_token, producer_token = bench_tokens(db, worker_queues=[QUEUE, IDLE_QUEUE], producer_queues=[QUEUE])
    env = bench_env(PULSE_WORKER_TOKEN=worker_token)
    worker_port, http_port = free_port(), free_port()
    server = fleet.server(db, env, worker_port=worker_port, http_port=http_port,
                          poll_interval=options.poll_interval)
    api = InstanceHttp(http_port, producer_token)
    try:
        time.sleep(SETTLE_S)
        before = measure.ProcessSample.read(server.pid)
        holders = _start_holders(fleet, env, options, worker_port)
        deadline = time.monotonic() + options.timeout_s
        for holder in holders:
            _read_json(holder, deadline)  # {"ready": true}
        progress(f"{len(holders)} holder process(es) ready; registering {options.sessions} sessions")
        cpu_start = measure.ProcessSample.read(server.pid)
        for holder in holders:
            holder.stdin.write("go\n")
            holder.stdin.flush()
        try:
            reports = [_read_json(holder, deadline) for holder in holders]
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}; {measure.connected_sessions(db)} of {options.sessions} sessions were "
                               f"registered after {time.monotonic() - cpu_start.at:.0f}s") from None
        register_s = time.monotonic() - cpu_start.at
        registered = measure.ProcessSample.read(server.pid)
        count = sum(r["registered"] for r in reports)
        progress(f"{count} sessions registered in {register_s:.1f}s")

        connected_metric = api.gauge("pulse_sessions_connected")
        connected_db = measure.connected_sessions(db)
        time.sleep(options.idle_s)
        idle = measure.ProcessSample.read(server.pid)
        health = _health(db, fleet, env, api, worker_port)
        progress(f"health: {health}")
    finally:
        api.close()
    durations = [d for r in reports for d in r["durations"]]
    return {
        "mode": "connections",
        "options": dataclasses.asdict(options),
        "holder_processes": len(holders),
        "poll_interval_s": options.poll_interval,
        "sessions_registered": count,
        "sessions_failed": sum(r["failed"] for r in reports),
        "errors": [e for r in reports for e in r["errors"]][:5],
        "register_s": round(register_s, 2),
        "registrations_per_s": round(count / register_s, 1) if register_s > 0 else None,
        "register_ms": {"p50": measure.ms(measure.percentile(durations, 0.5)),
                        "p99": measure.ms(measure.percentile(durations, 0.99))},
        "sessions_connected_metric": connected_metric,
        "sessions_connected_db": connected_db,
        "server_rss_mib": {"before": round(before.rss_bytes / MIB, 1), "after": round(registered.rss_bytes / MIB, 1),
                           "after_idle": round(idle.rss_bytes / MIB, 1)},
        "rss_per_session_kib": round((registered.rss_bytes - before.rss_bytes) / 1024 / count, 1) if count else None,
        "server_cpu_s_registering": round(registered.cpu_seconds - cpu_start.cpu_seconds, 2),
        "server_cpu_percent_registering": registered.cpu_percent_since(cpu_start),
        "server_cpu_percent_idle": idle.cpu_percent_since(registered),
        "health": health,
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
    }


def _start_holders(fleet: Fleet, env: dict[str, str], options: ConnectionOptions,
                   worker_port: int) -> list[subprocess.Popen]:
    shares = [options.sessions // options.holders + (1 if i < options.sessions % options.holders else 0)
              for i in range(options.holders)]
    return [fleet.spawn(
        python_command("pulse_trio.bench.idle_sessions", "--url", worker_url(worker_port),
                       "--sessions", str(share), "--capacity", str(options.capacity), "--queue", IDLE_QUEUE,
                       "--name", f"idle-{i}", "--in-flight", str(options.in_flight)),
        env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, text=True)
        for i, share in enumerate(shares)]


def _read_json(proc: subprocess.Popen, deadline: float) -> dict:
    """The holder's next line, or a clear failure if it died or went silent."""
    assert proc.stdout is not None
    remaining = deadline - time.monotonic()
    readable, _, _ = select.select([proc.stdout], [], [], max(0.0, remaining))
    line = proc.stdout.readline() if readable else ""
    if not line:
        raise RuntimeError(f"idle-session holder {proc.pid} exited or timed out (exit code {proc.poll()})")
    return json.loads(line)


def _health(db: DatabaseConfig, fleet: Fleet, env: dict[str, str], api: InstanceHttp,
            worker_port: int) -> dict[str, object]:
    """/readyz, then one task run end to end by a worker that connects after the idle ones."""
    status, ready_ms = api.ready()
    idle_capacity = api.gauge("pulse_session_capacity") or 0
    started = time.monotonic()
    fleet.worker("pulse_trio.bench.noop_worker:registry", env, worker_port=worker_port, capacity=1)
    wait_until(lambda: (api.gauge("pulse_session_capacity") or 0) > idle_capacity, 120,
               "the health-check worker declaring capacity", interval=0.05)
    connect_s = time.monotonic() - started
    started = time.monotonic()
    api.submit(QUEUE, KIND)
    with measure.Progress(db, KIND) as progress:
        wait_until(progress.all_finished, 120, "the health-check task finishing", interval=0.02)
    return {"readyz_status": status, "readyz_ms": ready_ms, "worker_connect_s": round(connect_s, 3),
            "task_run_s": round(time.monotonic() - started, 3)}
