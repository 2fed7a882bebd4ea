"""The worker's lifecycles of a lease and of its commands, read from ``statecharts/worker_*.json``.

Theory of operation: the chart files are the only place a phase of a
:class:`~pulse_trio.sdk.lease.LeaseRunner` or a state of one of its
commands is written down (``worker_lease``, ``worker_command``; rendered in
docs/statecharts/). Each becomes a :class:`Lifecycle` once, at import: its
state names (interned, so the runner compares them with ``is``) and a table
(trigger, state) -> next state. Moving is one dict lookup, and a move the
chart does not declare is a :class:`~pulse_trio.charts.ChartError` at once,
never a silent state: nothing is parsed or fired per frame or per command.
"""

from __future__ import annotations

import sys

from pulse_trio.charts import ChartError, chart


class Lifecycle:
    """One worker chart as a table: ``next(trigger, state)`` is where the chart sends ``state`` on ``trigger``."""

    __slots__ = ("name", "initial", "_states", "_next")

    def __init__(self, name: str) -> None:
        found = chart(name)
        if found.spec.side != "worker" or found.spec.guard_names:
            raise ChartError(f"chart {name!r} is not a guardless worker chart")
        self.name = name
        self._states = {s: sys.intern(s) for s in found.states}
        self.initial = self._states[found.spec.initial]
        self._next = {(t.trigger, self._states[t.source]): self._states[t.dest] for t in found.transitions}

    def state(self, name: str) -> str:
        """The chart's own name for ``name`` (a ChartError if the chart does not declare it)."""
        try:
            return self._states[name]
        except KeyError:
            raise ChartError(f"chart {self.name!r} has no state {name!r}") from None

    def next(self, trigger: str, state: str) -> str:
        """The state ``trigger`` leads ``state`` to; a ChartError where the chart declares no such move."""
        try:
            return self._next[trigger, state]
        except KeyError:
            raise ChartError(f"chart {self.name!r}: {trigger} is not declared from {state}") from None


#: A lease's phases in the runner (``LeaseRunner.phase``).
LEASE = Lifecycle("worker_lease")
#: The states of one command of a lease (``_Step.state``).
COMMAND = Lifecycle("worker_command")
