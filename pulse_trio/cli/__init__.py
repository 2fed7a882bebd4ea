"""The `pulse-trio` command line: one sub-module per command group.

Every command that prints a result prints one compact JSON object (or, for
`token create`, the token alone; or, with ``--format table``, a table) on
stdout; messages for people go to stderr, one line per failure. Exit codes
live in ``common.py`` and docs/operations.md §7.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from pulse_trio import __version__
from pulse_trio.cli import bench, database, schedules, serve, settings, statecharts, tasks, tokens, worker
from pulse_trio.cli.common import EXIT_INTERRUPTED, EXIT_REFUSED, CliParser

_GROUPS = (serve, database, tokens, tasks, settings, schedules, statecharts, bench, worker)


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(prog="pulse-trio", description="Durable task dispatch over WebSocket leases.",
                       epilog="Exit codes: 0 done, 1 refused, 2 bad arguments, 3 not found, 4 unreachable "
                              "(no database), 5 serve cannot listen, 70 serve or worker run crashed, 130 interrupted "
                              "(docs/operations.md §7).")
    parser.add_argument("--version", action="version", version=f"pulse-trio {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in _GROUPS:
        group.register(commands)
    return parser


def _take_sigint_as_an_interrupt() -> None:
    """Undo a launcher's SIG_IGN for SIGINT (a shell script's ``serve &``): the stop signals must stop.

    Python raises no KeyboardInterrupt for a SIGINT ignored at launch, and
    a start routes SIGTERM and SIGHUP through that interrupt (``cli.serve``):
    they would be lost. A running service's watcher already takes SIGINT
    whatever the launcher set (docs/operations.md §4).
    """
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: Sequence[str] | None = None) -> int:
    _take_sigint_as_an_interrupt()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main())
