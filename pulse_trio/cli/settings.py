"""`pulse-trio settings show|set|weight|weights`: the settings every process of the cluster shares.

``show`` prints every cluster setting as one JSON object; ``set NAME VALUE
[NAME VALUE ...]`` changes one or several in one transaction (seconds, or
``lease-ttl`` for permit_quarantine) and prints them all after the change.
``set task_retention SECONDS --queue Q`` gives one queue a retention of its
own (``cluster``: follow the cluster's again) and prints that queue.
Running ``serve`` instances apply a change within their refresh interval
(docs/operations.md). Exit codes: 2 for an unknown name or a value outside
its bounds (nothing is written), 1 when the cluster refuses the combination.
``weight KEY N`` gives a fairness key a weight (default 1) and ``weights``
lists the keys given one (docs/priority-and-fairness.md §5).
"""

from __future__ import annotations

import argparse
import socket

from pulse_trio import cluster_settings as cs
from pulse_trio.cli.common import add_database_options, database, fail, run_guarded
from pulse_trio.cli.output import Column, add_format_option, print_json, print_table
from pulse_trio.client import Client, ClientError
from pulse_trio.client.producer import check_name, check_weight, parse_settings


def register(commands: argparse._SubParsersAction) -> None:
    group = commands.add_parser("settings", help="show or change the settings every serve process shares")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = actions.add_parser("show", help="print every cluster setting: value, default, who set it and when")
    add_format_option(show)
    add_database_options(show)
    show.set_defaults(run=run_guarded(_show))
    change = actions.add_parser("set", help="change cluster settings in one transaction",
                                description="Names: " + "; ".join(
                                    f"{s.name} ({s.help}" + (f"; {s.null_word!r}: {s.null_meaning}" if s.nullable
                                                             else "") + ")" for s in cs.SETTINGS))
    change.add_argument("pairs", nargs="+", metavar="NAME VALUE", help="a setting and its value in seconds")
    change.add_argument("--queue", help="task_retention only: this queue's own retention (`cluster`: follow the "
                                        "cluster's again); the cluster's value is left as it is")
    add_database_options(change)
    change.set_defaults(run=run_guarded(_set))
    weight = actions.add_parser("weight", help="give a fairness key a weight (1-10000, default 1)",
                                description="The keys with work waiting in a queue share it in proportion to "
                                            "their weights; tasks placed after the change use it.")
    weight.add_argument("fairness_key", metavar="KEY", help="the fairness key (1-128 printable ASCII characters)")
    weight.add_argument("weight", metavar="WEIGHT", help="a whole number from 1 to 10000")
    add_database_options(weight)
    weight.set_defaults(run=run_guarded(_weight))
    weights = actions.add_parser("weights", help="print the fairness keys given a weight (others weigh 1)")
    add_database_options(weights)
    weights.set_defaults(run=run_guarded(_weights))


def _show(args: argparse.Namespace) -> int:
    with database(args) as target, Client(target, pool_size=1) as client:
        settings = client.settings()
    if args.format == "table":
        print_table(settings.values(), SETTING_COLUMNS)
    else:
        print_json({"settings": settings})
    return 0


def _seconds(setting: dict, field: str) -> object:
    """A value in seconds, or the word ``set`` takes for null (``lease-ttl``): `-` would read as no value at all."""
    value = setting[field]
    return cs.BY_NAME[setting["name"]].null_word if value is None else value


SETTING_COLUMNS: tuple[Column, ...] = (
    ("NAME", lambda s: s["name"]), ("VALUE_S", lambda s: _seconds(s, "value")),
    ("DEFAULT_S", lambda s: _seconds(s, "default")),
    ("STATE", lambda s: s["state"]), ("UPDATED_BY", lambda s: s["updated_by"]),
    ("UPDATED_AT", lambda s: s["updated_at"]),
)


def _set(args: argparse.Namespace) -> int:
    if len(args.pairs) % 2:
        fail("give NAME VALUE pairs: a value is missing", 2)
    pairs = dict(zip(args.pairs[::2], args.pairs[1::2]))
    if len(pairs) * 2 != len(args.pairs):
        fail("a setting is named twice", 2)
    if args.queue is not None:
        return _set_queue(args, pairs)
    try:
        parse_settings(pairs)  # bad input writes nothing, and never reaches the database
    except ClientError as exc:
        fail(exc.message, 2)
    with database(args) as target, Client(target, pool_size=1) as client:
        try:
            print_json({"settings": client.set_settings(pairs, updated_by=f"cli@{socket.gethostname()}")})
        except ClientError as exc:
            fail(exc.message)
    return 0


#: ``settings set task_retention cluster --queue Q``: the queue follows the cluster's retention again.
FOLLOW_CLUSTER = "cluster"


def _set_queue(args: argparse.Namespace, pairs: dict[str, str]) -> int:
    """``--queue Q``: one queue's own task_retention (chart ``queue``, trigger ``retain``)."""
    if list(pairs) != ["task_retention"]:
        fail("--queue sets one queue's own task_retention only: settings set task_retention SECONDS --queue Q", 2)
    text = pairs["task_retention"]
    value = None if text.strip().lower() == FOLLOW_CLUSTER else text
    try:
        check_name("queue", args.queue)
        if value is not None:
            parse_settings({"task_retention": value})
    except ClientError as exc:
        fail(exc.message, 2)
    with database(args) as target, Client(target, pool_size=1) as client:
        print_json(client.set_queue_retention(args.queue, value, updated_by=f"cli@{socket.gethostname()}"))
    return 0


def _weight(args: argparse.Namespace) -> int:
    try:
        key, value = check_weight(args.fairness_key, args.weight)
    except ClientError as exc:
        fail(exc.message, 2)
    with database(args) as target, Client(target, pool_size=1) as client:
        print_json(client.set_fairness_weight(key, value, updated_by=f"cli@{socket.gethostname()}"))
    return 0


def _weights(args: argparse.Namespace) -> int:
    with database(args) as target, Client(target, pool_size=1) as client:
        print_json({"fairness_weights": client.fairness_weights()})
    return 0


__all__ = ["register"]
