"""`pulse-trio statecharts render`: diagrams in docs/ from statecharts/."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("statecharts", help="work with the statechart declarations")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    render = actions.add_parser("render", help="write docs/statecharts/<chart>.md from statecharts/")
    render.add_argument("--output", type=Path, default=Path("docs/statecharts"), help="folder for the pages")
    render.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    render.add_argument("--no-svg", action="store_true", help="skip the Graphviz .svg even if dot is installed")
    render.add_argument("charts", nargs="*", metavar="CHART", help="chart names (default: all)")
    render.set_defaults(run=_render)


def _render(args: argparse.Namespace) -> int:
    from pulse_trio.charts.render import main as render_main

    argv = ["--output", str(args.output), *(["--check"] if args.check else []),
            *(["--no-svg"] if args.no_svg else []), *args.charts]
    return render_main(argv)
