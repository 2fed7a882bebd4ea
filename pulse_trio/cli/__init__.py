"""The `pulse-trio` command line: one sub-module per command group.

Every command that prints a result prints one JSON object (or, for
`token create`, the token alone) on stdout; messages for people go to
stderr. Exit codes: 0 done, 1 refused or not found, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pulse_trio import __version__
from pulse_trio.cli import bench, database, serve, settings, statecharts, tasks, tokens, worker

_GROUPS = (serve, database, tokens, tasks, settings, statecharts, bench, worker)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pulse-trio", description="Durable task dispatch over WebSocket leases.")
    parser.add_argument("--version", action="version", version=f"pulse-trio {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in _GROUPS:
        group.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    sys.exit(main())
