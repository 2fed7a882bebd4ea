"""`pulse-trio token create|list|revoke`."""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from pulse_trio import tokens
from pulse_trio.bearer import parse_bearer
from pulse_trio.store.token import tokens as stored_tokens
from pulse_trio.cli.common import EXIT_NOT_FOUND, add_database_options, database, fail, print_json, run_guarded
from pulse_trio.contract.grammar import is_queue
from pulse_trio.store.engine.writer import connect

def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("token", help="create, list and revoke bearer tokens")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = actions.add_parser("create", help="print a new token (shown only once)")
    create.add_argument("--role", choices=tokens.ROLES, required=True,
                        help="worker: connect to /v1/worker; producer: submit and read; operator: everything")
    create.add_argument("--queue", action="append", default=[], metavar="Q",
                        help="a queue the token may use (repeatable; none means every queue)")
    create.add_argument("--allow", default="", metavar="ACTIONS",
                        help=f"actions a producer token may take beyond its role, comma-separated "
                             f"({', '.join(tokens.GRANTS)}); only within its --queue queues")
    create.add_argument("--label", default="", help="a note for operators")
    add_database_options(create)
    create.set_defaults(run=run_guarded(_create))

    listing = actions.add_parser("list", help="list tokens (never their secrets)")
    add_database_options(listing)
    listing.set_defaults(run=run_guarded(_list))

    revoke = actions.add_parser("revoke", help="revoke a token by its id")
    revoke.add_argument("token_id", metavar="TOKEN_ID", help="the token's id (tok_…, see `token list`), never its secret")
    add_database_options(revoke)
    revoke.set_defaults(run=run_guarded(_revoke))


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _create(args: argparse.Namespace) -> int:
    for queue in args.queue:
        if not is_queue(queue):
            fail(f"invalid queue name {queue!r}", 2)
    try:
        tokens.check_label(args.label)
    except ValueError as exc:
        fail(f"--label: {exc}", 2)
    allow = [name.strip() for name in args.allow.split(",") if name.strip()]
    try:
        tokens.check_grants(args.role, allow)
    except ValueError as exc:
        fail(str(exc), 2)
    with database(args, create=True) as target:
        conn = connect(target)
        try:
            token, _info = stored_tokens.create_token(conn, role=args.role, queues=args.queue, label=args.label,
                                                      now=_now(), allow=allow)
        finally:
            conn.close()
    sys.stdout.write(token + "\n")
    return 0


def _list(args: argparse.Namespace) -> int:
    with database(args) as target:
        conn = connect(target)
        try:
            found = stored_tokens.list_tokens(conn)
        finally:
            conn.close()
    print_json({"tokens": [t.as_json() for t in found]})
    return 0


def _revoke(args: argparse.Namespace) -> int:
    given = args.token_id.strip()
    if (parse_bearer(given) or given).startswith(tokens.TOKEN_PREFIX):  # the secret: never shown, never looked up
        fail(f"no token has that id: it is a token ({tokens.TOKEN_PREFIX}…, not shown here), not a token's id "
             f"({tokens.TOKEN_ID_PREFIX}…, see `pulse-trio token list`)", EXIT_NOT_FOUND)
    if not tokens.could_be_token_id(given):  # not shown either: it may hold a secret in another shape
        fail(f"no token has that id: a token's id is {tokens.TOKEN_ID_PREFIX} and hex digits "
             "(see `pulse-trio token list`)", EXIT_NOT_FOUND)
    with database(args) as target:
        conn = connect(target)
        try:
            info = stored_tokens.revoke_token(conn, given, now=_now())
        finally:
            conn.close()
    if info is None:
        fail(f"no token with id {given!r}", EXIT_NOT_FOUND)
    print_json(info.as_json())
    return 0
