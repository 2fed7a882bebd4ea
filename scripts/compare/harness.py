"""Run the competitors' equivalent of `pulse-trio bench`, each over a sweep of its own knobs, beside ours.

One JSON object per run on stdout (every sweep point), then one summary object
with the best run of each system and the configuration that produced it.

Started by scripts/compare/run inside the compare virtualenv (celery, redis,
procrastinate, pgqueuer, asyncpg and psycopg pinned there; none of them is a
pulse-trio dependency). See README.md beside this file for what is measured
and why.

Every child process is started in a session of its own and stopped
(SIGTERM, then SIGKILL after a bounded wait) when the system's run ends,
whether it succeeded, failed or was interrupted. The Redis databases, the
RabbitMQ queues and the Postgres databases used are this script's own: the
Redis ones are checked to be empty before use and flushed after; the
RabbitMQ task queue and exchange carry a random name and are deleted after,
with the client's reply queue; each Postgres database is created fresh and
dropped.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV_BIN = Path(sys.executable).parent
SUBMIT_BATCH = 500  # as `pulse-trio bench`
POLL_INTERVAL_S = 0.1  # at most 10 polls a second, as `pulse-trio bench`
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
HZ = os.sysconf("SC_CLK_TCK")
SYSTEMS = ["pulse-trio", "celery", "celery-rabbitmq", "procrastinate", "pgqueuer"]  # --only's names, run order


def progress(message: str) -> None:
    """A line for people on stderr; stdout carries only the JSON results."""
    sys.stderr.write(f"compare: {message}\n")
    sys.stderr.flush()


class Interrupted(Exception):
    pass


class Skipped(Exception):
    """A sweep point this machine cannot run as asked (not a failure of the system under test)."""


def _on_signal(signum: int, _frame: object) -> None:
    raise Interrupted(f"stopped by signal {signum}")


# --- CPU from /proc -------------------------------------------------------

def _proc_stats() -> dict[int, tuple[int, float]]:
    """pid -> (ppid, CPU seconds of the process and its reaped children) for every process."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone in between
        # fields[1] ppid; [11..14] utime, stime, cutime, cstime (man 5 proc, counted after the name)
        stats[int(entry.name)] = (int(fields[1]), sum(int(f) for f in fields[11:15]) / HZ)
    return stats


def tree_cpu_seconds(roots: list[int]) -> float:
    """CPU used so far by these processes and all their descendants, live or already reaped.

    A child that exited and was waited for is counted in its parent's
    cutime/cstime, so Postgres backends that come and go during a run, or
    Celery's helper threads and processes, are all included.
    """
    stats = _proc_stats()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo, seen = 0.0, [r for r in roots if r in stats], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += stats[pid][1]
        todo.extend(children.get(pid, ()))
    return total


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


# --- child processes --------------------------------------------------------

class Fleet:
    """Child processes of one system's run, each in its own session; stopped on exit whatever happened."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[tuple[subprocess.Popen, Path]] = []

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = self.log_dir / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, env=env, cwd=HERE, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((proc, log))
        return proc

    def check_alive(self) -> None:
        for proc, log in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}; its log:\n{tail(log)}")

    def stop_all(self) -> None:
        for proc, _ in self.procs:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc, _ in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                progress(f"pid {proc.pid} still running {STOP_TIMEOUT_S:g}s after SIGTERM: SIGKILL")
            _signal_group(proc, signal.SIGKILL)  # and whatever it left in its session
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                progress(f"pid {proc.pid} did not exit after SIGKILL")


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # start_new_session: the group id is the child's pid
    except (ProcessLookupError, PermissionError):
        pass


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_for(condition, what: str, fleet: Fleet, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        fleet.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(POLL_INTERVAL_S)


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(HERE), PYTHONUNBUFFERED="1", **extra)
    return env


def machine() -> dict[str, object]:
    return {"cpus": os.cpu_count(), "python": sys.version.split()[0],
            "loadavg_at_start": [round(x, 2) for x in os.getloadavg()]}


# --- Celery -----------------------------------------------------------------

def redis_client(args: argparse.Namespace, db: int):
    import redis
    return redis.Redis(host=args.redis_host, port=args.redis_port, db=db, socket_timeout=10)


def redis_facts(client) -> dict[str, object]:
    info = client.info("server")
    facts: dict[str, object] = {"version": info.get("redis_version"), "pid": info.get("process_id")}
    for name in ("appendonly", "appendfsync", "save"):
        try:
            facts[name] = client.config_get(name).get(name)
        except Exception as exc:  # CONFIG may be renamed or denied
            facts[name] = f"unknown ({exc.__class__.__name__})"
    return facts


def celery_app_for(env: dict[str, str]):
    """A fresh Celery app configured like the workers started with *env*."""
    for key in ("COMPARE_CELERY_BROKER", "COMPARE_BROKER_URL", "COMPARE_RESULT_URL", "COMPARE_CELERY_QUEUE",
                "COMPARE_CELERY_PREFETCH"):
        if key in env:
            os.environ[key] = env[key]
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    from celery_app import make_app
    return make_app(env["COMPARE_CELERY_BROKER"])


def celery_worker_argv(processes: int, index: int) -> list[str]:
    """One Celery worker node: the prefork pool (Celery's default and its advice for CPU-bound tasks)."""
    return [str(VENV_BIN / "celery"), "-A", "celery_app", "worker", "--pool", "prefork",
            "--concurrency", str(processes), "--without-gossip", "--without-mingle", "--without-heartbeat",
            "--loglevel", "WARNING", "-n", f"compare{index}@%h"]


def celery_command(args: argparse.Namespace, knobs: dict[str, int]) -> str:
    """The worker command line as a person would type it, for the report."""
    argv = celery_worker_argv(knobs["processes"], 0)[1:-2]
    return (f"{args.celery_nodes} x `celery {' '.join(argv)}`"
            f" with worker_prefetch_multiplier={knobs['prefetch_multiplier']}")


def spawn_celery_workers(fleet: Fleet, args: argparse.Namespace, knobs: dict[str, int],
                         env: dict[str, str], ready_dir: Path) -> list[subprocess.Popen]:
    """The Celery worker nodes, returned once each has said it is ready (its pool and consumer are up)."""
    nodes = args.celery_nodes
    workers = [fleet.spawn(f"worker{i}", celery_worker_argv(knobs["processes"], i), env) for i in range(nodes)]
    wait_for(lambda: len(list(ready_dir.iterdir())) >= nodes,
             f"{nodes} Celery worker node(s) to be ready", fleet, READY_TIMEOUT_S)
    return workers


def run_celery(args: argparse.Namespace, knobs: dict[str, int], log_dir: Path) -> dict[str, object]:
    broker_db, result_db = args.redis_dbs
    broker, results = redis_client(args, broker_db), redis_client(args, result_db)
    facts = redis_facts(broker)
    redis_pid = facts["pid"] if isinstance(facts["pid"], int) and Path(f"/proc/{facts['pid']}").exists() else None
    ready_dir = Path(tempfile.mkdtemp(prefix="ready-", dir=log_dir))
    env = child_env(COMPARE_CELERY_BROKER="redis",
                    COMPARE_BROKER_URL=f"redis://{args.redis_host}:{args.redis_port}/{broker_db}",
                    COMPARE_RESULT_URL=f"redis://{args.redis_host}:{args.redis_port}/{result_db}",
                    COMPARE_CELERY_PREFETCH=str(knobs["prefetch_multiplier"]), COMPARE_READY_DIR=str(ready_dir))
    app = celery_app_for(env)
    noop = app.tasks["compare.noop"]
    from celery import group

    name = f"celery/{point_label(knobs)}"
    config = (f"{celery_command(args, knobs)}; acks_late, reject_on_worker_lost;"
              " Redis broker + Redis result backend storing every result;"
              f" submit: group(noop.s() x {SUBMIT_BATCH}).apply_async() per batch")
    try:
        broker.flushdb()
        results.flushdb()
        (log_dir / name.replace("/", "-")).mkdir()
        with Fleet(log_dir / name.replace("/", "-")) as fleet:
            workers = spawn_celery_workers(fleet, args, knobs, env, ready_dir)
            progress(f"{name}: {args.celery_nodes} worker node(s) ready")

            worker_pids = [w.pid for w in workers]
            cpu_before = (tree_cpu_seconds(worker_pids), tree_cpu_seconds([redis_pid]) if redis_pid else 0.0)
            with app.producer_or_acquire() as producer:
                first_submit = time.time()
                started = time.perf_counter()
                for start in range(0, args.tasks, SUBMIT_BATCH):
                    count = min(SUBMIT_BATCH, args.tasks - start)
                    group(noop.s() for _ in range(count)).apply_async(producer=producer)
                submit_s = time.perf_counter() - started
            progress(f"{name}: {args.tasks} tasks submitted in {submit_s:.2f}s")
            wait_for(lambda: results.dbsize() >= args.tasks, f"{args.tasks} Celery results", fleet, args.timeout)
            cpu_after = (tree_cpu_seconds(worker_pids), tree_cpu_seconds([redis_pid]) if redis_pid else 0.0)

        done, statuses = _celery_results(results)
    finally:
        for client in (broker, results):
            try:
                client.flushdb()
            finally:
                client.close()
    last_done = max(done)
    span = (last_done - dt.datetime.fromtimestamp(first_submit, dt.timezone.utc)).total_seconds()
    return {
        "system": "celery",
        "config": config,
        "broker": "redis",
        "pool": "prefork",
        "tasks": args.tasks,
        "end_to_end_tasks_per_s": round(args.tasks / span, 1),
        "submit_tasks_per_s": round(args.tasks / submit_s, 1),
        "end_to_end_from": "client clock before the first submit -> latest date_done in the result backend",
        "outcomes": statuses,
        "workers_cpu_s_per_task": round((cpu_after[0] - cpu_before[0]) / args.tasks, 6),
        "database": "redis (broker and result backend)",
        "database_cpu_s_per_task": (round((cpu_after[1] - cpu_before[1]) / args.tasks, 6)
                                    if redis_pid else None),
        "durability": {"redis": {k: v for k, v in facts.items() if k != "pid"},
                       "task_acks_late": app.conf.task_acks_late,
                       "task_reject_on_worker_lost": app.conf.task_reject_on_worker_lost,
                       "prefetch_multiplier": app.conf.worker_prefetch_multiplier, "results_stored": True},
        "versions": _versions("celery", "kombu", "redis"),
        "machine": machine(),
    }


def _celery_results(results) -> tuple[list[dt.datetime], dict[str, int]]:
    """Every stored result's date_done (what the worker recorded when it stored the result) and status counts."""
    keys = list(results.scan_iter(match="celery-task-meta-*", count=1000))
    done: list[dt.datetime] = []
    statuses: dict[str, int] = {}
    for start in range(0, len(keys), 1000):
        for raw in results.mget(keys[start:start + 1000]):
            if raw is None:
                continue
            meta = json.loads(raw)
            statuses[meta["status"]] = statuses.get(meta["status"], 0) + 1
            when = dt.datetime.fromisoformat(meta["date_done"])
            done.append(when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc))
    return done, statuses


# --- Celery with RabbitMQ -----------------------------------------------------

def listening_pid(port: int) -> int | None:
    """The pid of the local process listening on TCP *port*, when /proc lets us see it (root, or its owner)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # local_address is HEXIP:HEXPORT; st 0A is LISTEN; field 9 is the socket's inode.
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            for fd in os.scandir(f"/proc/{entry.name}/fd"):
                if os.readlink(fd.path) in inodes:
                    return int(entry.name)
        except OSError:
            continue  # gone, or not ours to read
    return None


def rabbitmq_url(args: argparse.Namespace) -> str:
    return f"amqp://guest:guest@{args.rabbitmq_host}:{args.rabbitmq_port}//"


def run_celery_rabbitmq(args: argparse.Namespace, knobs: dict[str, int], log_dir: Path) -> dict[str, object]:
    from celery import group
    from celery.result import ResultSet

    queue = f"compare_{secrets.token_hex(4)}"  # the queue (and its direct exchange) this run declares and deletes
    ready_dir = Path(tempfile.mkdtemp(prefix="ready-", dir=log_dir))
    env = child_env(COMPARE_CELERY_BROKER="rabbitmq", COMPARE_BROKER_URL=rabbitmq_url(args),
                    COMPARE_CELERY_QUEUE=queue, COMPARE_CELERY_PREFETCH=str(knobs["prefetch_multiplier"]),
                    COMPARE_READY_DIR=str(ready_dir))
    app = celery_app_for(env)
    noop = app.tasks["compare.noop"]
    rabbit_pid = listening_pid(args.rabbitmq_port) if args.rabbitmq_host in ("127.0.0.1", "localhost") else None
    name = f"celery-rabbitmq/{point_label(knobs)}"
    config = (f"{celery_command(args, knobs)}; RabbitMQ broker, durable classic queue,"
              " persistent messages (delivery_mode 2), acks_late, reject_on_worker_lost;"
              " rpc result backend (each result a message to the client's reply queue);"
              f" submit: group(noop.s() x {SUBMIT_BATCH}).apply_async() per batch, then the client collects"
              " every result (ResultSet over all of them, iter_native)")
    task_queue = app.amqp.queues[queue]
    celery_settings = {  # as the app that the workers also load says, not as this script hopes
        "queue_durable": task_queue.durable,
        "queue_type": (task_queue.queue_arguments or {}).get("x-queue-type", "classic"),
        "task_delivery_mode": app.conf.task_default_delivery_mode,
        "publisher_confirms": bool((app.conf.broker_transport_options or {}).get("confirm_publish")),
        "task_acks_late": app.conf.task_acks_late,
        "task_reject_on_worker_lost": app.conf.task_reject_on_worker_lost,
        "prefetch_multiplier": app.conf.worker_prefetch_multiplier,
    }
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1)
            server = conn.connection.server_properties
        facts = {"version": _text(server.get("version")), "product": _text(server.get("product"))}
        (log_dir / name.replace("/", "-")).mkdir()
        with Fleet(log_dir / name.replace("/", "-")) as fleet:
            workers = spawn_celery_workers(fleet, args, knobs, env, ready_dir)
            progress(f"{name}: {args.celery_nodes} worker node(s) ready")

            worker_pids = [w.pid for w in workers]
            cpu_before = (tree_cpu_seconds(worker_pids), tree_cpu_seconds([rabbit_pid]) if rabbit_pid else 0.0)
            groups = []
            with app.producer_or_acquire() as producer:
                first_submit = time.time()
                started = time.perf_counter()
                for start in range(0, args.tasks, SUBMIT_BATCH):
                    count = min(SUBMIT_BATCH, args.tasks - start)
                    groups.append(group(noop.s() for _ in range(count)).apply_async(producer=producer))
                submit_s = time.perf_counter() - started
            progress(f"{name}: {args.tasks} tasks submitted in {submit_s:.2f}s")
            everything = ResultSet([r for g in groups for r in g.results], app=app)
            metas = [meta for _, meta in app.backend.iter_native(
                everything, timeout=args.timeout, on_interval=fleet.check_alive)]
            cpu_after = (tree_cpu_seconds(worker_pids), tree_cpu_seconds([rabbit_pid]) if rabbit_pid else 0.0)
    finally:
        _delete_rabbitmq_objects(app, queue)
    statuses: dict[str, int] = {}
    done = []
    for meta in metas:
        statuses[meta["status"]] = statuses.get(meta["status"], 0) + 1
        when = dt.datetime.fromisoformat(meta["date_done"])
        done.append(when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc))
    span = (max(done) - dt.datetime.fromtimestamp(first_submit, dt.timezone.utc)).total_seconds()
    return {
        "system": "celery-rabbitmq",
        "config": config,
        "broker": "rabbitmq",
        "pool": "prefork",
        "tasks": args.tasks,
        "end_to_end_tasks_per_s": round(args.tasks / span, 1),
        "submit_tasks_per_s": round(args.tasks / submit_s, 1),
        "end_to_end_from": "client clock before the first submit -> latest date_done in the result messages",
        "outcomes": statuses,
        "workers_cpu_s_per_task": round((cpu_after[0] - cpu_before[0]) / args.tasks, 6),
        "database": "rabbitmq (broker; results travel through it as messages)",
        "database_cpu_s_per_task": (round((cpu_after[1] - cpu_before[1]) / args.tasks, 6)
                                    if rabbit_pid else None),
        "durability": {"rabbitmq": facts, **celery_settings,
                       "results_stored": "sent to the client (rpc), not persisted"},
        "versions": _versions("celery", "kombu", "amqp"),
        "machine": machine(),
    }


def _text(value: object) -> str | None:
    return value.decode() if isinstance(value, bytes) else (None if value is None else str(value))


def _delete_rabbitmq_objects(app, queue: str) -> None:
    """Delete the run's task queue and exchange and the client's reply queue, whatever state they are in."""
    try:
        app.backend.result_consumer.stop()  # stops consuming: the auto-delete reply queue goes with it
    except Exception:
        pass
    reply_queue = app.backend.oid
    try:
        with app.connection_for_write() as conn:
            for kind, target in (("queue", queue), ("exchange", queue), ("queue", reply_queue)):
                channel = conn.channel()  # a refused delete closes the channel, so one each
                try:
                    if kind == "queue":
                        channel.queue_delete(target)
                    else:
                        channel.exchange_delete(target)
                except Exception as exc:
                    progress(f"rabbitmq: {kind} {target} not deleted: {exc.__class__.__name__}: {exc}")
                finally:
                    try:
                        channel.close()
                    except Exception:
                        pass
    finally:
        app.close()


# --- procrastinate ----------------------------------------------------------

@contextlib.contextmanager
def fresh_pg_database(args: argparse.Namespace, label: str):
    """A new database of this run's own, dropped afterwards: yields (dbname, conninfo, settings, postmaster pid)."""
    import psycopg

    base = ""  # libpq's defaults and PG* variables (PGHOST, PGPORT, PGUSER): the local socket as this user
    dbname = f"compare_{secrets.token_hex(4)}"
    conninfo = psycopg.conninfo.make_conninfo(base, dbname=dbname, connect_timeout=10)
    admin = psycopg.connect(psycopg.conninfo.make_conninfo(base, dbname=args.pg_admin_db, connect_timeout=10),
                            autocommit=True)
    try:
        settings = {name: admin.execute(f"SHOW {name}").fetchone()[0]
                    for name in ("server_version", "synchronous_commit", "fsync", "wal_sync_method")}
        pg_pid = _postmaster_pid(admin)
        admin.execute(f'CREATE DATABASE "{dbname}"')
        progress(f"{label}: fresh database {dbname}")
        try:
            yield dbname, conninfo, settings, pg_pid
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
            progress(f"{label}: dropped database {dbname}")
    finally:
        admin.close()


def run_procrastinate(args: argparse.Namespace, knobs: dict[str, int], log_dir: Path) -> dict[str, object]:
    with fresh_pg_database(args, "procrastinate") as (_, conninfo, settings, pg_pid):
        return _run_procrastinate(args, knobs, log_dir, conninfo, settings, pg_pid)


def _postmaster_pid(admin) -> int | None:
    """The Postgres server's pid when it runs on this machine and its pid file is readable."""
    try:
        data_dir = admin.execute("SHOW data_directory").fetchone()[0]
        pid = int(Path(data_dir, "postmaster.pid").read_text().splitlines()[0])
    except Exception:
        return None
    return pid if Path(f"/proc/{pid}").exists() else None


def _run_procrastinate(args, knobs: dict[str, int], log_dir: Path, conninfo: str, settings: dict,
                       pg_pid: int | None) -> dict:
    import psycopg

    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    from procrastinate_app import QUEUE, TASK_NAME, make_app

    concurrency = knobs["concurrency"]
    pool_size = concurrency + 1  # procrastinate's advice for short jobs: a connection per sub-worker, plus one
    env = child_env(COMPARE_PG_CONNINFO=conninfo, COMPARE_PG_POOL_SIZE=str(pool_size))
    app = make_app(conninfo, pool_size=1)  # the submitting side: one statement at a time
    noop = app.tasks[TASK_NAME]
    with app.open():
        app.schema_manager.apply_schema()
    name = f"procrastinate/{point_label(knobs)}"
    config = (f"{args.workers} x `procrastinate worker --concurrency {concurrency} --queues {QUEUE}`"
              f" with a connection pool of {pool_size} (PsycopgConnector min_size=max_size={pool_size}; plus its"
              " LISTEN connection); LISTEN/NOTIFY on, jobs kept (--delete-jobs never); async no-op task;"
              f" default Postgres job table; submit: noop.batch_defer({SUBMIT_BATCH} x {{}}) per batch")
    (log_dir / name.replace("/", "-")).mkdir()
    with psycopg.connect(conninfo, autocommit=True) as probe, Fleet(log_dir / name.replace("/", "-")) as fleet:
        # Each worker holds its pool and a LISTEN connection; the server has a fixed number to give.
        needed = args.workers * (pool_size + 1)
        free = probe.execute(
            "SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int"
            " - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')").fetchone()[0]
        if needed > free:
            raise Skipped(f"{args.workers} workers x (pool {pool_size} + 1 LISTEN) = {needed} connections,"
                          f" Postgres has {free} free (max_connections)")
        workers = [fleet.spawn(f"worker{i}", [
            str(VENV_BIN / "procrastinate"), "--app=procrastinate_app.app", "worker",
            "--concurrency", str(concurrency), "--queues", QUEUE, "--name", f"compare{i}"], env)
            for i in range(args.workers)]
        wait_for(lambda: probe.execute("SELECT count(*) FROM procrastinate_workers").fetchone()[0] >= args.workers,
                 f"{args.workers} procrastinate workers to register", fleet, READY_TIMEOUT_S)
        progress(f"{name}: {args.workers} worker(s) registered")

        worker_pids = [w.pid for w in workers]
        cpu_before = (tree_cpu_seconds(worker_pids), tree_cpu_seconds([pg_pid]) if pg_pid else 0.0)
        with app.open():
            started = time.perf_counter()
            for start in range(0, args.tasks, SUBMIT_BATCH):
                noop.batch_defer(*({} for _ in range(min(SUBMIT_BATCH, args.tasks - start))))
            submit_s = time.perf_counter() - started
        progress(f"{name}: {args.tasks} tasks submitted in {submit_s:.2f}s")
        # One held connection, one probe through the partial index on todo/doing jobs.
        wait_for(lambda: probe.execute("SELECT 1 FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
                                       " LIMIT 1").fetchone() is None,
                 f"{args.tasks} procrastinate jobs to finish", fleet, args.timeout)
        cpu_after = (tree_cpu_seconds(worker_pids), tree_cpu_seconds([pg_pid]) if pg_pid else 0.0)

        statuses = dict(probe.execute("SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY 1").fetchall())
        first, last = probe.execute(
            "SELECT min(at) FILTER (WHERE type = 'deferred'), max(at) FILTER (WHERE type = 'succeeded')"
            " FROM procrastinate_events").fetchone()
        rows = probe.execute(
            "SELECT extract(epoch FROM s.at - d.at), extract(epoch FROM f.at - s.at)"
            " FROM procrastinate_events d"
            " JOIN procrastinate_events s ON s.job_id = d.job_id AND s.type = 'started'"
            " JOIN procrastinate_events f ON f.job_id = d.job_id AND f.type = 'succeeded'"
            " WHERE d.type = 'deferred'").fetchall()
    to_start = [float(r[0]) for r in rows]
    to_finish = [float(r[1]) for r in rows]
    ms = lambda v: None if v is None else round(v * 1000, 2)  # noqa: E731
    span = (last - first).total_seconds()
    return {
        "system": "procrastinate",
        "config": config,
        "tasks": args.tasks,
        "end_to_end_tasks_per_s": round(args.tasks / span, 1),
        "submit_tasks_per_s": round(args.tasks / submit_s, 1),
        "end_to_end_from": "first 'deferred' event -> last 'succeeded' event (procrastinate_events.at,"
                           " i.e. now() of the recording transaction)",
        "submit_to_assign_ms": {"p50": ms(percentile(to_start, 0.5)), "p95": ms(percentile(to_start, 0.95)),
                                "p99": ms(percentile(to_start, 0.99))},
        "assign_to_finish_ms": {"p50": ms(percentile(to_finish, 0.5)), "p99": ms(percentile(to_finish, 0.99))},
        "outcomes": statuses,
        "workers_cpu_s_per_task": round((cpu_after[0] - cpu_before[0]) / args.tasks, 6),
        "database": "postgresql (whole server process tree)",
        "database_cpu_s_per_task": (round((cpu_after[1] - cpu_before[1]) / args.tasks, 6)
                                    if pg_pid else None),
        "durability": {"postgres": {k: v for k, v in settings.items() if k != "server_version"},
                       "results_stored": False, "status_stored": True},
        "versions": {**_versions("procrastinate", "psycopg"), "postgres": settings["server_version"]},
        "machine": machine(),
    }


# --- pgqueuer ----------------------------------------------------------------

def run_pgqueuer(args: argparse.Namespace, knobs: dict[str, int], log_dir: Path) -> dict[str, object]:
    with fresh_pg_database(args, "pgqueuer") as (dbname, conninfo, settings, pg_pid):
        return _run_pgqueuer(args, knobs, log_dir, dbname, conninfo, settings, pg_pid)


def _run_pgqueuer(args, knobs: dict[str, int], log_dir: Path, dbname: str, conninfo: str, settings: dict,
                  pg_pid: int | None) -> dict:
    import asyncio

    import psycopg

    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    from pgqueuer_app import ENTRYPOINT

    ready_dir = Path(tempfile.mkdtemp(prefix="ready-", dir=log_dir))
    env = child_env(PGDATABASE=dbname, COMPARE_PG_DBNAME=dbname, COMPARE_READY_DIR=str(ready_dir))
    # `pgq install`, then `pgq autovac`: the autovacuum settings pgqueuer's tuning guide asks for on its
    # high-churn queue table, right after installing.
    for command in ("install", "autovac"):
        done = subprocess.run([str(VENV_BIN / "pgq"), command], env=env, cwd=HERE, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=READY_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"pgq {command} exited with {done.returncode}: {done.stderr.strip()}")
    concurrency, batch_size = knobs["concurrency"], knobs["batch_size"]
    name = f"pgqueuer/{point_label(knobs)}"
    config = (f"{args.workers} x pgqueuer.run(main, max_concurrent_tasks={concurrency}, batch_size={batch_size})"
              " (as `pgq run --max-concurrent-tasks"
              f" {concurrency} --batch-size {batch_size}`; asyncpg driver, one connection per worker; uvloop;"
              " LISTEN/NOTIFY); async no-op entrypoint; schema from `pgq install` (durability durable: every"
              " table logged) and `pgq autovac`;"
              f" submit: Queries.enqueue([...] x {SUBMIT_BATCH}) per batch (one statement per batch)")
    (log_dir / name.replace("/", "-")).mkdir()
    with psycopg.connect(conninfo, autocommit=True) as probe, Fleet(log_dir / name.replace("/", "-")) as fleet:
        persistence = dict(probe.execute(
            "SELECT relname::text, CASE relpersistence WHEN 'p' THEN 'logged' WHEN 'u' THEN 'unlogged'"
            " ELSE relpersistence::text END FROM pg_class WHERE relname IN ('pgqueuer', 'pgqueuer_log')"
            " AND relkind = 'r'").fetchall())
        workers = [fleet.spawn(f"worker{i}", [
            sys.executable, str(HERE / "pgqueuer_app.py"), "--max-concurrent-tasks", str(concurrency),
            "--batch-size", str(batch_size)], env)
            for i in range(args.workers)]
        wait_for(lambda: len(list(ready_dir.iterdir())) >= args.workers,
                 f"{args.workers} pgqueuer workers to listen", fleet, READY_TIMEOUT_S)
        progress(f"{name}: {args.workers} worker(s) listening")

        worker_pids = [w.pid for w in workers]
        cpu_before = (tree_cpu_seconds(worker_pids), tree_cpu_seconds([pg_pid]) if pg_pid else 0.0)
        submit_s = asyncio.run(_pgqueuer_submit(dbname, ENTRYPOINT, args.tasks))
        progress(f"{name}: {args.tasks} tasks submitted in {submit_s:.2f}s")
        # A job's row leaves the queue table in the statement that logs its outcome.
        wait_for(lambda: probe.execute("SELECT 1 FROM pgqueuer LIMIT 1").fetchone() is None,
                 f"{args.tasks} pgqueuer jobs to finish", fleet, args.timeout)
        cpu_after = (tree_cpu_seconds(worker_pids), tree_cpu_seconds([pg_pid]) if pg_pid else 0.0)

        statuses = dict(probe.execute("SELECT status::text, count(*) FROM pgqueuer_log"
                                      " WHERE status NOT IN ('queued', 'picked') GROUP BY 1").fetchall())
        first, last = probe.execute(
            "SELECT min(created) FILTER (WHERE status = 'queued'), max(created) FILTER (WHERE status = 'successful')"
            " FROM pgqueuer_log").fetchone()
    span = (last - first).total_seconds()
    return {
        "system": "pgqueuer",
        "config": config,
        "tasks": args.tasks,
        "end_to_end_tasks_per_s": round(args.tasks / span, 1),
        "submit_tasks_per_s": round(args.tasks / submit_s, 1),
        "end_to_end_from": "first 'queued' -> last 'successful' row of pgqueuer_log (created,"
                           " i.e. now() of the recording transaction)",
        "outcomes": statuses,
        "workers_cpu_s_per_task": round((cpu_after[0] - cpu_before[0]) / args.tasks, 6),
        "database": "postgresql (whole server process tree)",
        "database_cpu_s_per_task": (round((cpu_after[1] - cpu_before[1]) / args.tasks, 6)
                                    if pg_pid else None),
        "durability": {"postgres": {k: v for k, v in settings.items() if k != "server_version"},
                       "tables": persistence, "results_stored": False, "status_stored": True},
        "versions": {**_versions("pgqueuer", "asyncpg", "uvloop"), "postgres": settings["server_version"]},
        "machine": machine(),
    }


async def _pgqueuer_submit(dbname: str, entrypoint: str, tasks: int) -> float:
    """Enqueue *tasks* jobs in batches through pgqueuer's own API; the seconds the loop took."""
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    connection = await asyncpg.connect(database=dbname)
    try:
        queries = Queries(AsyncpgDriver(connection))
        started = time.perf_counter()
        for start in range(0, tasks, SUBMIT_BATCH):
            count = min(SUBMIT_BATCH, tasks - start)
            await queries.enqueue([entrypoint] * count, [None] * count, [0] * count)
        return time.perf_counter() - started
    finally:
        await connection.close()


# --- pulse-trio (our own bench, for the same run) ---------------------------

def run_pulse_trio(args: argparse.Namespace, knobs: dict[str, int], log_dir: Path) -> dict[str, object]:
    capacity, processes = knobs["capacity"], knobs.get("server_processes", 1)
    # --timeout as the peers have it: the bench's own default would end a longer run early.
    argv = [args.pulse_trio_bin, "bench", "--tasks", str(args.tasks), "--workers", str(args.workers),
            "--capacity", str(capacity), "--server-processes", str(processes), "--timeout", f"{args.timeout:g}"]
    log = log_dir / f"pulse-trio-{secrets.token_hex(3)}.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(argv, cwd=args.project_root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=err, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=args.timeout + 120)
        except BaseException:
            # SIGINT first: the bench's own clean-up (its fleet, its database) runs on KeyboardInterrupt.
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc, signal.SIGKILL)
            proc.wait(timeout=5)
            raise
    if proc.returncode != 0:
        raise RuntimeError(f"pulse-trio bench exited with {proc.returncode}:\n{tail(log)}")
    result = json.loads(out.decode().strip().splitlines()[-1])
    return {"system": "pulse-trio",
            "config": f"`pulse-trio bench --tasks {args.tasks} --workers {args.workers}"
                      f" --capacity {capacity} --server-processes {processes}` (docs/performance.md)",
            "tasks": args.tasks, **result}


def _versions(*names: str) -> dict[str, str]:
    from importlib.metadata import version
    return {name: version(name) for name in names}


# --- the sweep ---------------------------------------------------------------

# The knobs each system's own documentation names for throughput, and the values tried (README.md,
# "How each peer is run", says why these). `quick` is the default and finishes in a few minutes at
# 8000 tasks; `full` is the wider grid. `--set SYSTEM.KNOB=V1,V2` replaces one knob's values.
SWEEPS: dict[str, dict[str, dict[str, tuple[int, ...]]]] = {
    "quick": {
        "pulse-trio": {"server_processes": (1, 2)},
        "celery": {"processes": (2, 4, 8, 16), "prefetch_multiplier": (1, 64)},
        "celery-rabbitmq": {"processes": (2, 4, 8, 16), "prefetch_multiplier": (1, 64)},
        "procrastinate": {"concurrency": (4, 16)},
        "pgqueuer": {"concurrency": (64, 128), "batch_size": (10, 32)},
    },
    "full": {
        "pulse-trio": {"server_processes": (1, 2, 3)},
        "celery": {"processes": (2, 4, 6, 8, 12, 16), "prefetch_multiplier": (1, 4, 64)},
        "celery-rabbitmq": {"processes": (2, 4, 6, 8, 12, 16), "prefetch_multiplier": (1, 4, 64)},
        "procrastinate": {"concurrency": (1, 2, 4, 8, 16, 32)},
        "pgqueuer": {"concurrency": (20, 32, 64, 128, 256), "batch_size": (5, 10, 20, 50, 100)},
    },
}
RUNNERS = {"pulse-trio": run_pulse_trio, "celery": run_celery, "celery-rabbitmq": run_celery_rabbitmq,
           "procrastinate": run_procrastinate, "pgqueuer": run_pgqueuer}


def point_label(knobs: dict[str, int]) -> str:
    return ",".join(f"{knob}={value}" for knob, value in knobs.items())


def valid_point(system: str, knobs: dict[str, int]) -> bool:
    """pgqueuer refuses max_concurrent_tasks below twice the batch size; such points are left out of the grid."""
    return not (system == "pgqueuer" and knobs["concurrency"] < 2 * knobs["batch_size"])


def sweep_points(args: argparse.Namespace, system: str) -> list[dict[str, int]]:
    """Every combination of the system's knob values, in grid order."""
    grid = {**({"capacity": (args.capacity,)} if system == "pulse-trio" else {}), **SWEEPS[args.sweep][system]}
    grid.update(args.overrides.get(system, {}))
    points: list[dict[str, int]] = [{}]
    for knob, values in grid.items():
        points = [{**point, knob: value} for point in points for value in values]
    return [point for point in points if valid_point(system, point)]


def plan(args: argparse.Namespace, systems: list[str]) -> list[tuple[int, str, dict[str, int]]]:
    """(round, system, knobs) in run order: each round starts with pulse-trio, then the peers' points
    interleaved one of each system at a time, so a drift in the machine's load touches every system alike."""
    order: list[tuple[int, str, dict[str, int]]] = []
    for round_no in range(1, args.rounds + 1):
        queues = {system: sweep_points(args, system) for system in systems}
        while any(queues.values()):
            for system in systems:
                if queues[system]:
                    order.append((round_no, system, queues[system].pop(0)))
    return order


def parse_override(text: str) -> tuple[str, str, tuple[int, ...]]:
    """`SYSTEM.KNOB=V1,V2` from --set."""
    try:
        target, values = text.split("=", 1)
        system, knob = target.split(".", 1)
        parsed = tuple(int(v) for v in values.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--set wants SYSTEM.KNOB=V1[,V2...], got {text!r}") from None
    knobs = {name: tuple(grid) for name, grid in SWEEPS["quick"].items()}
    knobs["pulse-trio"] = ("capacity", *knobs["pulse-trio"])
    if system not in knobs or knob not in knobs[system] or not parsed or min(parsed) < 1:
        choices = "; ".join(f"{name}: {', '.join(names)}" for name, names in knobs.items())
        raise argparse.ArgumentTypeError(f"--set {text!r}: knobs are {choices}; values positive integers")
    return system, knob, parsed


# server_cpu_s_per_task is pulse-trio's own server process (the peers have none apart from their broker/database).
CPU_FIELDS = ("server_cpu_s_per_task", "workers_cpu_s_per_task", "database_cpu_s_per_task")
BEST_FIELDS = ("system", "end_to_end_tasks_per_s", "submit_tasks_per_s", *CPU_FIELDS, "sweep", "round", "config")


def summarise(results: list[dict[str, object]], systems: list[str]) -> dict[str, object]:
    """The best run of each system by end-to-end throughput, with the configuration that produced it."""
    best = []
    for system in systems:
        runs = [r for r in results if r["system"] == system and "end_to_end_tasks_per_s" in r]
        if runs:
            top = max(runs, key=lambda r: r["end_to_end_tasks_per_s"])
            best.append({**{field: top.get(field) for field in BEST_FIELDS}, "runs": len(runs)})
    return {"summary": "best run of each system by end_to_end_tasks_per_s", "best": best}


def print_summary(summary: dict[str, object]) -> None:
    progress("best of each system (all sweep points are the JSON lines above):")
    for row in summary["best"]:
        parts = [(field.split("_")[0], row[field]) for field in CPU_FIELDS
                 if row[field] is not None or field != "server_cpu_s_per_task"]
        cpu_ms = " + ".join(f"{who} {'?' if value is None else f'{value * 1000:.2f}'}" for who, value in parts)
        progress(f"  {row['system']:<16} {row['end_to_end_tasks_per_s']:>8} tasks/s  CPU/task ms: {cpu_ms}"
                 f"  (best of {row['runs']}: {point_label(row['sweep'])})")


# --- main -------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/compare/run")
    parser.add_argument("--tasks", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=2,
                        help="worker processes for pulse-trio, procrastinate and pgqueuer")
    parser.add_argument("--capacity", "--concurrency", dest="capacity", type=int, default=64,
                        help="pulse-trio's --capacity per worker (the peers' knobs come from the sweep)")
    parser.add_argument("--sweep", choices=sorted(SWEEPS), default="quick")
    parser.add_argument("--set", dest="overrides_raw", type=parse_override, action="append", default=[],
                        metavar="SYSTEM.KNOB=V1,V2", help="replace one knob's sweep values")
    parser.add_argument("--rounds", type=int, default=1, help="repeat the whole plan this many times")
    parser.add_argument("--celery-nodes", type=int, default=1,
                        help="Celery worker nodes, each a prefork pool of the swept process count")
    parser.add_argument("--only", choices=SYSTEMS, action="append")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds to wait for all tasks of one run to finish")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    parser.add_argument("--redis-host", default="127.0.0.1")
    parser.add_argument("--redis-port", type=int, default=6379)
    parser.add_argument("--redis-dbs", type=int, nargs=2, default=[14, 15], metavar=("BROKER", "RESULTS"))
    parser.add_argument("--rabbitmq-host", default="127.0.0.1")
    parser.add_argument("--rabbitmq-port", type=int, default=5672)
    parser.add_argument("--pg-admin-db", default=os.environ.get("COMPARE_PG_ADMIN_DB", "postgres"))
    parser.add_argument("--pulse-trio-bin", default=None)
    parser.add_argument("--project-root", default=str(HERE.parent.parent))
    args = parser.parse_args(argv)
    if min(args.tasks, args.workers, args.capacity, args.rounds, args.celery_nodes) < 1:
        parser.error("--tasks, --workers, --capacity, --rounds and --celery-nodes must be positive")
    args.overrides = {}
    for system, knob, values in args.overrides_raw:
        args.overrides.setdefault(system, {})[knob] = values
    if args.pulse_trio_bin is None:
        args.pulse_trio_bin = str(Path(args.project_root, ".venv", "bin", "pulse-trio"))
    systems = [s for s in SYSTEMS if s in (args.only or SYSTEMS)]
    runs = plan(args, systems)
    if args.dry_run:
        for round_no, system, knobs in runs:
            print(json.dumps({"round": round_no, "system": system, "sweep": knobs}))
        return 0

    # Also SIGINT: a shell starts background jobs with it ignored, and Python then keeps it ignored.
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _on_signal)
    if "celery" in systems:
        for db in args.redis_dbs:
            client = redis_client(args, db)
            try:
                if client.dbsize():
                    progress(f"Redis database {db} is not empty: not this script's to flush."
                             " Pick two empty ones with --redis-dbs BROKER RESULTS.")
                    return 2
            finally:
                client.close()

    progress(f"{len(runs)} runs of {args.tasks} tasks ({args.sweep} sweep, {args.rounds} round(s))")
    failed, results = [], []
    with tempfile.TemporaryDirectory(prefix="pulse-compare-") as tmp:
        log_dir = Path(tmp)
        for number, (round_no, system, knobs) in enumerate(runs, 1):
            name = f"{system}/{point_label(knobs)}"
            progress(f"[{number}/{len(runs)}] {name}: {args.tasks} tasks")
            try:
                result = RUNNERS[system](args, knobs, log_dir)
            except (Interrupted, KeyboardInterrupt) as exc:
                progress(f"{name}: interrupted ({exc or 'SIGINT'}); children stopped, state cleaned up")
                return 130
            except Skipped as exc:
                progress(f"{name}: skipped: {exc}")
                print(json.dumps({"system": system, "sweep": knobs, "round": round_no, "skipped": str(exc)}),
                      flush=True)
                continue
            except Exception as exc:
                progress(f"{name}: FAILED: {exc.__class__.__name__}: {exc}")
                failed.append(name)
                continue
            result = {**result, "sweep": knobs, "round": round_no}
            results.append(result)
            print(json.dumps(result), flush=True)
    summary = summarise(results, systems)
    print(json.dumps(summary), flush=True)
    print_summary(summary)
    if failed:
        progress(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
