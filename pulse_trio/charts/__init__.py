"""The lifecycles of pulse-trio, loaded from ``statecharts/*.json``.

``CHARTS`` holds one chart per file, built once at import: a plain-data
:class:`Chart` for a persistent lifecycle, a :class:`MachineChart` (with
its ``transitions.Machine``) for the in-memory ``session``. Nothing here imports the store: transaction functions
register against these charts, never the other way round.
"""

from __future__ import annotations

from pulse_trio.charts.loader import (
    Chart, ChartError, ChartModel, ChartSpec, MachineChart, Transition, build, load_specs, parse_chart,
)

CHARTS: dict[str, Chart] = {name: build(spec) for name, spec in load_specs().items()}


def chart(name: str) -> Chart:
    """The chart called ``name``; a ChartError names the ones that exist."""
    try:
        return CHARTS[name]
    except KeyError:
        raise ChartError(f"no chart {name!r}; known: {', '.join(sorted(CHARTS))}") from None


def machine_chart(name: str) -> MachineChart:
    """The in-memory chart called ``name`` (the one kind that fires through a ``Machine``)."""
    found = chart(name)
    if not isinstance(found, MachineChart):
        raise ChartError(f"chart {name!r} is persistent: plain data, no machine")
    return found


def persistent_charts() -> list[Chart]:
    return [c for c in CHARTS.values() if c.spec.persistent]


__all__ = ["CHARTS", "Chart", "ChartError", "ChartModel", "ChartSpec", "MachineChart", "Transition", "chart",
           "load_specs", "machine_chart", "parse_chart", "persistent_charts"]
