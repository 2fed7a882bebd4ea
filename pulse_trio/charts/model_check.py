"""Run SPIN on the model generated from the chart files (docs/statecharts/verification.md §4).

Two searches per tier: a safety search (every assertion, i.e. every named
property but ``terminates``) and a liveness search of the ``terminates``
claim under weak fairness (``pan -a -f``). A violation is replayed
(``spin -t``) and turned into readable steps: each chart transition the
model fired (chart, trigger, source, target, row) and the property that
failed. Nothing here needs the store; it needs ``spin`` and a C compiler.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from pulse_trio.charts.loader import ChartSpec, load_specs
from pulse_trio.charts.promela import Environment, generate, load_environment


@dataclasses.dataclass(frozen=True)
class Tier:
    """How big the model's world is; every count is small on purpose (the search is exhaustive)."""

    name: str
    tasks: int = 2
    max_attempts: int = 1
    faults: int = 1
    key_limit: int = 1
    cancels: int = 1
    revcap: int = 2          # a worker renews while its lease's revision is below this (2: never)
    max_depth: int = 20000
    memory_mb: int = 2048    # the verifier stops (a failure) beyond this
    #: The verifier's optimisation: -O2 compiles pan.c in several seconds and searches about twice as fast as
    #: -O0, which compiles in about one; -O2 pays back only on searches longer than the default world's.
    optimize: str = "-O0"
    #: Whether the safety and liveness searches run at the same time (each on a core of its own, each up to
    #: ``memory_mb``) or one after the other (a tier whose one search may fill the machine's memory).
    searches_at_once: bool = True

    @property
    def leases_per_task(self) -> int:
        return self.max_attempts + self.faults

    @property
    def sessions_per_worker(self) -> int:
        return self.faults + 1

    def constants(self) -> dict[str, int]:
        return {"N_TASKS": self.tasks, "LPT": self.leases_per_task, "SPW": self.sessions_per_worker,
                "FAULTS": self.faults, "MAX_ATTEMPTS": self.max_attempts, "KEY_LIMIT": self.key_limit,
                "CANCELS": self.cancels, "REVCAP": self.revcap}

    def sizes(self) -> dict[str, int]:
        leases = self.tasks * self.leases_per_task
        return {"task": self.tasks, "lease": leases, "key_permit": leases, "cancellation": self.tasks,
                "instance": 1 + 2 * self.sessions_per_worker, "node": 2}


#: The suite's default: small enough for CI on 2 cores.
DEFAULT = Tier("default")
#: Also in the suite: the default world with one renewal per lease (seconds more).
RENEWALS = Tier("renewals", revcap=3, optimize="-O2")
#: Behind PULSE_MODEL_CHECK=large: two attempts (a retry after FAILED or an uncertain expiry), minutes.
LARGE = Tier("large", max_attempts=2, memory_mb=6144, optimize="-O2")
#: Behind PULSE_MODEL_CHECK=combined: two attempts and a renewal; it outgrows 12 GB (docs/statecharts/verification.md §4).
COMBINED = Tier("combined", max_attempts=2, revcap=3, memory_mb=12288, optimize="-O2", searches_at_once=False)
TIERS = {t.name: t for t in (DEFAULT, RENEWALS, LARGE, COMBINED)}


@dataclasses.dataclass(frozen=True)
class Step:
    chart: str
    trigger: str
    source: str
    target: str
    row: int

    def __str__(self) -> str:
        return f"{self.chart}[{self.row}]: {self.trigger} {self.source} -> {self.target}"


@dataclasses.dataclass
class Outcome:
    """One SPIN search: did it hold, how big it was, and the counterexample if not."""

    search: str
    ok: bool
    states: int
    depth: int
    seconds: float
    memory_mb: float
    property: str | None = None
    steps: list[Step] = dataclasses.field(default_factory=list)
    output: str = ""

    def report(self) -> str:
        if self.ok:
            return f"{self.search}: holds ({self.states} states, depth {self.depth}, {self.seconds:.1f} s)"
        if self.property and not self.property.isidentifier():  # no property failed: the search itself did
            return f"{self.search}: {self.property}"
        lines = [f"{self.search}: property {self.property or '?'} violated; counterexample:"]
        lines += [f"  {i + 1:3d}. {s}" for i, s in enumerate(self.steps)]
        return "\n".join(lines)


_STEP = re.compile(r"STEP (\w+) (\w+) (\w+) (\w+) (\d+)")
_PROPERTY = re.compile(r"PROPERTY (\w+)")


def _run(args: list[str], cwd: Path, timeout: float) -> tuple[int, str]:
    """The exit status and the printout (stdout, then stderr)."""
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    return done.returncode, done.stdout + done.stderr


#: What a verifier that searched to the end prints; without it (killed, crashed) nothing was proved.
_SUMMARY = (re.compile(r"errors: \d+"), re.compile(r"\d+ states, stored"))


def _number(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    return float(found.group(1)) if found else 0.0


class _Search:
    """A verifier started now, its printout going to a file of the folder, so that another may search meanwhile
    (no thread reads a pipe: the file takes whatever it writes)."""

    def __init__(self, name: str, args: list[str], cwd: Path) -> None:
        self.started = time.monotonic()
        self.ended: float | None = None
        self._printout = cwd / f"pan_{name}.printout"
        with open(self._printout, "wb") as sink:  # the verifier keeps its own descriptor of it
            self.process = subprocess.Popen(args, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT)

    def done(self) -> bool:
        """Whether it has ended; the moment it is first seen ended is its end."""
        if self.ended is None and self.process.poll() is not None:
            self.ended = time.monotonic()
        return self.ended is not None

    def result(self, timeout: float, others: Iterable[_Search] = ()) -> tuple[int, str, float]:
        """As :func:`_run`: the exit status and the printout (and how long it ran); killed past ``timeout``.

        ``others``, searching meanwhile, are looked at on the way, so that each one's end is its own.
        """
        deadline = self.started + timeout
        while not self.done():
            for other in others:
                other.done()
            if time.monotonic() >= deadline:
                self.stop()
                raise subprocess.TimeoutExpired(self.process.args, timeout)
            time.sleep(_POLL_S)
        assert self.ended is not None
        return self.process.returncode, self._printout.read_text(errors="replace"), self.ended - self.started

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


#: How often a search under way is looked at.
_POLL_S = 0.02


def _outcome(search: str, status: int, text: str, seconds: float) -> Outcome:
    """What one verifier's printout says; ``property`` left None for a violation (the trail names it)."""
    # A verifier killed (the OOM killer, a runner) or crashed prints no summary: that proves nothing.
    finished = status == 0 and all(p.search(text) for p in _SUMMARY)
    errors = int(_number(r"errors: (\d+)", text))
    incomplete = any(m in text for m in ("max search depth too small", "out of memory", "reached -DMEMLIM"))
    outcome = Outcome(search, finished and errors == 0 and not incomplete,
                      int(_number(r"(\d+) states, stored", text)),
                      int(_number(r"depth reached (\d+)", text)), seconds,
                      _number(r"([\d.]+)\s+total actual memory usage", text), output=text)
    if incomplete and not errors:
        outcome.property = "incomplete search (depth or memory bound reached)"
    elif not finished and not errors:
        outcome.property = f"verifier did not finish (exit {status})"
    return outcome


def check(tier: Tier = DEFAULT, specs: Mapping[str, ChartSpec] | None = None, env: Environment | None = None,
          *, workdir: Path | None = None, liveness: bool = True, timeout: float = 900) -> list[Outcome]:
    """Generate the model for ``tier`` and search it; one Outcome per search."""
    spin, cc = shutil.which("spin"), shutil.which("cc") or shutil.which("gcc")
    if not spin or not cc:
        raise RuntimeError("spin and a C compiler are needed (scripts/bootstrap installs them)")
    specs = specs if specs is not None else load_specs()
    model = generate(specs, tier.sizes(), tier.constants(), env or load_environment())
    own = workdir is None
    folder = Path(tempfile.mkdtemp(prefix="pulse-model-")) if own else workdir
    try:
        (folder / "model.pml").write_text(model, "utf-8")
        searches = [("safety", ["-DSAFETY", "-DNOCLAIM"], ["-m%d" % tier.max_depth])]
        if liveness:
            searches.append(("liveness", ["-DNFAIR=3"], ["-a", "-f", "-m%d" % tier.max_depth]))
        _, text = _run([spin, "-a", "model.pml"], folder, timeout)
        if not (folder / "pan.c").exists():
            raise RuntimeError(f"spin could not read the generated model:\n{text}")
        # Both verifiers compile at once (two cores); -DNOBOUNDCHECK: indices are ids the model computes.
        compiles = [(search, subprocess.Popen(
            [cc, tier.optimize, "-w", "-DNOBOUNDCHECK", "-DCOLLAPSE", "-DVECTORSZ=4096", f"-DMEMLIM={tier.memory_mb}",
             *cflags, "-o", f"pan_{search}", "pan.c"], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)) for search, cflags, _ in searches]
        for search, process in compiles:
            text, _ = process.communicate(timeout=timeout)
            if process.returncode != 0:
                raise RuntimeError(f"the {search} verifier did not compile:\n{text}")
        # The searches run at once too (two cores; each within its own memory bound), unless the tier says not.
        # Each writes its counterexample to a trail file of its own (model.pml.<search>), which spin -k replays.
        commands = {search: [f"./pan_{search}", f"-t{search}", *pan_flags] for search, _, pan_flags in searches}
        running = {search: _Search(search, command, folder) for search, command in commands.items()
                   if tier.searches_at_once or search == searches[0][0]}
        outcomes = []
        try:
            for search in commands:
                if search not in running:  # one at a time: this one starts once the one before it held
                    running[search] = _Search(search, commands[search], folder)
                others = [verifier for name, verifier in running.items() if name != search]
                outcome = _outcome(search, *running[search].result(timeout, others))
                if not outcome.ok and outcome.property is None:
                    _, trail = _run([spin, "-t", "-k", f"model.pml.{search}", "model.pml"], folder, timeout)
                    outcome.steps = [Step(m.group(1), m.group(2), m.group(3), m.group(4), int(m.group(5)))
                                     for m in _STEP.finditer(trail)]
                    named = _PROPERTY.findall(trail)
                    outcome.property = named[-1] if named else ("terminates" if search == "liveness" else None)
                    outcome.output = outcome.output + "\n--- trail ---\n" + trail
                outcomes.append(outcome)
                if not outcome.ok:
                    break
        finally:
            for verifier in running.values():  # one still searching is not wanted: the one before it failed
                verifier.stop()
        return outcomes
    finally:
        if own and not os.environ.get("PULSE_MODEL_KEEP"):
            shutil.rmtree(folder, ignore_errors=True)


__all__ = ["COMBINED", "DEFAULT", "LARGE", "RENEWALS", "TIERS", "Outcome", "Step", "Tier", "check"]
