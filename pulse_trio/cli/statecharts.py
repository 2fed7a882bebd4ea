"""`pulse-trio statecharts render`: diagrams in docs/ from statecharts/."""

from __future__ import annotations

import argparse


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("statecharts", help="work with the statechart declarations")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    render = actions.add_parser("render", help="write docs/statecharts/<chart>.md from statecharts/")
    render.add_argument("rest", nargs=argparse.REMAINDER, help="options for the renderer")
    render.set_defaults(run=_render)


def _render(args: argparse.Namespace) -> int:
    from pulse_trio.charts.render import main as render_main

    return render_main(list(args.rest))
