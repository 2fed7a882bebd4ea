"""The lifecycles of pulse-trio, loaded from ``statecharts/*.json``.

``CHARTS`` holds one :class:`Chart` (one ``transitions.Machine``) per file,
built once at import. Nothing here imports the store: transaction functions
register against these charts, never the other way round.
"""

from __future__ import annotations

from pulse_trio.charts.loader import Chart, ChartError, ChartSpec, Transition, load_specs, parse_chart

CHARTS: dict[str, Chart] = {name: Chart(spec) for name, spec in load_specs().items()}


def chart(name: str) -> Chart:
    """The chart called ``name``; a ChartError names the ones that exist."""
    try:
        return CHARTS[name]
    except KeyError:
        raise ChartError(f"no chart {name!r}; known: {', '.join(sorted(CHARTS))}") from None


def persistent_charts() -> list[Chart]:
    return [c for c in CHARTS.values() if c.spec.persistent]


__all__ = ["CHARTS", "Chart", "ChartError", "ChartSpec", "Transition", "chart", "load_specs",
           "parse_chart", "persistent_charts"]
