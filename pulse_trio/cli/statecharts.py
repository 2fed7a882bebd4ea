"""`pulse-trio statecharts render`: diagrams in docs/ from statecharts/; `statecharts functions`: their names.

The pages give the code of each guard: this command reads it from the
store's registry and hands it to the renderer, so the charts package never
imports the store. The function behind each transition is named by the
chart files themselves; `statecharts functions` compares those names with
the registry and, with `--write`, rewrites them after a function moved.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulse_trio.cli.common import EXIT_REFUSED

if TYPE_CHECKING:
    from pulse_trio.charts.function_names import Live


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("statecharts", help="work with the statechart declarations")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    render = actions.add_parser("render", help="write docs/statecharts/<chart>.md from statecharts/")
    render.add_argument("--output", type=Path, default=Path("docs/statecharts"), help="folder for the pages")
    render.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    render.add_argument("--no-svg", action="store_true", help="skip the Graphviz .svg even if dot is installed")
    render.add_argument("charts", nargs="*", metavar="CHART", help="chart names (default: all)")
    render.set_defaults(run=_render, parser=render)
    functions = actions.add_parser(
        "functions", help="compare each chart's store function names with the registry (--write: mend them)")
    mode = functions.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="write nothing; exit 1 on a difference (the default)")
    mode.add_argument("--write", action="store_true", help="rewrite each `runs` to the registered function")
    functions.set_defaults(run=_functions)


def store_implementations():
    """The store's guards, as the renderer takes them (the chart files name the functions)."""
    from pulse_trio.charts.render import Implementations
    from pulse_trio.store import GUARDS

    return Implementations(guards=dict(GUARDS))


def live_name(function: Callable[..., Any]) -> str:
    """How a chart file names a registered function: ``module:function``."""
    return f"{function.__module__}:{function.__qualname__}"


def store_functions() -> dict[tuple[str, str], Live]:
    """What the store registers, as ``pulse_trio.charts.function_names`` compares it."""
    from pulse_trio.charts.function_names import Live
    from pulse_trio.store import REGISTRY

    return {key: Live(live_name(r.function), r.entry) for key, r in REGISTRY.items()}


def _functions(args: argparse.Namespace) -> int:
    from pulse_trio.charts import load_specs
    from pulse_trio.charts.function_names import differences, rewrite
    from pulse_trio.charts.loader import definitions

    found = differences(load_specs(), store_functions())
    if args.write:
        written = rewrite(definitions(), found)
        for path in written:
            print(f"wrote {path}")
        if written:
            print("now run `pulse-trio statecharts render`: the pages name the functions too")
        found = [d for d in found if d.what != "runs"]
    for d in found:
        print(d, file=sys.stderr)
    if found and not args.write:
        print("`pulse-trio statecharts functions --write` mends the runs names", file=sys.stderr)
    return EXIT_REFUSED if found else 0


def _render(args: argparse.Namespace) -> int:
    from pulse_trio.charts import CHARTS, ChartError
    from pulse_trio.charts.render import render

    flags = [c for c in args.charts if c.startswith("--")]
    if flags:  # `render -- --check`: flags after the separator still count as flags
        args = args.parser.parse_args([*(c for c in args.charts if not c.startswith("--")), *flags,
                                       "--output", str(args.output), *(["--check"] if args.check else []),
                                       *(["--no-svg"] if args.no_svg else [])])
    unknown = [n for n in args.charts if n not in CHARTS]
    if unknown:
        args.parser.error(f"unknown chart(s): {', '.join(unknown)}; known: {', '.join(sorted(CHARTS))}")
    try:
        stale = render(args.output, store_implementations(), args.charts or None, check=args.check,
                       svg=not args.no_svg)
    except ChartError as exc:  # the pages' folder has no README.md to draw the table into
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    if args.check:
        for path in stale:
            print(f"stale: {path} (run `pulse-trio statecharts render`)", file=sys.stderr)
        return EXIT_REFUSED if stale else 0
    for path in stale:
        print(f"wrote {path}" if path.exists() else f"removed {path} (its chart file is gone)")
    return 0
