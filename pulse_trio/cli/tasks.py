"""Producer and operator commands: submit, task list|show|cancel|retry|purge, workers [drain], nodes, queues.

``queues`` lists the queues; ``queues pause|resume Q`` stops or restarts one.

Thin faces over :class:`pulse_trio.client.Client`: arguments are checked
before anything is written (exit 2), refusals exit 1, an unknown id exits 3
(a ClientError a command lets through gets its exit code in ``run_guarded``),
results are one compact JSON object on stdout (or a table with
``--format table`` for the lists).
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
from collections.abc import Iterator

from pulse_trio import cluster_settings as cs
from pulse_trio.cli.common import (EXIT_USAGE, add_database_options, add_inherited_database_options, database, fail,
                                   run_guarded)
from pulse_trio.cli.durations import parse_duration
from pulse_trio.cli.output import Column, add_format_option, print_json, print_table, with_field, write_json_text
from pulse_trio.client import Client, ClientError
from pulse_trio.client import ranges
from pulse_trio.client.producer import INVALID_REQUEST, NAME_RULE, build_task, check_name
from pulse_trio.store.views import queries
from pulse_trio.contract.grammar import INSTANCE_PREFIX, TASK_PREFIX, is_resource_id, parse_time

#: Flags two commands took before the values moved to the cluster: accepted there, ignored, warned about.
DEPRECATED = {"submit": "priority_step", "cancel": "cancel_grace"}


def _add_deprecated(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument(cs.BY_NAME[name].flag, dest=f"deprecated_{name}", metavar="SECONDS",
                        help=f"deprecated and ignored: the cluster's {name} applies (pulse-trio settings)")


def _warn_deprecated(args: argparse.Namespace) -> None:
    for name in DEPRECATED.values():
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
    submit.add_argument("--queue", required=True, help="the queue workers subscribe to")
    submit.add_argument("--kind", required=True, help="the kind of task, within the queue")
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
    submit.add_argument("--fairness-key", help="share the queue with other keys by weight (a tenant id, say); "
                                               "weights: pulse-trio settings weight")
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
    add_database_options(submit)
    _add_deprecated(submit, DEPRECATED["submit"])
    submit.set_defaults(run=run_guarded(_submit))

    task = commands.add_parser("task", help="list tasks, show, cancel or retry one, or purge finished ones")
    actions = task.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="a page of tasks, oldest first: the filters of GET /v1/tasks")
    listing.add_argument("--queue", help="only this queue")
    listing.add_argument("--state", choices=queries.TASK_STATES, help="only tasks in this state")
    listing.add_argument("--kind", help="only this kind")
    listing.add_argument("--idempotency-key", help="the task submitted with this key")
    listing.add_argument("--order", choices=queries.LIST_ORDERS, default="oldest", help="by creation")
    listing.add_argument("--cursor", metavar="TASK_ID", help="start after this task: a previous page's `next`")
    listing.add_argument("--limit", type=ranges.LIST_LIMIT.argparse_type(), default=ranges.LIST_LIMIT.default,
                         help=f"tasks per page, {ranges.LIST_LIMIT.spelled}")
    add_format_option(listing)
    add_database_options(listing)
    listing.set_defaults(run=run_guarded(_list))
    for name, helptext, fn in (("show", "print the task with attempts, outcome and lineage", _show),
                               ("cancel", "request cancellation (a terminal task is reported as is)", _cancel),
                               ("retry", "manually retry a terminal FAILED/UNKNOWN/CANCELLED task", _retry)):
        action = actions.add_parser(name, help=helptext)
        action.add_argument("task_id", metavar="TASK_ID", help="the task's id (tsk_…)")
        if name == "cancel":
            action.add_argument("--reason", default="operator", help="recorded with the intent, sent to the worker")
            _add_deprecated(action, DEPRECATED["cancel"])
        add_database_options(action)
        action.set_defaults(run=run_guarded(fn))

    purge = actions.add_parser(
        "purge", help="delete terminal tasks past their retention now, in batches (what serve does every minute)",
        description="Delete SUCCEEDED, FAILED, UNKNOWN and CANCELLED tasks, with their leases, receipts and cancel "
                    "intents, that ended longer ago than --older-than (default: each queue's task_retention, or "
                    "the cluster's). Safe beside running serve processes: each batch is one short transaction "
                    "that skips rows another purge holds.")
    purge.add_argument("--older-than", type=parse_duration, metavar="DURATION",
                       help="ended longer ago than this: seconds, or 90s, 15m, 12h, 7d, 2w")
    purge.add_argument("--queue", help="only this queue")
    purge.add_argument("--dry-run", action="store_true", help="count what would go; delete nothing")
    add_database_options(purge)
    purge.set_defaults(run=run_guarded(_purge))

    workers = commands.add_parser("workers", help="list worker instances and their leases, or drain one",
                                  description="Without an action: list the connected worker instances.")
    workers.add_argument("--all", action="store_true", help="include disconnected instances")
    add_format_option(workers)
    add_database_options(workers)
    workers.set_defaults(run=run_guarded(_workers))
    worker_actions = workers.add_subparsers(dest="action", metavar="[ACTION]")
    drain = worker_actions.add_parser(
        "drain", help="offer a worker instance no new tasks (its leases continue): POST /v1/workers/{id}/drain",
        description="Until its session ends, the instance gets no new offers; the tasks it runs finish as usual.")
    drain.add_argument("instance_id", metavar="INSTANCE_ID", help="the worker instance (ins_…, see `workers`)")
    add_inherited_database_options(drain)
    drain.set_defaults(run=run_guarded(_drain))

    nodes = commands.add_parser("nodes", help="list serve processes: alive, lost (with who noticed), stopped")
    nodes.add_argument("--all", action="store_true", help="include processes that stopped gracefully")
    add_format_option(nodes)
    add_database_options(nodes)
    nodes.set_defaults(run=run_guarded(_nodes))

    queues = commands.add_parser("queues", help="tasks per state per queue, the oldest ready age and whether it is "
                                                "paused; or pause or resume one",
                                 description="Without an action: list the queues (a paused one shows PAUSED).")
    add_format_option(queues)
    add_database_options(queues)
    queues.set_defaults(run=run_guarded(_queues))
    queue_actions = queues.add_subparsers(dest="action", metavar="[ACTION]")
    for name, helptext in (("pause", "offer none of the queue's tasks on any serve process (running leases "
                                     "continue, submissions are accepted): POST /v1/queues/{queue}/pause"),
                           ("resume", "offer the queue's tasks again: POST /v1/queues/{queue}/resume")):
        action = queue_actions.add_parser(name, help=helptext, description=helptext)
        action.add_argument("queue", metavar="QUEUE", help=f"the queue ({NAME_RULE})")
        add_inherited_database_options(action)
        action.set_defaults(run=run_guarded(_pause if name == "pause" else _resume))


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
                   concurrency_limit=args.concurrency_limit, fairness_key=args.fairness_key,
                   max_attempts=args.max_attempts,
                   retry_uncertain=args.retry_uncertain, lease_ttl=args.lease_ttl,
                   backoff_initial=args.backoff_initial, backoff_factor=args.backoff_factor,
                   backoff_max=args.backoff_max)
    # Validate before touching the database: bad input writes nothing.
    try:
        task = build_task(args.queue, args.kind, **options)
    except ClientError as exc:
        fail(exc.message, 2)
    with _client(args) as client:
        _, text, created = client.submit_json_text(task)
        write_json_text(with_field(text, "created", created))
    return 0


def _list(args: argparse.Namespace) -> int:
    if args.cursor is not None and not is_resource_id(args.cursor, TASK_PREFIX):
        fail("--cursor must be the `next` value of a previous page (a task id)", EXIT_USAGE)
    with _client(args) as client:
        try:
            page = client.list(queue=args.queue, state=args.state, kind=args.kind,
                               idempotency_key=args.idempotency_key, after=args.cursor, limit=args.limit,
                               order=args.order)
        except ClientError as exc:
            fail(exc.message, EXIT_USAGE)
    if args.format == "table":
        print_table(page["tasks"], TASK_COLUMNS)
        if page["next"]:
            sys.stdout.write(f"more: --cursor {page['next']}\n")
    else:
        print_json(page)
    return 0


def _show(args: argparse.Namespace) -> int:
    with _client(args) as client:
        write_json_text(client.get_json_text(args.task_id))
    return 0


def _cancel(args: argparse.Namespace) -> int:
    with _client(args) as client:
        text, changed = client.cancel_json_text(args.task_id, reason=args.reason, requested_by="cli")
        write_json_text(with_field(text, "cancel_changed", changed))
    return 0


def _retry(args: argparse.Namespace) -> int:
    with _client(args) as client:
        text, created = client.retry_json_text(args.task_id)
        write_json_text(with_field(text, "created", created))
    return 0


def _purge(args: argparse.Namespace) -> int:
    try:
        if args.queue is not None:
            check_name("queue", args.queue)
        if args.older_than is not None and args.older_than > cs.RETENTION_MAX_MS / 1000:
            raise ClientError(INVALID_REQUEST, f"--older-than is at most {cs.RETENTION_MAX_MS // 86_400_000} days")
    except ClientError as exc:
        fail(exc.message, EXIT_USAGE)
    with _client(args) as client:
        print_json(client.purge(older_than=args.older_than, queue=args.queue, dry_run=args.dry_run))
    return 0


def _workers(args: argparse.Namespace) -> int:
    with _client(args) as client:
        workers = client.workers(include_disconnected=args.all)
    if args.format == "table":
        print_table(workers, WORKER_COLUMNS)
    else:
        print_json({"workers": workers})
    return 0


def _drain(args: argparse.Namespace) -> int:
    if not is_resource_id(args.instance_id, INSTANCE_PREFIX):
        fail(f"not a worker instance id: {args.instance_id!r} (ins_…, see `pulse-trio workers`)", EXIT_USAGE)
    with _client(args) as client:
        print_json(client.drain(args.instance_id))
    return 0


def _nodes(args: argparse.Namespace) -> int:
    with _client(args) as client:
        nodes = client.nodes(include_stopped=args.all)
    if args.format == "table":
        print_table(nodes, NODE_COLUMNS)
    else:
        print_json({"nodes": nodes})
    return 0


def _queues(args: argparse.Namespace) -> int:
    with _client(args) as client:
        depths = client.queues()
    if args.format == "table":
        print_table([dict(d, queue=q) for q, d in sorted(depths.items())], QUEUE_COLUMNS)
    else:
        print_json({"queues": depths})
    return 0


def _pause_or_resume(args: argparse.Namespace, pause: bool) -> int:
    try:
        check_name("queue", args.queue)
    except ClientError as exc:
        fail(exc.message, EXIT_USAGE)
    who = f"cli@{socket.gethostname()}"
    with _client(args) as client:
        print_json(client.pause_queue(args.queue, paused_by=who) if pause
                   else client.resume_queue(args.queue, resumed_by=who))
    return 0


def _pause(args: argparse.Namespace) -> int:
    return _pause_or_resume(args, True)


def _resume(args: argparse.Namespace) -> int:
    return _pause_or_resume(args, False)


TASK_COLUMNS: tuple[Column, ...] = (
    ("TASK", lambda t: t["task_id"]), ("QUEUE", lambda t: t["queue"]), ("KIND", lambda t: t["kind"]),
    ("STATE", lambda t: t["state"]), ("PRIORITY", lambda t: t["priority"]), ("ATTEMPT", lambda t: t["attempt"]),
    ("CREATED", lambda t: t["created_at"]),
)
WORKER_COLUMNS: tuple[Column, ...] = (
    ("INSTANCE", lambda w: w["instance_id"]), ("NAME", lambda w: w["worker_name"]), ("STATE", lambda w: w["state"]),
    ("CAPACITY", lambda w: w["capacity"]), ("LEASES", lambda w: w["active_leases"]),
    ("QUEUES", lambda w: [s["queue"] for s in w["subscriptions"]]), ("NODE", lambda w: w["node_id"]),
    ("REGISTERED", lambda w: w["registered_at"]),
)
NODE_COLUMNS: tuple[Column, ...] = (
    ("NODE", lambda n: n["node_id"]), ("STATE", lambda n: n["state"]), ("HOST", lambda n: n["host"]),
    ("PID", lambda n: n["pid"]), ("SESSIONS", lambda n: n["open_sessions"]),
    ("HEARTBEAT", lambda n: n["heartbeat_at"]), ("LOST_BY", lambda n: n["lost_by"]),
)
QUEUE_COLUMNS: tuple[Column, ...] = (
    ("QUEUE", lambda q: q["queue"]),
    *((state, (lambda q, state=state: q["states"].get(state, 0))) for state in queries.TASK_STATES),
    ("OLDEST_READY_S", lambda q: q["oldest_ready_age_s"]), ("STATE", lambda q: q["state"]),
)


__all__ = ["register"]
