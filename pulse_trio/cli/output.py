"""How every command prints: one compact JSON object on stdout, or a table for people.

JSON is the default everywhere (``ensure_ascii=False``, no spaces), so a
script reads every command the same way; ``--format table`` is offered where
people read lists (queues, workers, nodes, task list, settings show).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

FORMATS = ("json", "table")

#: A table column: its header and how to read the cell from one row.
Column = tuple[str, Callable[[Mapping[str, Any]], Any]]


def add_format_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=FORMATS, default="json",
                        help="json: one JSON object on stdout, for scripts; table: aligned columns, for people")


def print_json(value: object) -> None:
    write_json_text(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def write_json_text(text: str) -> None:
    """JSON text made elsewhere (numbers kept digit for digit), in the same compact style."""
    sys.stdout.write(compact(text) + "\n")
    sys.stdout.flush()


def compact(text: str) -> str:
    """``text`` without the whitespace between JSON tokens; strings and number texts untouched."""
    out: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif ch not in " \t\r\n":
            out.append(ch)
    return "".join(out)


def with_field(text: str, name: str, value: object) -> str:
    """A JSON object's text with one more field at its end (the rest kept as it is)."""
    body = compact(text)
    return f"{body[:-1]},{json.dumps(name)}:{json.dumps(value)}}}"


def print_table(rows: Iterable[Mapping[str, Any]], columns: Sequence[Column]) -> None:
    """Aligned columns with a header; an empty cell is '-'."""
    cells = [[header for header, _ in columns]]
    for row in rows:
        cells.append([_cell(read(row)) for _, read in columns])
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        sys.stdout.write("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() + "\n")
    sys.stdout.flush()


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return json.dumps(value)  # every digit, as the JSON output prints it: a table is no place to round
    if isinstance(value, (list, tuple)):
        return ",".join(_cell(v) for v in value) or "-"
    return str(value)
