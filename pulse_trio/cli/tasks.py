"""Producer and operator commands: submit, task show|cancel|retry, workers, nodes, queues.

Thin faces over :class:`pulse_trio.client.Client`: arguments are checked
before anything is written (exit 2), refusals exit 1, results are one JSON
object on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator

from pulse_trio import cluster_settings as cs
from pulse_trio.cli.common import add_database_options, database, fail, print_json, run_guarded
from pulse_trio.client import Client, ClientError, TaskNotFound
from pulse_trio.client import ranges
from pulse_trio.client.producer import build_task
from pulse_trio.contract.grammar import parse_time

#: Flags these commands took before the values moved to the cluster: accepted, ignored, warned about.
DEPRECATED = ("priority_step", "cancel_grace")


def _add_common(parser: argparse.ArgumentParser) -> None:
    add_database_options(parser)
    for name in DEPRECATED:
        parser.add_argument(cs.BY_NAME[name].flag, dest=f"deprecated_{name}", metavar="SECONDS",
                            help=f"deprecated and ignored: the cluster's {name} applies (pulse-trio settings)")


def _warn_deprecated(args: argparse.Namespace) -> None:
    for name in DEPRECATED:
        if getattr(args, f"deprecated_{name}", None) is not None:
            sys.stderr.write(f"pulse-trio: {cs.BY_NAME[name].flag} is deprecated and ignored: every writer uses "
                             f"the cluster's {name} (see `pulse-trio settings show`; change it with "
                             f"`pulse-trio settings set {name} SECONDS`)\n")


@contextlib.contextmanager
def _client(args: argparse.Namespace) -> Iterator[Client]:
    _warn_deprecated(args)
    with database(args) as target:
        client = Client(target, pool_size=1)
        try:
            yield client
        finally:
            client.close()


def register(commands: argparse._SubParsersAction) -> None:
    submit = commands.add_parser("submit", help="submit a task; prints it as JSON")
    submit.add_argument("--queue", required=True)
    submit.add_argument("--kind", required=True)
    payload = submit.add_mutually_exclusive_group()
    payload.add_argument("--payload", metavar="JSON", help="the task input, inline (default {})")
    payload.add_argument("--payload-file", metavar="PATH", help="read the payload from a file ('-' for stdin)")
    submit.add_argument("--priority", type=ranges.PRIORITY.argparse_type(), default=0,
                        help=f"{ranges.PRIORITY.spelled}, higher first (default 0)")
    when = submit.add_mutually_exclusive_group()
    when.add_argument("--delay", type=ranges.DELAY.argparse_type(), metavar="SECONDS",
                      help=f"due this many seconds from now ({ranges.DELAY.spelled})")
    when.add_argument("--due-at", metavar="TIME", help="due at this UTC RFC 3339 time")
    submit.add_argument("--idempotency-key", help="business identity; a repeat returns the existing task")
    submit.add_argument("--concurrency-key", help="run while fewer than --concurrency-limit of this key run")
    submit.add_argument("--concurrency-limit", type=ranges.CONCURRENCY_LIMIT.argparse_type(), default=1,
                        help=f"{ranges.CONCURRENCY_LIMIT.spelled} (default 1)")
    submit.add_argument("--max-attempts", type=ranges.MAX_ATTEMPTS.argparse_type(), default=3,
                        help=f"{ranges.MAX_ATTEMPTS.spelled} (default 3)")
    submit.add_argument("--retry-uncertain", action="store_true",
                        help="the handler is safe to run again after a lost lease")
    submit.add_argument("--lease-ttl", type=ranges.LEASE_TTL.argparse_type(), metavar="SECONDS",
                        help=f"this task's lease ttl, {ranges.LEASE_TTL.spelled} (default: the cluster's lease_ttl)")
    submit.add_argument("--backoff-initial", type=ranges.BACKOFF_INITIAL.argparse_type(), metavar="SECONDS",
                        help=f"first retry delay after a retryable failure, {ranges.BACKOFF_INITIAL.spelled} "
                             "(default 1)")
    submit.add_argument("--backoff-factor", type=ranges.BACKOFF_FACTOR.argparse_type(), metavar="X",
                        help=f"each further retry waits X times longer, {ranges.BACKOFF_FACTOR.spelled} (default 2)")
    submit.add_argument("--backoff-max", type=ranges.BACKOFF_MAX.argparse_type(), metavar="SECONDS",
                        help="the longest retry delay (default 300, or --backoff-initial if longer)")
    _add_common(submit)
    submit.set_defaults(run=run_guarded(_submit))

    task = commands.add_parser("task", help="show, cancel or retry one task")
    actions = task.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, helptext, fn in (("show", "print the task with attempts, outcome and lineage", _show),
                               ("cancel", "request cancellation (a terminal task is reported as is)", _cancel),
                               ("retry", "manually retry a terminal FAILED/UNKNOWN/CANCELLED task", _retry)):
        action = actions.add_parser(name, help=helptext)
        action.add_argument("task_id")
        if name == "cancel":
            action.add_argument("--reason", default="operator", help="recorded with the intent, sent to the worker")
        _add_common(action)
        action.set_defaults(run=run_guarded(fn))

    workers = commands.add_parser("workers", help="list connected worker instances and their leases")
    workers.add_argument("--all", action="store_true", help="include disconnected instances")
    _add_common(workers)
    workers.set_defaults(run=run_guarded(_workers))

    nodes = commands.add_parser("nodes", help="list serve processes: alive, lost (with who noticed), stopped")
    nodes.add_argument("--all", action="store_true", help="include processes that stopped gracefully")
    _add_common(nodes)
    nodes.set_defaults(run=run_guarded(_nodes))

    queues = commands.add_parser("queues", help="tasks per state per queue, and the oldest ready age")
    _add_common(queues)
    queues.set_defaults(run=run_guarded(_queues))


def _read_payload(args: argparse.Namespace) -> str:
    if args.payload_file is None:
        return args.payload if args.payload is not None else "{}"
    try:
        if args.payload_file == "-":
            return sys.stdin.read()
        with open(args.payload_file, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read the payload file: {exc}", 2)


def _submit(args: argparse.Namespace) -> int:
    due_at = None
    if args.due_at is not None:
        try:
            due_at = parse_time(args.due_at)
        except ValueError as exc:
            fail(f"--due-at: {exc}", 2)
    options = dict(payload_json=_read_payload(args), priority=args.priority, delay=args.delay, due_at=due_at,
                   idempotency_key=args.idempotency_key, concurrency_key=args.concurrency_key,
                   concurrency_limit=args.concurrency_limit, max_attempts=args.max_attempts,
                   retry_uncertain=args.retry_uncertain, lease_ttl=args.lease_ttl,
                   backoff_initial=args.backoff_initial, backoff_factor=args.backoff_factor,
                   backoff_max=args.backoff_max)
    # Validate before touching the database: bad input writes nothing.
    try:
        task = build_task(args.queue, args.kind, **options)
    except ClientError as exc:
        fail(exc.message, 2)
    with _client(args) as client:
        done = client.submit_many([task])[0]
        print_json(dict(client.get(done["task_id"]), created=done["created"]))
    return 0


def _show(args: argparse.Namespace) -> int:
    with _client(args) as client:
        try:
            sys.stdout.write(client.get_json_text(args.task_id) + "\n")
        except TaskNotFound as exc:
            fail(exc.message)
    return 0


def _cancel(args: argparse.Namespace) -> int:
    with _client(args) as client:
        try:
            print_json(client.cancel(args.task_id, reason=args.reason, requested_by="cli"))
        except ClientError as exc:
            fail(exc.message)
    return 0


def _retry(args: argparse.Namespace) -> int:
    with _client(args) as client:
        try:
            print_json(client.retry(args.task_id))
        except ClientError as exc:
            fail(exc.message)
    return 0


def _workers(args: argparse.Namespace) -> int:
    with _client(args) as client:
        print_json({"workers": client.workers(include_disconnected=args.all)})
    return 0


def _nodes(args: argparse.Namespace) -> int:
    with _client(args) as client:
        print_json({"nodes": client.nodes(include_stopped=args.all)})
    return 0


def _queues(args: argparse.Namespace) -> int:
    with _client(args) as client:
        print_json({"queues": client.queues()})
    return 0


__all__ = ["register"]
