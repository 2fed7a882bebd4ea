"""`pulse-trio statecharts render`: diagrams in docs/ from statecharts/.

The pages name the store's function behind each transition and the code of
each guard: this command reads them from the store's registry and hands
them to the renderer, so the charts package never imports the store.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pulse_trio.cli.common import EXIT_REFUSED


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("statecharts", help="work with the statechart declarations")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    render = actions.add_parser("render", help="write docs/statecharts/<chart>.md from statecharts/")
    render.add_argument("--output", type=Path, default=Path("docs/statecharts"), help="folder for the pages")
    render.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    render.add_argument("--no-svg", action="store_true", help="skip the Graphviz .svg even if dot is installed")
    render.add_argument("charts", nargs="*", metavar="CHART", help="chart names (default: all)")
    render.set_defaults(run=_render, parser=render)


def store_implementations():
    """The store's functions and guards, as the renderer takes them."""
    from pulse_trio.charts.render import Implementations
    from pulse_trio.store import GUARDS

    return Implementations(guards=dict(GUARDS))


def _render(args: argparse.Namespace) -> int:
    from pulse_trio.charts import CHARTS
    from pulse_trio.charts.render import render

    flags = [c for c in args.charts if c.startswith("--")]
    if flags:  # `render -- --check`: flags after the separator still count as flags
        args = args.parser.parse_args([*(c for c in args.charts if not c.startswith("--")), *flags,
                                       "--output", str(args.output), *(["--check"] if args.check else []),
                                       *(["--no-svg"] if args.no_svg else [])])
    unknown = [n for n in args.charts if n not in CHARTS]
    if unknown:
        args.parser.error(f"unknown chart(s): {', '.join(unknown)}; known: {', '.join(sorted(CHARTS))}")
    stale = render(args.output, store_implementations(), args.charts or None, check=args.check,
                   svg=not args.no_svg)
    if args.check:
        for path in stale:
            print(f"stale: {path} (run `pulse-trio statecharts render`)", file=sys.stderr)
        return EXIT_REFUSED if stale else 0
    for path in stale:
        print(f"wrote {path}")
    return 0
