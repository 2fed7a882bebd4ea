"""`pulse-trio migrate`: bring the database to this code's schema version."""

from __future__ import annotations

import argparse

from pulse_trio.cli.common import CommandFailed, add_database_options, database, print_json, run_guarded
from pulse_trio.store.schema.migrate import MigrationError, code_version, migrate


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("migrate", help="apply pending schema migrations (a no-op when current); "
                                                 "creates the managed database if there is none")
    add_database_options(parser)
    parser.set_defaults(run=run_guarded(_migrate))


def _migrate(args: argparse.Namespace) -> int:
    with database(args, ensure_schema=False, create=True) as target:
        try:
            applied = migrate(target)
        except MigrationError as exc:
            raise CommandFailed(str(exc)) from None
    print_json({"schema_version": code_version(), "applied": [f"{m.version:04d}_{m.name}" for m in applied]})
    return 0
