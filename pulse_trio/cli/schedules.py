"""`pulse-trio schedules create|list|show|pause|resume|delete`: recurring schedules.

Thin faces over :mod:`pulse_trio.client.schedules`. A field out of its
rule (a bad cron expression, an unknown time zone, an interval under one
second, ...) exits 2 naming the field, and nothing is written; an unknown
schedule exits 3; a name a live schedule holds exits 1. Every command prints
the schedule(s) as one compact JSON object (``list --format table`` for people).
A schedule is named by its id (``sch_…``) or by its name.
"""

from __future__ import annotations

import argparse
import socket
from decimal import Decimal, InvalidOperation
import sys
from pathlib import Path

from pulse_trio.cli.common import (EXIT_NOT_FOUND, EXIT_REFUSED, EXIT_USAGE, add_database_options, database, fail,
                                   run_guarded)
from pulse_trio.cli.output import Column, add_format_option, print_table, with_field, write_json_text
from pulse_trio.client import Client, ClientError
from pulse_trio.client.schedules import InvalidField, ScheduleNotFound, Schedules, build_schedule
from pulse_trio.schedule_timing import DEFAULT_CATCH_UP, MAX_CATCH_UP, MAX_INTERVAL_S, MISSED_POLICIES


def register(commands: argparse._SubParsersAction) -> None:
    group = commands.add_parser("schedules", help="recurring schedules: each due tick becomes one task")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = actions.add_parser("create", help="create a schedule (ACTIVE); prints it as JSON")
    create.add_argument("name", help="a name unique among live schedules (1-64 of a-z 0-9 _ . -)")
    create.add_argument("--queue", required=True, help="the queue its tasks go to")
    create.add_argument("--kind", required=True, help="the kind of its tasks")
    payload = create.add_mutually_exclusive_group()
    payload.add_argument("--payload", metavar="JSON", help="every task's input (default {})")
    payload.add_argument("--payload-file", metavar="PATH", help="read the payload from a file ('-' for stdin)")
    rule = create.add_mutually_exclusive_group(required=True)
    rule.add_argument("--cron", metavar="EXPR", help="five cron fields: minute hour day-of-month month day-of-week")
    rule.add_argument("--interval", metavar="SECONDS", help=f"every this many whole seconds, 1..{MAX_INTERVAL_S}")
    create.add_argument("--timezone", default="UTC", help="the IANA time zone the cron fields are read in")
    create.add_argument("--missed", default="skip", choices=MISSED_POLICIES,
                        help="after downtime: skip to the current tick, or catch up missed ticks")
    create.add_argument("--catch-up-limit", metavar="N",
                        help=f"with --missed catch_up: at most this many ticks fire at once, 1..{MAX_CATCH_UP} "
                             f"(default {DEFAULT_CATCH_UP})")
    create.add_argument("--priority", metavar="N", help="its tasks' priority (default 0)")
    create.add_argument("--max-attempts", metavar="N", help="its tasks' max attempts (default 3)")
    add_database_options(create)
    create.set_defaults(run=run_guarded(_create))

    listing = actions.add_parser("list", help="the schedules, by name")
    listing.add_argument("--all", action="store_true", help="deleted schedules too")
    add_format_option(listing)
    add_database_options(listing)
    listing.set_defaults(run=run_guarded(_list))

    show = actions.add_parser("show", help="one schedule, by id or name")
    show.add_argument("schedule", metavar="ID_OR_NAME", help="the schedule's id (sch_…, deleted ones too) or name")
    add_database_options(show)
    show.set_defaults(run=run_guarded(_show))

    for action, text in (("pause", "stop firing it (running tasks are untouched)"),
                         ("resume", "fire it again from the next tick after now"),
                         ("delete", "delete it: it never fires again and its name is free")):
        parser = actions.add_parser(action, help=text)
        parser.add_argument("schedule", metavar="ID_OR_NAME", help="the schedule's id (sch_…) or name")
        add_database_options(parser)
        parser.set_defaults(run=run_guarded(_change), change=action)


def _number(field: str, text: str | None) -> Decimal | None:
    """The number as typed, exact: the schedule's checks compare it to its bounds before any int().

    No int is made here: one of a number with a large exponent is as many digits of work.
    """
    if text is None:
        return None
    try:
        value = Decimal(text.strip()) if text.isascii() else Decimal("nan")
    except InvalidOperation:
        value = Decimal("nan")
    if not value.is_finite():
        raise InvalidField(field, f"must be a number (got {text[:40]!r})")
    return value


def _payload_json(args: argparse.Namespace) -> str | None:
    if args.payload_file is None:
        return args.payload
    try:
        return sys.stdin.read() if args.payload_file == "-" else Path(args.payload_file).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read the payload file: {exc}", EXIT_USAGE)


def _create(args: argparse.Namespace) -> int:
    try:  # every field is checked before the database is touched: exit 2, nothing written
        spec = build_schedule(
            name=args.name, queue=args.queue, kind=args.kind, payload_json=_payload_json(args), cron=args.cron,
            interval=_number("interval", args.interval), timezone=args.timezone, missed=args.missed,
            catch_up_limit=_number("catch_up_limit", args.catch_up_limit),
            priority=_number("priority", args.priority), max_attempts=_number("max_attempts", args.max_attempts))
    except InvalidField as exc:
        fail(f"{exc.field}: {exc.message}", EXIT_USAGE)
    with database(args) as target, Client(target, pool_size=1) as client:
        try:
            write_json_text(Schedules(client.store).create(spec, created_by=f"cli@{socket.gethostname()}").as_json_text())
        except ClientError as exc:
            fail(exc.message, EXIT_REFUSED)
    return 0


SCHEDULE_COLUMNS: tuple[Column, ...] = (
    ("NAME", lambda s: s["name"]), ("STATE", lambda s: s["state"]), ("QUEUE", lambda s: s["queue"]),
    ("KIND", lambda s: s["kind"]), ("RULE", lambda s: s["cron"] or f"every {s['interval']} s"),
    ("TIMEZONE", lambda s: s["timezone"]), ("MISSED", lambda s: s["missed"]),
    ("NEXT_FIRE_AT", lambda s: s["next_fire_at"]), ("FIRED", lambda s: s["fired_ticks"]),
    ("ID", lambda s: s["schedule_id"]),
)


def _list(args: argparse.Namespace) -> int:
    with database(args) as target, Client(target, pool_size=1) as client:
        found = Schedules(client.store).list(include_deleted=args.all)
    if args.format == "table":
        print_table([s.as_json() for s in found], SCHEDULE_COLUMNS)
    else:
        write_json_text('{"schedules":[' + ",".join(s.as_json_text() for s in found) + "]}")
    return 0


def _show(args: argparse.Namespace) -> int:
    with database(args) as target, Client(target, pool_size=1) as client:
        try:
            write_json_text(Schedules(client.store).get(args.schedule).as_json_text())
        except ScheduleNotFound as exc:
            fail(exc.message, EXIT_NOT_FOUND)
    return 0


def _change(args: argparse.Namespace) -> int:
    with database(args) as target, Client(target, pool_size=1) as client:
        try:
            schedule, changed = Schedules(client.store).change(args.change, args.schedule,
                                                               by=f"cli@{socket.gethostname()}")
        except ScheduleNotFound as exc:
            fail(exc.message, EXIT_NOT_FOUND)
    write_json_text(with_field(schedule.as_json_text(), "changed", changed))
    return 0


__all__ = ["register"]
