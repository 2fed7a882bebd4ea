"""The state sets the store, the views and the dashboard filter on, derived from the chart files.

A query that lists "the live leases" or "the terminal tasks" must agree with
the chart that moves them; deriving the sets here means a state added to
``statecharts/*.json`` reaches every filter at once. A state is *terminal*
when no transition leaves it for another state a row can be in (a purge,
back to ``NONE``, deletes the row: the end of its record, not a step of
its life), *live* when it is neither the initial ``NONE`` (no row yet) nor
terminal.
"""

from __future__ import annotations

from pulse_trio.charts import CHARTS, Chart


def _row_states(c: Chart) -> tuple[str, ...]:
    """Every state a row can be in (the initial NONE is the absence of a row)."""
    return tuple(s for s in c.spec.states if s != "NONE")


def terminal_states(c: Chart) -> tuple[str, ...]:
    """States no transition leaves but a purge (back to NONE, the row deleted), in declaration order."""
    sources = {t.source for t in c.spec.transitions if t.dest != "NONE"}
    return tuple(s for s in _row_states(c) if s not in sources)


def live_states(c: Chart) -> tuple[str, ...]:
    """States a row can be in that some transition still leaves, in declaration order."""
    terminal = set(terminal_states(c))
    return tuple(s for s in _row_states(c) if s not in terminal)


def dests_of(c: Chart, trigger: str) -> tuple[str, ...]:
    """Where ``trigger`` can lead, in declaration order of the states."""
    dests = {t.dest for t in c.transitions_for(trigger)}
    return tuple(s for s in c.spec.states if s in dests)


def sql_list(states: tuple[str, ...] | frozenset[str]) -> str:
    """``('A', 'B')``: a set of state names as an SQL list (names are identifiers, never user input)."""
    return "(" + ", ".join(f"'{s}'" for s in states) + ")"


_TASK, _LEASE, _INSTANCE = CHARTS["task"], CHARTS["lease"], CHARTS["instance"]

#: Every state a task row can be in.
TASK_STATES: tuple[str, ...] = _row_states(_TASK)
#: Tasks that reached their outcome.
TERMINAL_TASK_STATES: frozenset[str] = frozenset(terminal_states(_TASK))
#: Tasks waiting for a worker: where submit puts them (READY, SCHEDULED).
WAITING_TASK_STATES: tuple[str, ...] = dests_of(_TASK, "submit")
#: Leases that still hold their task (offered or running).
LIVE_LEASE_STATES: tuple[str, ...] = live_states(_LEASE)
#: Worker sessions still open (ACTIVE, DRAINING).
LIVE_SESSION_STATES: tuple[str, ...] = live_states(_INSTANCE)
#: Worker sessions that take no new work (DRAINING).
DRAINING_SESSION_STATES: tuple[str, ...] = dests_of(_INSTANCE, "operator_drain")
#: Serve processes not stopped (ALIVE, LOST): what runs, and what died and was noticed.
LIVE_NODE_STATES: tuple[str, ...] = live_states(CHARTS["node"])
#: Key permits their key's counter counts (HELD).
HELD_PERMIT_STATES: tuple[str, ...] = dests_of(CHARTS["key_permit"], "acquire")
#: What an operator can make a queue (ACTIVE, PAUSED).
QUEUE_STATES: tuple[str, ...] = _row_states(CHARTS["queue"])

__all__ = ["DRAINING_SESSION_STATES", "HELD_PERMIT_STATES", "LIVE_LEASE_STATES", "LIVE_NODE_STATES",
           "LIVE_SESSION_STATES", "QUEUE_STATES", "TASK_STATES", "TERMINAL_TASK_STATES", "WAITING_TASK_STATES",
           "dests_of", "live_states", "sql_list", "terminal_states"]
