"""`pulse-trio bench`: run the platform under load and print the figures as JSON."""

from __future__ import annotations

import argparse

from pulse_trio.cli.common import add_database_options, database, print_json, run_guarded


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("bench", help="measure throughput and latency with real server and worker processes")
    parser.add_argument("--workers", type=int, default=2, help="SDK worker processes (default 2)")
    parser.add_argument("--capacity", type=int, default=64, help="capacity of each worker (default 64)")
    parser.add_argument("--tasks", type=int, default=2000, help="no-op tasks to run (default 2000)")
    parser.add_argument("--payload-bytes", type=int, default=0, help="payload size per task (e.g. 1024)")
    parser.add_argument("--backlog", type=int, default=0, help="READY tasks no worker takes, pre-filled")
    parser.add_argument("--instances", type=int, default=1, help="server instances on the one database")
    parser.add_argument("--keyed-share", type=float, default=0.0, help="fraction of tasks with a concurrency key")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the run to finish")
    add_database_options(parser)
    parser.set_defaults(run=run_guarded(_bench))


def _bench(args: argparse.Namespace) -> int:
    from pulse_trio.bench.runner import BenchOptions, run

    options = BenchOptions(workers=args.workers, capacity=args.capacity, tasks=args.tasks,
                           payload_bytes=args.payload_bytes, backlog=args.backlog, instances=args.instances,
                           keyed_share=args.keyed_share, timeout_s=args.timeout)
    with database(args, ensure_schema=False) as server:
        print_json(run(server, options))
    return 0
