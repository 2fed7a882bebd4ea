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

import re

from pulse_trio.charts import CHARTS, Chart, ChartError


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


_TASK_STATE_TEST = re.compile(r"\btask\.state == task\.([A-Z_]+)\b(?: && lease\.state == lease\.([A-Z_]+)\b)?")


def task_states_guarded(c: Chart, trigger: str, source: str) -> tuple[str, ...]:
    """The task states in which ``trigger`` from ``source`` can fire, read from what its guards mean.

    Each guard's meaning (the chart's ``model.guards``) names the task
    states it admits (``task.state == task.READY || ...``); a transition
    fires where all its guards admit the state. A guard that names no task
    state is a ChartError at import: this set is never guessed.
    """
    meanings = c.spec.model.guards if c.spec.model else {}
    found: set[str] = set()
    for t in c.declared(trigger, source):
        admitted = [{lease or task for task, lease in _TASK_STATE_TEST.findall(meanings.get(g, ""))} for g in t.guards]
        if not admitted or not all(admitted):
            raise ChartError(f"{c.name}.{trigger} from {source}: a guard that names no task state")
        found |= set.intersection(*admitted)
    return tuple(s for s in public_task_states() if s in found)


def public_task_states() -> tuple[str, ...]:
    """The task states a reader sees: the row's, with the held one told apart by its live lease.

    A task row stays in the state its offer put it in (OFFERED) while its
    lease lives, started or not (the start writes the lease alone), so the
    reader's OFFERED and RUNNING are the live lease's own states.
    """
    out: list[str] = []
    for s in _row_states(CHARTS["task"]):
        out += LIVE_LEASE_STATES if s == HELD_TASK_STATE else [s]
    return tuple(out)


def public_state(row_state: str, live_lease_state: str | None) -> str:
    """The state a reader sees a task in: a held row's is its live lease's (OFFERED or RUNNING)."""
    if row_state == HELD_TASK_STATE and live_lease_state is not None:
        return live_lease_state
    return row_state


def sql_list(states: tuple[str, ...] | frozenset[str]) -> str:
    """``('A', 'B')``: a set of state names as an SQL list (names are identifiers, never user input)."""
    return "(" + ", ".join(f"'{s}'" for s in states) + ")"


def sql_rows(states: tuple[str, ...], column: str = "state") -> str:
    """``(SELECT 'A' AS state UNION ALL SELECT 'B')``: a set of state names as a one-column table.

    A join reaches an index on ``(key, state, …)`` by equality on both parts
    only when the state comes from a table: with ``state IN (…)`` in a join
    the inner table's lookup uses the key alone and reads every row the key
    ever had (every finished lease of a session), not just the few in these
    states. Join it with ``STRAIGHT_JOIN`` before the indexed table: on small
    tables the optimizer would otherwise read the indexed table first.
    """
    return "(" + " UNION ALL ".join(f"SELECT '{s}' AS {column}" for s in states) + ")"


_TASK, _LEASE, _INSTANCE = CHARTS["task"], CHARTS["lease"], CHARTS["instance"]

#: Every state a task row can be in.
TASK_ROW_STATES: tuple[str, ...] = _row_states(_TASK)
#: The row state a live lease holds its task in (OFFERED, started or not).
HELD_TASK_STATE: str = dests_of(_TASK, "offer")[0]
#: The state of a started lease (RUNNING): a reader sees its held task RUNNING, at the lease's attempt.
STARTED_LEASE_STATE: str = dests_of(_LEASE, "start")[0]
#: Tasks that reached their outcome.
TERMINAL_TASK_STATES: frozenset[str] = frozenset(terminal_states(_TASK))
#: Tasks waiting for a worker: where submit puts them (READY, SCHEDULED).
WAITING_TASK_STATES: tuple[str, ...] = dests_of(_TASK, "submit")
#: Leases that still hold their task (offered or running).
LIVE_LEASE_STATES: tuple[str, ...] = live_states(_LEASE)
#: Every state a reader sees a task in: the row's, a held one as its live lease's (OFFERED, RUNNING).
TASK_STATES: tuple[str, ...] = public_task_states()
#: Offers revoked by a cancel (REVOKED): a cancel push may still be due to their session.
REVOKED_LEASE_STATES: tuple[str, ...] = dests_of(_LEASE, "revoke")
#: What ``leases.hold`` (and so ``leases_owner``) files a lease under, by its state: LIVE while it
#: holds its task, REVOKED once revoked (until its holder is told: cancellation.notify clears the
#: revoked lease's ``cancel_requested_at``, and the column files it under nothing then), nothing
#: (NULL) after any other end. The generated column spells this out in SQL;
#: tests/store/test_generated_states.py holds the two together.
LIVE_HOLD, REVOKED_HOLD = "LIVE", "REVOKED"
LEASE_HOLDS: dict[str, str] = {**dict.fromkeys(LIVE_LEASE_STATES, LIVE_HOLD),
                               **dict.fromkeys(REVOKED_LEASE_STATES, REVOKED_HOLD)}
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
#: The cancel-intent states a cancel request moves on from (only NONE: a second request changes nothing).
CANCEL_REQUEST_FROM: tuple[str, ...] = tuple(dict.fromkeys(
    t.source for t in CHARTS["cancellation"].transitions_for("request")))
#: The task states a cancel request acts on (SCHEDULED, READY, OFFERED at once; RUNNING through its worker).
CANCEL_TASK_STATES: tuple[str, ...] = tuple(dict.fromkeys(
    s for source in CANCEL_REQUEST_FROM for s in task_states_guarded(CHARTS["cancellation"], "request", source)))

__all__ = ["CANCEL_REQUEST_FROM", "CANCEL_TASK_STATES", "DRAINING_SESSION_STATES", "HELD_PERMIT_STATES", "HELD_TASK_STATE",
           "LEASE_HOLDS", "LIVE_HOLD", "LIVE_LEASE_STATES", "LIVE_NODE_STATES", "LIVE_SESSION_STATES", "QUEUE_STATES",
           "REVOKED_HOLD", "REVOKED_LEASE_STATES", "STARTED_LEASE_STATE", "TASK_ROW_STATES", "TASK_STATES", "TERMINAL_TASK_STATES", "WAITING_TASK_STATES", "dests_of", "live_states", "public_state", "public_task_states", "sql_list", "task_states_guarded",
           "terminal_states"]
