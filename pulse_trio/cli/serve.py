"""`pulse-trio serve`: run one service instance until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import sys

from pulse_trio import config as cfg
from pulse_trio.cli.common import CommandFailed, database, run_guarded


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("serve", help="run the worker endpoint, dispatcher, timers and HTTP API")
    cfg.add_options(parser)
    parser.set_defaults(run=run_guarded(_serve))


def _serve(args: argparse.Namespace) -> int:
    settings = cfg.settings_from_args(args)
    if (settings.tls_cert is None) != (settings.tls_key is None):
        raise CommandFailed("--tls-cert and --tls-key go together", 2)
    import trio

    from pulse_trio.server.service import serve

    with database(args) as target:
        sys.stderr.write(f"pulse-trio: database {target.url()}\n")
        trio.run(serve, settings, target)
    return 0
