"""Generate a Promela model from the chart files, for SPIN (docs/statecharts/verification.md).

Theory of operation: each chart the environment drives becomes a state
table (one array of states, one array per model field, indexed by row id),
each trigger one ``inline fire_<chart>_<trigger>(ids)`` that fires the first declared transition from
the current state whose guards hold (as ``decide`` does), and one
``<chart>_<trigger>_can(ids)`` macro saying whether it would. Guards and
effects come from the chart file (``model.guards``, ``effects``); nothing
about a particular chart is written here. The environment around the charts
(tasks, workers, servers, clocks and the properties) is written once by hand
in ``environment.pml``; its header names the charts it drives, the command
fields it sets and the properties it checks, so a chart file it does not
drive is still loaded and checked by the generic checks, but adds no code.

Expressions in a chart's model use ``<chart>.<field>``, ``<chart>.state``,
``<chart>.<STATE>``, ``<chart>.id``, ``cmd.<field>``, ``env.<NAME>``,
``true``/``false``, integers and C operators.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from importlib import resources

from pulse_trio.charts.loader import ChartError, ChartSpec, Transition

_REF = re.compile(r"\b([A-Za-z_]\w*)\.([A-Za-z_]\w*)\b")
_NAME = re.compile(r"\b[A-Za-z_]\w*\b")
_ALLOWED = re.compile(r"^[\s0-9()!&|<>=+\-*/%]*$")
_HEADER = re.compile(r"^//@(\w+)\s+(.*)$", re.M)


@dataclasses.dataclass(frozen=True)
class Property:
    """A named property the environment checks, and the charts it covers (``*``: every chart)."""

    name: str
    charts: tuple[str, ...]
    summary: str

    def covers(self, chart: str) -> bool:
        return "*" in self.charts or chart in self.charts


@dataclasses.dataclass(frozen=True)
class Environment:
    """The hand-written part of the model and what its header declares."""

    text: str
    drives: tuple[str, ...]
    command: tuple[str, ...]
    properties: tuple[Property, ...]
    #: ``chart.trigger`` of driven charts that the environment never fires, said out loud (``//@undriven``).
    undriven: tuple[str, ...] = ()


def load_environment(text: str | None = None) -> Environment:
    """Parse ``environment.pml`` (or ``text``): its ``//@drives``, ``//@undriven``, ``//@command`` and
    ``//@property`` lines."""
    if text is None:
        text = resources.files("pulse_trio.charts").joinpath("environment.pml").read_text("utf-8")
    drives: list[str] = []
    undriven: list[str] = []
    command: list[str] = []
    properties: list[Property] = []
    for key, value in _HEADER.findall(text):
        if key == "drives":
            drives += value.split()
        elif key == "undriven":
            undriven += value.split()
        elif key == "command":
            command += value.split()
        elif key == "property":
            head, _, summary = value.partition("--")
            name, _, covers = head.partition(" covers ")
            properties.append(Property(name.strip(), tuple(covers.split()), summary.strip()))
    if "\n//@charts\n" not in text:
        raise ChartError("environment.pml: no //@charts line to put the charts at")
    return Environment(text, tuple(drives), tuple(command), tuple(properties), tuple(undriven))


_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def unfired(specs: Mapping[str, ChartSpec], env: Environment) -> list[str]:
    """``chart.trigger`` of every driven chart whose ``fire_`` inline the environment never calls.

    A chart the environment drives is checked only where the environment fires it; what it never fires, SPIN
    never sees.
    """
    code = _COMMENT.sub(" ", env.text)
    return [f"{name}.{trigger}" for name in env.drives for trigger in specs[name].triggers
            if not re.search(rf"\bfire_{name}_{trigger}\b", code)]


def check_undriven(specs: Mapping[str, ChartSpec], env: Environment) -> None:
    """The environment's ``//@undriven`` line names exactly the transitions it never fires: a gap is never silent."""
    never, said = unfired(specs, env), set(env.undriven)
    silent, fired = [t for t in never if t not in said], sorted(said - set(never))
    if silent:
        raise ChartError(f"environment.pml never fires {silent}: drive them, or list them on its //@undriven line")
    if fired:
        raise ChartError(f"environment.pml lists {fired} on its //@undriven line, but fires them (or they do not exist)")


def _ids(env: Environment) -> str:
    return ", ".join(f"i_{c}" for c in env.drives)


class _Translator:
    """Turns a chart-model expression into Promela over the generated arrays."""

    def __init__(self, specs: Mapping[str, ChartSpec], env: Environment, chart: str) -> None:
        self.specs, self.env, self.chart = specs, env, chart

    def ref(self, owner: str, name: str, where: str) -> str:
        if owner == "cmd":
            if name not in self.env.command:
                raise ChartError(f"{self.chart}: {where}: cmd.{name} is not a command field of the environment")
            return f"cmd_{name}"
        if owner == "env":
            return name
        if owner not in self.env.drives:
            raise ChartError(f"{self.chart}: {where}: {owner}.{name} names a chart the environment does not drive")
        spec = self.specs[owner]
        fields = spec.model.fields if spec.model else {}
        if name == "state":
            return f"{owner}_state[i_{owner}]"
        if name == "id":
            return f"i_{owner}"
        if name in spec.states:
            return f"{owner}_{name}"
        if name in fields:
            return f"{owner}_{name}[i_{owner}]"
        raise ChartError(f"{self.chart}: {where}: {owner} has no field or state {name!r}")

    def expr(self, text: str, where: str) -> str:
        rest = _REF.sub(" ", text)
        loose = [n for n in _NAME.findall(rest) if n not in ("true", "false")]
        if loose or not _ALLOWED.match(_NAME.sub(" ", rest)):
            raise ChartError(f"{self.chart}: {where}: {text!r} is not a model expression"
                             + (f" (unqualified names {loose})" if loose else ""))
        return "(" + _REF.sub(lambda m: self.ref(m.group(1), m.group(2), where), text) + ")"

    def assignment(self, text: str, where: str) -> str:
        left, _, right = text.partition("=")
        target = _REF.fullmatch(left.strip())
        if target is None or right.startswith("="):
            raise ChartError(f"{self.chart}: {where}: {text!r} is not an assignment to <chart>.<field> or env.<NAME>")
        return f"{self.ref(target.group(1), target.group(2), where)} = {self.expr(right, where)}"


def _guard_macro(chart: str, guard: str) -> str:
    return f"{chart}_g_{guard}"


def _condition(spec: ChartSpec, t: Transition, ids: str) -> str:
    parts = [f"{spec.name}_state[i_{spec.name}] == {spec.name}_{t.source}"]
    for g in t.guards:
        call = f"{_guard_macro(spec.name, g.lstrip('!'))}({ids})"
        parts.append(f"!{call}" if g.startswith("!") else call)
    return "(" + " && ".join(parts) + ")"


def chart_section(spec: ChartSpec, specs: Mapping[str, ChartSpec], env: Environment,
                  size: int) -> tuple[list[str], list[str]]:
    """Promela for one driven chart: (constants, arrays and macros), (one inline per trigger)."""
    name, ids = spec.name, _ids(env)
    tr = _Translator(specs, env, name)
    model = spec.model
    fields = dict(model.fields) if model else {}
    clash = set(fields) & (set(spec.states) | {"state", "id"})
    if clash:
        raise ChartError(f"{name}: model fields {sorted(clash)} shadow a state name")
    out = [f"/* ---- chart {name} ({size} rows) ---- */", f"#define N_{name} {size}"]
    out += [f"#define {name}_{s} {i}" for i, s in enumerate(spec.states)]
    out.append(f"byte {name}_state[N_{name}] = {name}_{spec.initial};")
    out += [f"byte {name}_{f}[N_{name}] = {v};" for f, v in fields.items()]
    out.append(f"#define FOR_{name}(M) " + " ".join(f"M({i})" for i in range(size)))
    out.append(f"#define ANY_{name}(M) (" + " || ".join(f"M({i})" for i in range(size)) + ")")
    out.append(f"#define PICK_{name}(M, v) if " + " ".join(f":: M({i}) -> v = {i}" for i in range(size)) + " fi")
    out.append(f"#define EVERY_{name}(M) (" + " && ".join(f"M({i})" for i in range(size)) + ")")
    out.append(f"#define COUNT_{name}(M) (" + " + ".join(f"(M({i}) -> 1 : 0)" for i in range(size)) + ")")
    terminal = final_states(spec)
    settled = [spec.initial] + [s for s in terminal if s != spec.initial]
    out.append(f"#define {name}_terminal(i) (" + (" || ".join(f"{name}_state[i] == {name}_{s}" for s in terminal)
                                                  or "false") + ")")
    out.append(f"#define {name}_settled(i) (" + " || ".join(f"{name}_state[i] == {name}_{s}" for s in settled) + ")")
    meanings = dict(model.guards) if model else {}
    for g in sorted(spec.guard_names):
        if g not in meanings:
            raise ChartError(f"{name}: guard {g!r} has no meaning in model.guards (the environment drives {name})")
        out.append(f"#define {_guard_macro(name, g)}({ids}) {tr.expr(meanings[g], 'guard ' + g)}")
    inlines = [f"/* ---- chart {name}: one inline per trigger ---- */"]
    for trigger in spec.triggers:
        edges = [t for t in spec.transitions if t.trigger == trigger]
        out.append(f"#define {name}_{trigger}_can({ids}) (" + " || ".join(_condition(spec, t, ids) for t in edges)
                   + ")")
        body = "ok = 0"
        for t in reversed(edges):
            effects = "".join(f"; {tr.assignment(e, f'{trigger} effect')}" for e in t.effects)
            fire = (f'printf("STEP {name} {trigger} {t.source} {t.dest} %d\\n", i_{name}); '
                    f"{name}_state[i_{name}] = {name}_{t.dest}{effects}; ok = 1")
            body = f"if :: {_condition(spec, t, ids)} -> {fire} :: else -> {body} fi"
        inlines.append(f"inline fire_{name}_{trigger}({ids}) {{ {body} }}")
    out.append(f"#define ALL_{name}_TERMINAL (" + " && ".join(f"{name}_terminal({i})" for i in range(size)) + ")")
    out.append(f"#define ALL_{name}_SETTLED (" + " && ".join(f"{name}_settled({i})" for i in range(size)) + ")")
    return out, inlines


def generate(specs: Mapping[str, ChartSpec], sizes: Mapping[str, int], constants: Mapping[str, int],
             env: Environment | None = None) -> str:
    """The whole model: tier constants, the driven charts, the environment around them."""
    env = env or load_environment()
    missing = [c for c in env.drives if c not in specs]
    if missing:
        raise ChartError(f"the environment drives {missing}, which no chart file declares")
    check_undriven(specs, env)
    top = ["/* Generated by pulse_trio.charts.promela from statecharts/*.json and environment.pml. */"]
    top += [f"#define {k} {v}" for k, v in constants.items()]
    lines = ["bit ok;"] + [f"byte cmd_{c};" for c in env.command]
    lines.append("inline clear_cmd() { " + " ".join(f"cmd_{c} = 0;" for c in env.command) + " ok = 0 }")
    sections = [chart_section(specs[name], specs, env, sizes[name]) for name in env.drives]
    for declarations, _ in sections:
        lines += declarations
    for _, inlines in sections:
        lines += inlines
    lines.append("#define ALL_SETTLED (" + " && ".join(f"ALL_{c}_SETTLED" for c in env.drives) + ")")
    head, _, tail = env.text.partition("\n//@charts\n")
    return "\n".join(top) + "\n" + head + "\n" + "\n".join(lines) + "\n" + tail


def undriven(specs: Mapping[str, ChartSpec], env: Environment | None = None) -> list[str]:
    """Chart files the environment does not drive (checked by the generic graph checks only)."""
    env = env or load_environment()
    return sorted(set(specs) - set(env.drives))


def final_states(spec: ChartSpec) -> list[str]:
    """States a row never leaves, in declaration order.

    Self-loops leave nothing, and neither does a purge back to the initial
    state: it deletes the row, the end of its record rather than a step of
    its life (as ``pulse_trio.charts.states`` counts terminal states).
    """
    leaving = {t.source for t in spec.transitions if t.dest not in (t.source, spec.initial)}
    return [s for s in spec.states if s not in leaving and s != spec.initial]


def dead_ends(spec: ChartSpec) -> list[str]:
    """States reachable from the initial one from which no final state can be reached.

    A chart with no final state at all (a setting that is only ever
    changed) has a dead end where a reachable state has no transition out.
    """
    edges: dict[str, set[str]] = {}
    for t in spec.transitions:
        edges.setdefault(t.source, set()).add(t.dest)
    reach, todo = {spec.initial}, [spec.initial]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in reach:
                reach.add(nxt)
                todo.append(nxt)
    terminal = set(final_states(spec))
    if not terminal:
        return [s for s in spec.states if s in reach and s not in edges]
    back: dict[str, set[str]] = {}
    for src, dests in edges.items():
        for d in dests:
            back.setdefault(d, set()).add(src)
    can_end, todo = set(terminal), list(terminal)
    while todo:
        for prev in back.get(todo.pop(), ()):
            if prev not in can_end:
                can_end.add(prev)
                todo.append(prev)
    return [s for s in spec.states if s in reach and s not in can_end]


def properties(env: Environment | None = None) -> Sequence[Property]:
    return (env or load_environment()).properties


__all__ = ["Environment", "Property", "chart_section", "check_undriven", "dead_ends", "final_states", "generate",
           "load_environment", "properties", "undriven", "unfired"]
