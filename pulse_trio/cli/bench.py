"""`pulse-trio bench [latency|connections|producer|fill-finished]`: run the platform under load and print the figures as JSON.

Without a mode it is the throughput bench (its options stay where they
were); a mode's options follow the mode's name.
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import Callable

from pulse_trio import config as cfg
from pulse_trio.cli.common import (CommandFailed, add_database_options, add_inherited_database_options, database,
                                   print_json, run_guarded)
from pulse_trio.cli.durations import parse_duration
from pulse_trio.client import ClientError
from pulse_trio.client.producer import check_name
from pulse_trio.contract.limits import MAX_CAPACITY

def _stopped_by_sigterm(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run a bench mode with SIGTERM raising SystemExit, as SIGINT raises KeyboardInterrupt.

    By default SIGTERM ends the process on the spot: the servers, workers and
    managed MariaDB it started kept running (and kept loading the machine
    the next measurement ran on). As an exception it unwinds through the
    fleet's and the database's ``with`` blocks, which stop them.
    """
    def run(args: argparse.Namespace) -> int:
        previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        try:
            return fn(args)
        finally:
            signal.signal(signal.SIGTERM, previous)

    return run


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


#: The SDK worker's event loops (``pulse-trio worker run --backend``).
WORKER_BACKENDS = ("asyncio", "trio")


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("bench", help="measure throughput and latency with real server and worker processes",
                                 description="Without MODE: throughput of no-op tasks submitted in batches.")
    parser.add_argument("--workers", type=_positive(int), default=2, help="SDK worker processes (default 2)")
    parser.add_argument("--capacity", type=_capacities, default=[64],
                        help="capacity of each worker (default 64); several, comma-separated (8,16,32,64,128), "
                             "run one after another on fresh databases: a sweep for where throughput stops growing")
    parser.add_argument("--tasks", type=_positive(int), default=2000, help="no-op tasks to run (default 2000)")
    parser.add_argument("--payload-bytes", type=_not_negative(int), default=0, help="payload size per task (e.g. 1024)")
    parser.add_argument("--backlog", type=_not_negative(int), default=0, help="READY tasks no worker takes, pre-filled")
    parser.add_argument("--instances", type=_positive(int), default=1, help="server instances on the one database")
    parser.add_argument("--server-processes", type=_positive(int), default=1,
                        help="serve --processes of each instance: processes behind its one address (default 1)")
    parser.add_argument("--keyed-share", type=_share, default=0.0,
                        help="fraction of tasks with a concurrency key, 0..1")
    parser.add_argument("--fairness-keys", type=_not_negative(int), default=0,
                        help="spread the tasks over this many fairness keys, round robin (default 0: none); "
                             "compare 1 with 10000 for the claim cost per key")
    parser.add_argument("--submit-first", action="store_true",
                        help="submit every task before the workers connect, so the CPU and statements per task "
                             "are the dispatch's alone (the claims and lease commands, not the submits)")
    parser.add_argument("--timeout", type=_positive(float), default=600.0, help="seconds to wait for the run to finish")
    parser.add_argument("--worker-backend", choices=WORKER_BACKENDS, default="asyncio",
                        help="event loop of the SDK workers (worker run --backend; default asyncio)")
    parser.add_argument("--history", type=_not_negative(int), default=0,
                        help="finished tasks past the retention, filled before the run and purged by the servers "
                             "during it (--purge-interval 1): what the purge costs the run")
    add_database_options(parser)
    parser.set_defaults(run=run_guarded(_stopped_by_sigterm(_bench)))

    modes = parser.add_subparsers(dest="mode", metavar="MODE", title="modes (options after the mode's name)")
    latency = modes.add_parser(
        "latency", help="idle-dispatcher latency: tasks submitted one at a time at a fixed rate",
        description="Submit tasks one at a time at --rate to an idle instance, over its HTTP API and then "
                    "with Client.submit straight into the database; report submit→assign and assign→finish.")
    latency.add_argument("--rate", type=_positive(float), default=50.0, help="tasks per second (default 50)")
    latency.add_argument("--tasks", type=_positive(int), default=500, help="tasks per producer path (default 500)")
    latency.add_argument("--workers", type=_positive(int), default=1, help="SDK worker processes (default 1)")
    latency.add_argument("--capacity", type=_positive(int), default=8, help="capacity of each worker (default 8)")
    latency.add_argument("--server-processes", type=_positive(int), default=1,
                         help="serve --processes: processes behind the one address (default 1)")
    latency.add_argument("--poll-interval", type=cfg.parse_seconds, default=cfg.Settings().poll_interval,
                         help="the server's --poll-interval (default: serve's default, "
                              f"{cfg.Settings().poll_interval:g}s)")
    latency.add_argument("--path", dest="paths", action="append", choices=("http", "client"),
                         help="producer path to run (repeatable; default both)")
    latency.add_argument("--timeout", type=_positive(float), default=600.0, help="seconds to wait for each path's tasks")
    latency.add_argument("--worker-backend", choices=WORKER_BACKENDS, default="asyncio",
                         help="event loop of the SDK workers (worker run --backend; default asyncio)")
    latency.add_argument("--history", type=_not_negative(int), default=0,
                         help="finished tasks past the retention, filled before the run and purged by the server "
                              "during it (--purge-interval 1): what the purge costs the latency")
    _add_mode_database_options(latency)
    latency.set_defaults(run=run_guarded(_stopped_by_sigterm(_latency)))

    connections = modes.add_parser(
        "connections", help="K idle registered sessions on one instance: registration rate, RSS, CPU",
        description="Hold --sessions idle worker sessions (full hello/welcome and capacity handshake) from "
                    "separate processes; report registration time, server RSS and CPU, and health afterwards.")
    connections.add_argument("--sessions", type=_positive(int), default=5000, help="idle sessions (default 5000)")
    connections.add_argument("--processes", type=_positive(int), default=None,
                             help="holder processes (default one per 2500 sessions)")
    connections.add_argument("--capacity", type=int, default=1,
                             help="capacity each idle session declares (default 1; 0 sends no worker.capacity)")
    connections.add_argument("--in-flight", type=_positive(int), default=32,
                             help="registrations under way at once per holder process (default 32)")
    connections.add_argument("--idle", type=_not_negative(float), default=5.0,
                             help="seconds to watch the server's CPU with every session idle (default 5)")
    connections.add_argument("--poll-interval", type=cfg.parse_seconds, default=cfg.Settings().poll_interval,
                             help="the server's --poll-interval (default: serve's default)")
    connections.add_argument("--timeout", type=_positive(float), default=600.0, help="seconds the registrations may take")
    _add_mode_database_options(connections)
    connections.set_defaults(run=run_guarded(_stopped_by_sigterm(_connections)))

    producer = modes.add_parser(
        "producer", help="the HTTP producer: submit_many against one-by-one, statements/s of idle waiters",
        description="On one instance with no worker: tasks/s submitted one request each and with submit_many, "
                    "then the database statements per second with no waiter, one, and --waiters long-polls.")
    producer.add_argument("--tasks", type=_positive(int), default=2000, help="tasks per submit path (default 2000)")
    producer.add_argument("--batch", type=_positive(int), default=100, help="tasks per submit_many (default 100)")
    producer.add_argument("--waiters", type=_positive(int), default=1000, help="idle long-polls (default 1000)")
    producer.add_argument("--idle", type=_positive(float), default=10.0,
                          help="seconds each statement count runs (default 10)")
    _add_mode_database_options(producer)
    producer.set_defaults(run=run_guarded(_stopped_by_sigterm(_producer)))

    history = modes.add_parser(
        "fill-finished", help="insert many finished tasks fast (untimed): history for a retention purge",
        description="Insert --tasks SUCCEEDED tasks that ended --age ago, each with its lease and a renew "
                    "receipt, generated by the database in chunks. Not a measurement: run bench (and serve's "
                    "purge, or `pulse-trio task purge`) against the filled tables.")
    history.add_argument("--tasks", type=_positive(int), default=1_000_000, help="tasks (default 1000000)")
    history.add_argument("--queue", default="bench-history", help="their queue (default bench-history)")
    history.add_argument("--age", type=parse_duration, default=8 * 86_400.0, metavar="DURATION",
                         help="how long ago they ended: seconds or 90s, 15m, 12h, 8d (default 8d)")
    _add_mode_database_options(history)
    history.set_defaults(run=run_guarded(_stopped_by_sigterm(_fill_finished)))


def _positive(kind: Callable[[str], float | int]) -> Callable[[str], float | int]:
    """A count, rate or duration above zero: no tasks or no workers is no run (its figures divide by zero)."""
    return _checked(kind, lambda value: value > 0, "must be positive")


def _not_negative(kind: Callable[[str], float | int]) -> Callable[[str], float | int]:
    """A count that may be zero (none of it), never below."""
    return _checked(kind, lambda value: value >= 0, "must not be negative")


def _share(text: str) -> float | int:
    """A fraction of the tasks."""
    return _checked(float, lambda value: 0 <= value <= 1, "must be 0..1")(text)


def _checked(kind: Callable[[str], float | int], within: Callable[[float | int], bool],
             rule: str) -> Callable[[str], float | int]:
    """An argparse ``type=``: the text read as ``kind``, refused (exit 2, one line) unless ``within`` holds."""
    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not within(value):  # NaN holds no rule
            raise argparse.ArgumentTypeError(f"{rule}: {text!r}")
        return value

    return parse


def _add_mode_database_options(parser: argparse.ArgumentParser) -> None:
    add_inherited_database_options(parser)


def _bench(args: argparse.Namespace) -> int:
    from pulse_trio.bench.runner import BenchOptions, run, sweep

    options = BenchOptions(workers=args.workers, capacity=args.capacity[0], tasks=args.tasks,
                           payload_bytes=args.payload_bytes, backlog=args.backlog, instances=args.instances,
                           server_processes=args.server_processes,
                           keyed_share=args.keyed_share, fairness_keys=args.fairness_keys, timeout_s=args.timeout,
                           worker_backend=args.worker_backend, history=args.history,
                           submit_first=args.submit_first)
    if len(args.capacity) == 1:
        return _report(args, lambda server: run(server, options))
    return _report(args, lambda server: sweep(server, options, args.capacity))


def _capacities(text: str) -> list[int]:
    """One capacity, or several comma-separated for a sweep."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a capacity or a comma-separated list of them: {text!r}") from None
    if not all(1 <= value <= MAX_CAPACITY for value in values):
        raise argparse.ArgumentTypeError(f"capacities are 1..{MAX_CAPACITY}: {text!r}")
    return values


def _latency(args: argparse.Namespace) -> int:
    from pulse_trio.bench.latency import PATHS, LatencyOptions, run

    options = LatencyOptions(rate=args.rate, tasks=args.tasks, workers=args.workers, capacity=args.capacity,
                             poll_interval=args.poll_interval, paths=tuple(dict.fromkeys(args.paths or PATHS)),
                             timeout_s=args.timeout, worker_backend=args.worker_backend, history=args.history,
                             server_processes=args.server_processes)
    return _report(args, lambda server: run(server, options))


def _connections(args: argparse.Namespace) -> int:
    from pulse_trio.bench.connections import ConnectionOptions, run

    if not 0 <= args.capacity <= MAX_CAPACITY:
        raise CommandFailed(f"--capacity must be 0..{MAX_CAPACITY}", 2)
    options = ConnectionOptions(sessions=args.sessions, processes=args.processes or 0, capacity=args.capacity,
                                in_flight=args.in_flight, idle_s=args.idle, poll_interval=args.poll_interval,
                                timeout_s=args.timeout)
    return _report(args, lambda server: run(server, options))


def _producer(args: argparse.Namespace) -> int:
    from pulse_trio.bench.producer import ProducerOptions, run

    options = ProducerOptions(tasks=args.tasks, batch=args.batch, waiters=args.waiters, idle_s=args.idle)
    return _report(args, lambda server: run(server, options))


def _fill_finished(args: argparse.Namespace) -> int:
    from pulse_trio.bench.fill_finished import FillOptions, fill

    try:
        check_name("queue", args.queue)
    except ClientError as exc:
        raise CommandFailed(exc.message, 2) from None
    with database(args, create=True) as server:
        print_json(fill(server, FillOptions(tasks=args.tasks, queue=args.queue, age_s=args.age)))
    return 0


def _report(args: argparse.Namespace, measure: Callable[..., dict[str, object]]) -> int:
    with database(args, ensure_schema=False, create=True) as server:
        try:
            result = measure(server)
        except RuntimeError as exc:  # a process died or a wait timed out: say which
            raise CommandFailed(str(exc)) from None
    print_json(result)
    return 0
