"""Keep the ``runs`` names of the chart files in step with the functions the store registers.

The chart files name each trigger's store function by module path, so a
function that moves to another module leaves its chart stale.
``pulse-trio statecharts functions`` hands :func:`differences` what the
registry holds (the charts package never imports the store) and, with
``--write``, :func:`rewrite` puts the registered names into the files.
Only ``runs`` is rewritten: a different kind, or a trigger with no function,
is a change to the design and is made by hand.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

from pulse_trio.charts.loader import ChartError, ChartSpec, parse_chart


@dataclasses.dataclass(frozen=True, slots=True)
class Live:
    """What the store registers for one (chart, trigger): ``module:function`` and its kind."""

    runs: str
    entry: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Difference:
    chart: str
    trigger: str
    #: ``runs``: only the name differs (``--write`` mends it); ``kind`` or ``missing``: by hand.
    what: str
    declared: str
    live: str

    def __str__(self) -> str:
        where = f"statecharts/{self.chart}.json functions.{self.trigger}"
        if self.what == "missing":
            return f"{where}: the chart names {self.declared!r}, but the store registers no function"
        return f"{where}.{self.what}: the chart says {self.declared!r}, the store registers {self.live!r}"


def differences(specs: Mapping[str, ChartSpec], live: Mapping[tuple[str, str], Live]) -> list[Difference]:
    """Where the chart files and the registry disagree, chart by chart, trigger by trigger."""
    found = []
    for name in sorted(specs):
        for trigger, fn in specs[name].functions.items():
            registered = live.get((name, trigger))
            if registered is None:
                found.append(Difference(name, trigger, "missing", fn.runs, ""))
                continue
            if registered.runs != fn.runs:
                found.append(Difference(name, trigger, "runs", fn.runs, registered.runs))
            if registered.entry != fn.entry:
                kinds = {True: "entry", False: "step"}
                found.append(Difference(name, trigger, "kind", kinds[fn.entry], kinds[registered.entry]))
    return found


def rewrite(folder: Path, found: list[Difference]) -> list[Path]:
    """Put the registered ``runs`` names into the chart files, leaving every other byte as it was."""
    by_chart: dict[str, list[Difference]] = {}
    for d in found:
        if d.what == "runs":
            by_chart.setdefault(d.chart, []).append(d)
    written = []
    for chart, diffs in sorted(by_chart.items()):
        path = folder / f"{chart}.json"
        text = path.read_text("utf-8")
        for d in diffs:
            old, new = f'"runs": {json.dumps(d.declared)}', f'"runs": {json.dumps(d.live)}'
            if text.count(old) != 1:
                raise ChartError(f"{path}: {old} is not written exactly once; edit functions.{d.trigger} by hand")
            text = text.replace(old, new)
        spec = parse_chart(json.loads(text), origin=path.name)
        assert all(spec.functions[d.trigger].runs == d.live for d in diffs)
        path.write_text(text, "utf-8")
        written.append(path)
    return written
