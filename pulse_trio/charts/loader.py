"""Statechart declarations (``statecharts/*.json``) in, charts out.

Theory of operation: a chart file is the only place a state or a transition
is written down. This module validates it and offers it two ways:

* persistent charts (``task``, ``lease``, ...) are plain data, a
  :class:`Chart`: transaction functions running in worker threads never fire
  triggers (the database row, not a Python object, holds the state). They
  read the chart's index by (trigger, source), and every state change they
  write comes from it (``pulse_trio.store.engine.chart_write``).
* in-memory charts (``session``) are a :class:`MachineChart`: the same data
  plus one ``transitions.Machine`` (``auto_transitions=False`` so nothing can
  bypass a guard); the owner attaches its model objects with
  :meth:`MachineChart.attach` / :meth:`MachineChart.detach` and fires
  triggers on them from the Trio thread only.
* the worker SDK's charts (``"side": "worker"``: ``worker_lease``,
  ``worker_command``) live in memory too, but are plain data like the
  persistent ones: the SDK (``pulse_trio.sdk.lifecycle``) turns each into a
  table of (trigger, state) -> next state once, at import, and moves a
  lease or a command by one lookup.

A guard named ``"!x"`` is the negation of guard ``x`` (``unless`` in
``transitions``).

A chart may also say what its guards and transitions *mean* for the model
checker (``pulse_trio.charts.promela``): an optional ``"model"`` object with
``fields`` (the row's model variables and their initial values) and
``guards`` (each guard's meaning as an expression), and an optional
``"effects"`` list on each transition. The store ignores both; the checker
reads nothing else (docs/statecharts/verification.md §2).

A persistent chart also says, per trigger, which store function runs it
(``"functions"``: ``runs`` as ``module:function``, ``kind`` entry or step,
and the ``steps`` it runs on its own open transaction, each with the
condition it runs under). The charts package never imports the store:
``tests/store/test_chart_functions.py`` holds this data to the registry, and
the renderer draws the composite-transaction tables from it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from transitions import Machine

_FIELDS = {"name", "persistent", "initial", "states", "transitions", "description", "model", "side", "functions"}
#: Which side of the wire keeps a chart's instances: the service (default) or the worker SDK.
SIDES = ("server", "worker")
_TRANSITION_FIELDS = {"trigger", "source", "dest", "guards", "description", "effects"}
_MODEL_FIELDS = {"fields", "guards"}
_FUNCTION_FIELDS = {"runs", "kind", "steps"}
_STEP_FIELDS = {"step", "when"}
#: How a function and how a step are named: ``pulse_trio.store.lease.leases:finish``; ``task.finish``.
_RUNS = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
_STEP = re.compile(r"[A-Za-z_]\w*\.[A-Za-z_]\w*")
KINDS = ("entry", "step")
#: A chart, state or guard name: an ASCII identifier (states go into SQL between quotes and into Promela).
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: A guard: a name, or ``!`` and a name (its negation).
_GUARD = re.compile(r"!?[A-Za-z_][A-Za-z0-9_]*")
#: The width of the store's state columns (``varchar(16) CHARACTER SET ascii``); a test holds schema.sql to it.
STATE_NAME_WIDTH = 16


class ChartError(ValueError):
    """A chart declaration is malformed; raised at load time, never later."""


@dataclasses.dataclass(frozen=True, slots=True)
class Transition:
    """One edge: ``trigger`` moves ``source`` to ``dest`` when every guard holds."""

    trigger: str
    source: str
    dest: str
    guards: tuple[str, ...]
    description: str
    #: What the transition writes besides the state, as model assignments (``"lease.revision = lease.revision + 1"``).
    effects: tuple[str, ...] = ()

    def machine_config(self) -> dict[str, Any]:
        return {
            "trigger": self.trigger,
            "source": self.source,
            "dest": self.dest,
            "conditions": [g for g in self.guards if not g.startswith("!")],
            "unless": [g[1:] for g in self.guards if g.startswith("!")],
        }


@dataclasses.dataclass(frozen=True, slots=True)
class StepCall:
    """A transition a function runs on its own open transaction: ``chart.trigger``, and when (empty: always)."""

    name: str
    when: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class StoreFunction:
    """The one store function of a persistent chart's trigger, as the chart file names it."""

    #: ``module:function`` (``pulse_trio.store.lease.leases:finish``); the registry's function for the trigger.
    runs: str
    #: True: runs as its own transaction; False: a step, run on the open transaction of its caller.
    entry: bool
    #: What it runs on the same transaction, in the order it runs them.
    steps: tuple[StepCall, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class ChartModel:
    """What the model checker needs beyond states and edges: row fields and the meaning of each guard."""

    #: field name -> initial value (an integer)
    fields: Mapping[str, int]
    #: guard name (without ``!``) -> a boolean expression over ``<chart>.<field>``, ``cmd.<x>``, ``env.<X>``
    guards: Mapping[str, str]


@dataclasses.dataclass(frozen=True, slots=True)
class ChartSpec:
    """A validated chart declaration, exactly as the file says."""

    name: str
    persistent: bool
    initial: str
    states: tuple[str, ...]
    transitions: tuple[Transition, ...]
    description: str = ""
    model: ChartModel | None = None
    #: ``"server"``, or ``"worker"``: kept by the worker SDK, in memory, read as a table (never a Machine).
    side: str = "server"
    #: trigger -> its store function (persistent charts; empty for one parsed without them).
    functions: Mapping[str, StoreFunction] = dataclasses.field(default_factory=dict)

    @property
    def triggers(self) -> tuple[str, ...]:
        """Every trigger, in order of first declaration."""
        return tuple(dict.fromkeys(t.trigger for t in self.transitions))

    @property
    def guard_names(self) -> frozenset[str]:
        """Every guard named, without the ``!`` of negation."""
        return frozenset(g.lstrip("!") for t in self.transitions for g in t.guards)

    def machine_config(self) -> dict[str, Any]:
        return {
            "states": list(self.states),
            "initial": self.initial,
            "transitions": [t.machine_config() for t in self.transitions],
            "auto_transitions": False,
        }


def parse_chart(data: Mapping[str, Any], *, origin: str = "<chart>") -> ChartSpec:
    """Validate one declaration; every mistake is a ChartError naming the file."""

    def fail(message: str) -> ChartError:
        return ChartError(f"{origin}: {message}")

    if not isinstance(data, Mapping):
        raise fail("a chart is a JSON object")
    missing = {"name", "persistent", "initial", "states", "transitions"} - set(data)
    if missing:
        raise fail(f"missing fields {sorted(missing)}")
    unknown = set(data) - _FIELDS
    if unknown:
        raise fail(f"unknown fields {sorted(unknown)}")
    if not _is_name(data["name"]):
        raise fail(f"name must be an identifier, got {data['name']!r}")
    if not isinstance(data.get("description", ""), str):
        raise fail("description must be text")
    states = data["states"]
    if not isinstance(states, list) or not states or not all(
            _is_name(s) and len(s) <= STATE_NAME_WIDTH for s in states):
        raise fail(f"states must be a non-empty list of ASCII identifiers of at most {STATE_NAME_WIDTH} characters, "
                   f"got {states!r}")
    if len(set(states)) != len(states):
        raise fail("a state is declared twice")
    if data["initial"] not in states:
        raise fail(f"initial state {data['initial']!r} is not declared")
    if not isinstance(data["persistent"], bool):
        raise fail("persistent must be true or false")
    side = data.get("side", "server")
    if side not in SIDES:
        raise fail(f"side must be one of {list(SIDES)}")
    if side == "worker" and data["persistent"]:
        raise fail("a worker's chart lives in memory: persistent must be false")
    if not isinstance(data["transitions"], list):
        raise fail("transitions must be a list")
    transitions: list[Transition] = []
    # Guards are a conjunction: the same set in another order is the same transition.
    seen: set[tuple[str, str, frozenset[str]]] = set()
    for index, raw in enumerate(data["transitions"]):
        where = f"transition {index}"
        if not isinstance(raw, Mapping) or set(raw) - _TRANSITION_FIELDS:
            raise fail(f"{where}: unknown or malformed fields")
        if not {"trigger", "source", "dest"} <= set(raw):
            raise fail(f"{where}: trigger, source and dest are required")
        sources = raw["source"] if isinstance(raw["source"], list) else [raw["source"]]
        if not sources:
            raise fail(f"{where}: source must be a state or a non-empty list of states")
        raw_guards = raw.get("guards", [])
        if not isinstance(raw_guards, list) or not all(isinstance(g, str) and _GUARD.fullmatch(g) for g in raw_guards):
            raise fail(f"{where}: guards must be a list of names, each negated by at most one '!'; got {raw_guards!r}")
        guards = tuple(raw_guards)
        if len({g.lstrip("!") for g in guards}) != len(guards):
            raise fail(f"{where}: a guard is named twice")
        if not isinstance(raw.get("description", ""), str):
            raise fail(f"{where}: description must be text")
        trigger = raw["trigger"]
        if not isinstance(trigger, str) or not trigger.isidentifier():
            raise fail(f"{where}: trigger must be an identifier, got {trigger!r}")
        if trigger in states:
            raise fail(f"{where}: trigger {trigger!r} shadows a state name")
        for source in sources:
            for state in (source, raw["dest"]):
                if not isinstance(state, str) or state not in states:
                    raise fail(f"{where}: state {state!r} is not declared")
            key = (trigger, source, frozenset(guards))
            if key in seen:
                raise fail(f"{where}: {trigger} from {source} with guards {list(guards)} is declared twice")
            seen.add(key)
            effects = raw.get("effects", [])
            if not isinstance(effects, list) or not all(isinstance(e, str) and "=" in e for e in effects):
                raise fail(f"{where}: effects must be a list of assignments")
            transitions.append(Transition(trigger, source, raw["dest"], guards, raw.get("description", ""),
                                          tuple(effects)))
    if not transitions:
        raise fail("a chart needs at least one transition")
    model = _parse_model(data.get("model"), transitions, fail)
    functions = _parse_functions(data, tuple(dict.fromkeys(t.trigger for t in transitions)), fail)
    return ChartSpec(
        name=data["name"],
        persistent=data["persistent"],
        initial=data["initial"],
        states=tuple(states),
        transitions=tuple(transitions),
        description=data.get("description", ""),
        model=model,
        side=side,
        functions=functions,
    )


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def _parse_functions(data: Mapping[str, Any], triggers: tuple[str, ...], fail: Any) -> dict[str, StoreFunction]:
    """``functions``: exactly one store function per trigger of a persistent chart; none for an in-memory one."""
    raw = data.get("functions")
    if raw is None:
        return {}
    if not data["persistent"]:
        raise fail("functions: an in-memory chart has no store function")
    if not isinstance(raw, Mapping):
        raise fail("functions: an object of trigger -> function")
    missing, unknown = set(triggers) - set(raw), set(raw) - set(triggers)
    if missing or unknown:
        raise fail(f"functions: every trigger needs exactly one; missing {sorted(missing)}, unknown {sorted(unknown)}")
    functions: dict[str, StoreFunction] = {}
    for trigger in triggers:
        where = f"functions.{trigger}"
        entry = raw[trigger]
        if not isinstance(entry, Mapping) or set(entry) - _FUNCTION_FIELDS or not {"runs", "kind"} <= set(entry):
            raise fail(f"{where}: an object with runs, kind and optional steps")
        runs = entry["runs"]
        if not isinstance(runs, str) or not _RUNS.fullmatch(runs):
            raise fail(f"{where}.runs: a module path and a function name, module:function; got {runs!r}")
        if entry["kind"] not in KINDS:
            raise fail(f"{where}.kind must be one of {list(KINDS)}")
        steps = entry.get("steps", [])
        if not isinstance(steps, list):
            raise fail(f"{where}.steps: a list")
        calls = tuple(_parse_step(step, f"{where}.steps", fail) for step in steps)
        if len({c.name for c in calls}) != len(calls):
            raise fail(f"{where}.steps: a step is named twice")
        functions[trigger] = StoreFunction(runs, entry["kind"] == "entry", calls)
    return functions


def _parse_step(raw: Any, where: str, fail: Any) -> StepCall:
    """``"chart.trigger"``, or ``{"step": "chart.trigger", "when": "the condition it runs under"}``."""
    if isinstance(raw, Mapping):
        if set(raw) != _STEP_FIELDS or not isinstance(raw["when"], str) or not raw["when"].strip():
            raise fail(f"{where}: a step with a condition is {{\"step\": ..., \"when\": ...}}")
        name, when = raw["step"], raw["when"]
    else:
        name, when = raw, ""
    if not isinstance(name, str) or not _STEP.fullmatch(name):
        raise fail(f"{where}: a step is named chart.trigger; got {name!r}")
    return StepCall(name, " ".join(when.split()))


def check_functions(specs: Mapping[str, ChartSpec]) -> None:
    """Across the chart files: every persistent chart names its functions, every step names a trigger that
    exists, no function runs itself (directly or not), and every step-kind function is run by someone."""
    named: dict[str, StoreFunction] = {}
    for spec in specs.values():
        if spec.persistent and not spec.functions:
            raise ChartError(f"{spec.name}.json: a persistent chart names the store function of each trigger "
                             "(\"functions\")")
        named.update({f"{spec.name}.{trigger}": fn for trigger, fn in spec.functions.items()})
    run_by: dict[str, list[str]] = {}
    for caller, fn in named.items():
        for step in fn.steps:
            if step.name not in named:
                raise ChartError(f"{caller.split('.')[0]}.json: functions.{caller.split('.')[1]} runs {step.name}, "
                                 "which no persistent chart declares")
            run_by.setdefault(step.name, []).append(caller)
    for name, fn in named.items():
        if not fn.entry and name not in run_by:
            raise ChartError(f"{name.split('.')[0]}.json: {name} is a step, but no function runs it")

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            raise ChartError(f"functions run one another in a loop: {' -> '.join((*path, name))}")
        for step in named[name].steps:
            visit(step.name, (*path, name))

    for name in named:
        visit(name, ())


def _parse_model(raw: Any, transitions: list[Transition], fail: Any) -> ChartModel | None:
    """The optional ``model`` object: fields with integer initial values, a meaning for named guards only."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or set(raw) - _MODEL_FIELDS:
        raise fail(f"model: an object with {sorted(_MODEL_FIELDS)}")
    fields = raw.get("fields", {})
    if not isinstance(fields, Mapping) or not all(
            isinstance(k, str) and k.isidentifier() and isinstance(v, int) and not isinstance(v, bool)
            for k, v in fields.items()):
        raise fail("model.fields: names to integer initial values")
    guards = raw.get("guards", {})
    named = {g.lstrip("!") for t in transitions for g in t.guards}
    if not isinstance(guards, Mapping) or not all(isinstance(v, str) and v.strip() for v in guards.values()):
        raise fail("model.guards: guard names to expressions")
    unknown = set(guards) - named
    if unknown:
        raise fail(f"model.guards: {sorted(unknown)} not named by any transition")
    return ChartModel(fields=dict(fields), guards=dict(guards))


class Chart:
    """A persistent chart as plain data: its states, its transitions, an index by (trigger, source).

    Transaction functions run in worker threads and the database row holds
    the state, so nothing here is fired or mutated: the store reads the
    index (through ``decide`` in ``pulse_trio.store.engine.registry`` and the one
    writer in ``pulse_trio.store.engine.chart_write``) to learn where a trigger
    leads and which guards choose.
    """

    def __init__(self, spec: ChartSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.states = spec.states
        self.transitions = spec.transitions
        self._by_trigger: dict[str, tuple[Transition, ...]] = {
            trigger: tuple(t for t in spec.transitions if t.trigger == trigger) for trigger in spec.triggers
        }
        index: dict[tuple[str, str], list[Transition]] = {}
        for t in spec.transitions:
            index.setdefault((t.trigger, t.source), []).append(t)
        #: (trigger, source) -> its transitions in declaration order (several: guards choose).
        self.index: dict[tuple[str, str], tuple[Transition, ...]] = {k: tuple(v) for k, v in index.items()}

    def __repr__(self) -> str:
        return f"<Chart {self.name} persistent={self.spec.persistent}>"

    def transitions_for(self, trigger: str) -> tuple[Transition, ...]:
        """Every declared transition of ``trigger``, in declaration order."""
        try:
            return self._by_trigger[trigger]
        except KeyError:
            raise ChartError(f"chart {self.name!r} has no trigger {trigger!r}") from None

    def declared(self, trigger: str, source: str) -> tuple[Transition, ...]:
        """The transitions of ``trigger`` from ``source`` (empty: the pair is not declared)."""
        self.transitions_for(trigger)
        return self.index.get((trigger, source), ())

    def dests(self, trigger: str, source: str) -> frozenset[str]:
        """Where ``trigger`` can lead from ``source``, whichever guards hold."""
        return frozenset(t.dest for t in self.declared(trigger, source))

    def candidates(self, trigger: str, state: str) -> list[tuple[str, tuple[tuple[str, bool], ...]]]:
        """``(dest, ((guard, expected), ...))`` for ``trigger`` from ``state``, in declaration order.

        ``"!x"`` reads as guard ``x`` expected False.
        """
        return [(t.dest, tuple((g.lstrip("!"), not g.startswith("!")) for g in t.guards))
                for t in self.declared(trigger, state)]

    def refusal_order(self, trigger: str) -> tuple[str, ...]:
        """The trigger's positive guard names, first declaration first, whatever the source."""
        return tuple(dict.fromkeys(g for t in self.transitions_for(trigger) for g in t.guards
                                   if not g.startswith("!")))

    def unguarded_self_loops(self) -> frozenset[tuple[str, str]]:
        """``(trigger, state)`` pairs whose one transition is a guardless ``state -> state``.

        Firing such a trigger changes nothing, so an in-memory owner may
        check the pair against this set instead of firing it through the
        machine, where it costs as much as a real transition.
        """
        pairs = set()
        for (trigger, state), here in self.index.items():
            if len(here) == 1 and here[0].dest == state and not here[0].guards:
                pairs.add((trigger, state))
        return frozenset(pairs)

    def can(self, trigger: str, state: str) -> bool:
        """Whether ``trigger`` is declared from ``state`` (guards aside)."""
        return (trigger, state) in self.index


class MachineChart(Chart):
    """An in-memory chart (``session``): the same data plus the one ``Machine`` that fires it.

    The owner attaches its model objects and fires triggers on them from the
    Trio thread only; the guards are methods of the model.
    """

    def __init__(self, spec: ChartSpec) -> None:
        super().__init__(spec)
        # model=None: the machine starts with no models; they are attached on demand.
        self.machine = Machine(model=None, name=spec.name, **spec.machine_config())

    def attach(self, model: object) -> None:
        """Put ``model`` in the chart's initial state.

        The model is not added to the machine's model list: ``add_model``
        scans that list and binds a method per trigger and state on every
        model, so a registration cost time (and memory) that grew with the
        sessions connected. Triggers are fired through :meth:`fire` instead.
        """
        self.machine.set_state(self.spec.initial, model=model)

    def fire(self, model: object, trigger: str) -> bool:
        """Fire ``trigger`` on ``model``; MachineError where the chart does not allow it from its state."""
        try:
            event = self.machine.events[trigger]
        except KeyError:
            raise ChartError(f"chart {self.name!r} has no trigger {trigger!r}") from None
        return event.trigger(model)


def build(spec: ChartSpec) -> Chart:
    """A persistent chart is data, and so is a worker's (the SDK reads its table); the server's in-memory one also
    gets its ``Machine``."""
    return Chart(spec) if spec.persistent or spec.side == "worker" else MachineChart(spec)


def definitions() -> Path:
    """The folder of chart files the package loads (``statecharts/``, linked as ``charts/definitions``)."""
    return Path(str(resources.files("pulse_trio.charts").joinpath("definitions"))).resolve()


def load_specs(names: Iterable[str] | None = None) -> dict[str, ChartSpec]:
    """Every chart file shipped as package data (``charts/definitions``)."""
    folder = definitions()
    specs: dict[str, ChartSpec] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".json"):
            continue
        try:
            data = json.loads(entry.read_text("utf-8"))
        except json.JSONDecodeError as exc:
            raise ChartError(f"{entry.name}: not JSON: {exc}") from None
        spec = parse_chart(data, origin=entry.name)
        if spec.name + ".json" != entry.name:
            raise ChartError(f"{entry.name}: declares chart {spec.name!r}; the file must be named after it")
        specs[spec.name] = spec
    check_functions(specs)
    if names is not None:
        wanted = set(names)
        specs = {k: v for k, v in specs.items() if k in wanted}
    return specs
