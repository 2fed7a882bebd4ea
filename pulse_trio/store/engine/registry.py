"""Transaction functions and guards, registered against the statecharts.

``@transition(chart, trigger)`` binds one function to one trigger of one
persistent chart; registering a second function for the same trigger, or a
trigger the chart does not declare, fails at import. The function's first
argument is the open :class:`~pulse_trio.store.engine.tx.Tx`.

* ``entry=True`` functions can be run by the facade as a transaction of
  their own (``await store.run(fn, ...)``).
* ``entry=False`` functions are *steps*: another chart's transition runs them
  on its own open ``Tx`` because both must commit together (task.offer inside
  lease.assign). A step still belongs to exactly one (chart, trigger).

``@guard(chart, name, code=...)`` implements a guard named in a chart. Guards
with a ``code`` refuse (that code goes on the wire); guards without one only
select between transitions of the same trigger (``"!name"`` negates).
:func:`decide` is the one place guards are evaluated (against the chart's
typed context, :mod:`pulse_trio.store.engine.guard_context`) and the chart read to
choose the destination state, so the data in ``statecharts/`` is what the
store enforces; :func:`~pulse_trio.store.engine.chart_write.move` then writes it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from pulse_trio.charts import CHARTS, ChartError
from pulse_trio.store.engine.guard_context import CONTEXTS
from pulse_trio.store.engine.results import INVALID_TRANSITION, Refusal
from pulse_trio.store.engine.tx import Tx

F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True, slots=True)
class Registration:
    chart: str
    trigger: str
    function: Callable[..., Any]
    entry: bool

    @property
    def name(self) -> str:
        return f"{self.chart}.{self.trigger}"

    @property
    def qualname(self) -> str:
        return f"{self.function.__module__}.{self.function.__qualname__}"


@dataclasses.dataclass(frozen=True, slots=True)
class Guard:
    chart: str
    name: str
    check: Callable[[Any], bool]
    code: str | None  # None: a selector, never a refusal

    @property
    def doc(self) -> str:
        return " ".join((self.check.__doc__ or "").split())


REGISTRY: dict[tuple[str, str], Registration] = {}
GUARDS: dict[tuple[str, str], Guard] = {}


def _persistent_chart(chart: str):
    found = CHARTS.get(chart)
    if found is None:
        raise ChartError(f"no chart {chart!r}")
    if not found.spec.persistent:
        raise ChartError(f"chart {chart!r} lives in memory; it has no transaction functions")
    return found


def transition(chart: str, trigger: str, *, entry: bool = True) -> Callable[[F], F]:
    """Register the one transaction function of ``chart.trigger``."""
    found = _persistent_chart(chart)
    found.transitions_for(trigger)  # ChartError for an undeclared trigger
    name = f"{chart}.{trigger}"

    def decorate(fn: F) -> F:
        if (chart, trigger) in REGISTRY:
            raise ChartError(f"{name} already has a function: {REGISTRY[(chart, trigger)].qualname}")

        @functools.wraps(fn)
        def run(tx: Tx, /, **kwargs: Any) -> Any:
            tx.enter(name)
            try:
                return fn(tx, **kwargs)
            finally:
                tx.leave()

        registration = Registration(chart, trigger, run, entry)
        run.__pulse_transition__ = registration  # type: ignore[attr-defined]
        REGISTRY[(chart, trigger)] = registration
        return run  # type: ignore[return-value]

    return decorate


def registration_of(fn: Callable[..., Any]) -> Registration | None:
    return getattr(fn, "__pulse_transition__", None)


def read_only(fn: F | None = None, *, takes_locks: bool = True) -> Any:
    """Mark a function that only reads (task view, listings); the facade may run it.

    ``@read_only(takes_locks=False)``: none of its reads locks a row, so it
    can run on an autocommit connection with no transaction to end.
    """
    def mark(f: F) -> F:
        f.__pulse_read_only__ = True  # type: ignore[attr-defined]
        f.__pulse_takes_locks__ = takes_locks  # type: ignore[attr-defined]
        return f

    return mark(fn) if fn is not None else mark


def is_read_only(fn: Callable[..., Any]) -> bool:
    return bool(getattr(fn, "__pulse_read_only__", False))


def takes_no_locks(fn: Callable[..., Any]) -> bool:
    """A read-only view declared to take no row locks (see :func:`read_only`)."""
    return is_read_only(fn) and not getattr(fn, "__pulse_takes_locks__", True)


def guard(chart: str, name: str, *, code: str | None = None) -> Callable[[F], F]:
    """Register the predicate behind guard ``name`` of ``chart``."""
    found = _persistent_chart(chart)
    if name not in found.spec.guard_names:
        raise ChartError(f"chart {chart!r} names no guard {name!r}")

    def decorate(fn: F) -> F:
        if (chart, name) in GUARDS:
            raise ChartError(f"guard {chart}.{name} is implemented twice")
        GUARDS[(chart, name)] = Guard(chart, name, fn, code)
        return fn

    return decorate


def _guard(chart: str, name: str) -> Guard:
    try:
        return GUARDS[(chart, name)]
    except KeyError:
        raise ChartError(f"guard {chart}.{name} has no implementation") from None


@functools.lru_cache(maxsize=None)
def _refusal_guards(chart: str, trigger: str) -> tuple[Guard, ...]:
    """The trigger's refusing guards, first declaration first, whatever the source."""
    return tuple(g for g in (_guard(chart, n) for n in CHARTS[chart].refusal_order(trigger)) if g.code is not None)


@functools.lru_cache(maxsize=None)
def _refusal_names(chart: str, trigger: str) -> frozenset[str]:
    return frozenset(g.name for g in _refusal_guards(chart, trigger))


@functools.lru_cache(maxsize=None)
def _candidates(chart: str, trigger: str, state: str) -> tuple[tuple[str, tuple[tuple[Guard, bool], ...]], ...]:
    """The chart's transitions from ``state``, with their selector guards resolved."""
    return tuple(
        (dest, tuple((_guard(chart, n), e) for n, e in conditions if _guard(chart, n).code is None))
        for dest, conditions in CHARTS[chart].candidates(trigger, state)
    )


def _context(chart: str, ctx: Any) -> None:
    expected = CONTEXTS[chart]
    if type(ctx) is not expected:
        raise TypeError(f"{chart} guards read a {expected.__name__}, not {type(ctx).__name__}")


def _first_refusal(chart: str, trigger: str, ctx: Any, through: str | None = None) -> Refusal | None:
    for g in _refusal_guards(chart, trigger):
        if not g.check(ctx):
            return Refusal(g.code or INVALID_TRANSITION, f"{chart}.{trigger}: {g.name} does not hold", g.name)
        if g.name == through:
            break
    return None


def screen(chart: str, trigger: str, ctx: Any, *, through: str) -> Refusal | None:
    """:func:`decide`'s first pass, stopped after guard ``through``: the refusal, or None.

    For a batch function that can rule out the whole batch before it reads
    the rows the later guards need (a draining session is offered nothing,
    so no task is locked for it). The same guards, in the same order, as
    :func:`decide`.
    """
    _context(chart, ctx)
    if through not in _refusal_names(chart, trigger):
        raise ChartError(f"{chart}.{trigger} names no refusing guard {through!r}")
    return _first_refusal(chart, trigger, ctx, through)


def decide(chart: str, trigger: str, state: str, ctx: Any) -> str | Refusal:
    """The destination of ``trigger`` from ``state`` for the locked rows in ``ctx``.

    ``ctx`` is the chart's context type (:mod:`pulse_trio.store.engine.guard_context`).
    First every refusing guard of the trigger is checked in declaration order
    (whatever the source state, so a lapsed lease answers ``lease_expired``
    rather than a bare ``invalid_transition``); the first that fails gives
    the refusal. Then the chart's transitions from ``state`` are tried in
    order and the first whose selector guards hold wins. None: the trigger
    is not allowed from ``state`` -> ``invalid_transition``.
    """
    _context(chart, ctx)
    refused = _first_refusal(chart, trigger, ctx)
    if refused is not None:
        return refused
    for dest, selectors in _candidates(chart, trigger, state):
        if all(bool(g.check(ctx)) == expected for g, expected in selectors):
            return dest
    return Refusal(INVALID_TRANSITION, f"{chart}.{trigger} is not allowed from {state}")


def require(chart: str, trigger: str, state: str, ctx: Any) -> str:
    """:func:`decide` for a step whose caller already holds the invariant."""
    from pulse_trio.store.engine.tx import InvariantViolation

    dest = decide(chart, trigger, state, ctx)
    if isinstance(dest, Refusal):
        raise InvariantViolation(f"{chart}.{trigger} from {state}: {dest.code} ({dest.message})")
    return dest
