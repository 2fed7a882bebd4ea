"""Service settings: one flag per setting, each with a ``PULSE_…`` variable.

Durations are seconds and accept decimals (``--lease-ttl 0.5``) so that
black-box tests can exercise real timeouts quickly. Precedence: flag, then
environment variable, then the default (docs/operations.md §3).

Two kinds. *Per-process* settings (listen addresses, TLS, the poll
interval, the hello timeout, the ping interval) shape this process only.
*Cluster* settings (:mod:`pulse_trio.cluster_settings`) must be the same in
every process, so they live in the database: one given by flag or variable
is written to the cluster when ``serve`` starts (``Settings.explicit`` names
them); one not given takes the cluster's stored value. ``Settings`` carries
either kind as the attribute the server reads (``settings.current.lease_ttl``,
``pulse_trio.server.live_settings``); a running instance replaces its copy
whenever the cluster's values change (``pulse_trio.server.settings_sync``).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path

from pulse_trio import cluster_settings as cs
from pulse_trio.managed_db import default_state_dir


def parse_seconds(text: str) -> float:
    """A positive decimal number of seconds, judged as the float the process runs by: never 0, never infinite."""
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value.is_finite() or not 0 < float(value) < math.inf:
        raise argparse.ArgumentTypeError(f"seconds must be a positive number that neither rounds to 0 nor "
                                         f"overflows: {text!r}")
    return float(value)


def parse_share(text: str) -> float:
    """A fraction of time: a number greater than 0 and at most 1, judged as the float the process runs by."""
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value.is_finite() or not 0 < value <= 1 or float(value) == 0:
        raise argparse.ArgumentTypeError(f"a share must be greater than 0 and at most 1, and not round to 0: "
                                         f"{text!r}")
    return float(value)


#: The most serve processes one ``serve`` starts (each holds a store pool and a node).
MAX_PROCESSES = 64


def parse_processes(text: str) -> int:
    """A number of processes from 1 to MAX_PROCESSES, or ``auto``: one per core this process may run on."""
    if text == "auto":
        return max(1, min(MAX_PROCESSES, len(os.sched_getaffinity(0))))
    if not text.isdigit() or not 1 <= int(text) <= MAX_PROCESSES:
        raise argparse.ArgumentTypeError(f"processes must be auto or a whole number from 1 to {MAX_PROCESSES}, "
                                         f"got {text!r}")
    return int(text)


def parse_port(text: str) -> int:
    """A TCP port to listen on, 1 to 65535 (to have one chosen, leave the flag out)."""
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"a port is a whole number from 1 to 65535, got {text!r}")
    return int(text)


def parse_listen(text: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:7380`` for IPv6); port 0 picks a free one."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"listen address must be HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def parse_cluster_value(name: str) -> Callable[[str], float | None]:
    """The argparse type of a cluster setting's flag: the cluster's own check, in seconds."""
    setting = cs.BY_NAME[name]

    def parse(text: str) -> float | None:
        try:
            return setting.seconds(setting.from_text(text))
        except cs.InvalidSetting as exc:
            raise argparse.ArgumentTypeError(exc.message) from None

    parse.__name__ = name
    return parse


def _default(name: str) -> float | None:
    return cs.BY_NAME[name].seconds(cs.DEFAULTS_MS[name])


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    """Everything `serve` needs to know; built once from flags and environment.

    The cluster settings' values here are the code's defaults (or what was
    given) until the instance has read the cluster's; ``explicit`` names the
    cluster settings given by flag or variable, which ``serve`` writes to
    the cluster at start.
    """

    database_url: str | None = None
    state_dir: Path = dataclasses.field(default_factory=default_state_dir)
    worker_listen: tuple[str, int] = ("127.0.0.1", 7380)
    http_listen: tuple[str, int] = ("127.0.0.1", 7381)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    lease_ttl: float = _default("lease_ttl")
    start_timeout: float = _default("start_timeout")
    cancel_grace: float = _default("cancel_grace")
    permit_quarantine: float | None = _default("permit_quarantine")  # None: the task's own lease ttl
    priority_step: float = _default("priority_step")
    fairness_quantum: float = _default("fairness_quantum")
    hello_timeout: float = 10.0
    # HTTP API connections: an idle one (no request under way, or a request
    # whose headers have not all arrived) is closed after http_idle_timeout; a
    # request body must arrive within http_body_timeout (else 408, closed).
    http_idle_timeout: float = 5.0
    http_body_timeout: float = 10.0
    ping_interval: float = 20.0
    poll_interval: float = 0.05
    # Seconds between this process's retention passes (each ± a fifth, at random).
    purge_interval: float = 60.0
    # The share of one connection's time the purge may take while this process dispatches
    # (docs/operations.md §10); while it dispatches nothing, PurgePace's idle share.
    purge_busy_share: float = 0.05
    # Server-process liveness: heartbeat this often; another instance declares
    # this process lost (and disconnects its sessions) once a heartbeat is
    # this late (three missed heartbeats by default).
    node_heartbeat: float = _default("node_heartbeat")
    node_lapse: float = _default("node_lapse")
    task_retention: float = _default("task_retention")
    managed_db_port: int | None = None
    # Serve processes behind the one worker and HTTP address (pulse_trio.group): each a node of its own.
    processes: int = 1
    explicit: frozenset[str] = frozenset()

    def override(self, **values: object) -> Settings:
        """These values, as if given by flag: the cluster settings among them are written at start."""
        return dataclasses.replace(self, **values, explicit=self.explicit | (values.keys() & set(cs.NAMES)))

    def cluster_ms(self, names: frozenset[str] | tuple[str, ...] = cs.NAMES) -> dict[str, int | None]:
        """The cluster settings ``names`` as held here, in milliseconds (ValueError if one is out of bounds)."""
        return {name: cs.BY_NAME[name].from_seconds(getattr(self, name)) for name in cs.NAMES if name in names}

    def given_ms(self) -> dict[str, int | None]:
        """The cluster settings given by flag or variable: what ``serve`` writes at start."""
        return self.cluster_ms(self.explicit)

    def with_cluster(self, values_ms: Mapping[str, int | None]) -> Settings:
        """A copy that carries the cluster's values (the per-process settings and ``explicit`` unchanged)."""
        return dataclasses.replace(self, **{name: cs.BY_NAME[name].seconds(ms) for name, ms in values_ms.items()})

    def check(self) -> None:
        """Refuse values and combinations that cannot work (ValueError naming the flags)."""
        unknown = self.explicit - set(cs.NAMES)
        if unknown:
            raise ValueError(f"not cluster settings: {', '.join(sorted(unknown))}")
        try:
            values = self.cluster_ms()
        except cs.InvalidSetting as exc:
            raise ValueError(exc.message) from None
        # One half of the pair given alone is judged against the cluster's other half, when it is written.
        if len(self.explicit & {"node_heartbeat", "node_lapse"}) != 1:
            problem = cs.pair_problem(values, spell=lambda name: cs.BY_NAME[name].flag)
            if problem:
                raise ValueError(problem)


# (flag, field, type, help). The env variable is PULSE_ + the field in capitals.
_OPTIONS: tuple[tuple[str, str, object, str], ...] = (
    ("--database-url", "database_url", str, "mysql://user:pass@host:port/db[?unix_socket=PATH]; "
     "TLS as ?ssl_mode=verify_identity&ssl_ca=PATH (docs/operations.md §1.2); "
     "several nodes of a Galera cluster as host1:port,host2:port,...; without it a managed local MariaDB is "
     "started under --state-dir"),
    ("--state-dir", "state_dir", Path, "home of the managed database (default $XDG_STATE_HOME/pulse-trio, "
     "else ~/.local/state/pulse-trio; never the current folder)"),
    ("--worker-listen", "worker_listen", parse_listen, "HOST:PORT for the worker WebSocket endpoint"),
    ("--http-listen", "http_listen", parse_listen, "HOST:PORT for the HTTP API"),
    ("--tls-cert", "tls_cert", Path, "PEM certificate chain: serve WSS instead of WS"),
    ("--tls-key", "tls_key", Path, "PEM private key for --tls-cert"),
    *((s.flag, s.name, parse_cluster_value(s.name),
       f"cluster setting: {s.help}" + (f" ({s.null_word!r}: {s.null_meaning})" if s.nullable else "")
       + "; given, it is written to the cluster at start, else the cluster's value applies")
      for s in cs.SETTINGS),
    ("--hello-timeout", "hello_timeout", parse_seconds, "seconds a new connection has to send worker.hello"),
    ("--http-idle-timeout", "http_idle_timeout", parse_seconds,
     "seconds an HTTP connection may stay open without a request under way, or take to send a request's headers"),
    ("--http-body-timeout", "http_body_timeout", parse_seconds,
     "seconds an HTTP request's body may take to arrive (else 408 and the connection is closed)"),
    ("--ping-interval", "ping_interval", parse_seconds, "seconds between WebSocket pings"),
    ("--poll-interval", "poll_interval", parse_seconds, "seconds between dispatcher polls for new work"),
    ("--purge-interval", "purge_interval", parse_seconds,
     "seconds between this process's passes purging tasks past their retention"),
    ("--purge-busy-share", "purge_busy_share", parse_share,
     "share of the time this process's retention purge may spend in its transactions while it dispatches"),
    ("--managed-db-port", "managed_db_port", parse_port, "TCP port of the managed MariaDB when this command starts it "
     "(default: a free one)"),
    ("--processes", "processes", parse_processes, "serve processes sharing the worker and HTTP addresses, each a "
     "node of its own with worker connections balanced across them; auto: one per core"),
)



def options_for(*fields: str) -> tuple[tuple[str, str, object, str], ...]:
    """The flag declarations of ``fields`` (for commands that take only some settings)."""
    chosen = tuple(o for o in _OPTIONS if o[1] in fields)
    missing = set(fields) - {o[1] for o in chosen}
    if missing:
        raise KeyError(f"no such setting(s): {', '.join(sorted(missing))}")
    return chosen


DATABASE_OPTIONS = options_for("database_url", "state_dir", "managed_db_port")


def env_name(field: str) -> str:
    return "PULSE_" + field.upper()


#: The variables of `serve`'s settings (one per option above): a test service leaves them to the real service.
SERVE_VARIABLES = frozenset(env_name(field) for _, field, _, _ in _OPTIONS)


def without_serve_settings(environment: Mapping[str, str]) -> dict[str, str]:
    """``environment`` less the ``PULSE_`` serve settings, for a child ``serve`` whose settings come otherwise.

    A test service takes its own from its arguments (inherited, ``PULSE_TLS_CERT`` alone would make it serve
    HTTPS on the ``http://`` URL it advertises); a group's member takes the first process's, whose flags beat
    their variables (read again by the member, one a flag overrode could make it refuse to start).
    """
    return {name: value for name, value in environment.items() if name not in SERVE_VARIABLES}


def add_options(parser: argparse.ArgumentParser, options=_OPTIONS) -> None:
    """Add the flags; defaults come from the environment, then Settings.

    A variable's text is its flag's default as text, which argparse converts
    by the flag's type only when the command that takes the flag runs: every
    command's parser is built for every command, and a variable one of them
    cannot use is no business of the others (a flag given beats it unread).

    A cluster setting neither flagged nor in the environment is left out of
    the parsed namespace altogether, which is how "not given" (use the
    cluster's value) is told from "given the default's value".
    """
    defaults = Settings()
    for flag, field, kind, help_text in options:
        raw = os.environ.get(env_name(field))
        default = argparse.SUPPRESS if field in cs.BY_NAME else getattr(defaults, field)
        if raw not in (None, ""):
            default, kind = raw, _naming(env_name(field), raw, kind)  # type: ignore[arg-type]
        parser.add_argument(flag, dest=field, type=kind, default=default,
                            help=f"{help_text} [env {env_name(field)}]")


def _naming(variable: str, text: str, kind: Callable[[str], object]) -> Callable[[str], object]:
    """``kind``, whose refusal of the variable's ``text`` (the flag's default) names the variable."""

    def parse(value: str) -> object:
        try:
            return kind(value)
        except (argparse.ArgumentTypeError, ValueError) as exc:
            if value is not text:  # the flag's own value: argparse names the flag
                raise
            raise argparse.ArgumentTypeError(f"{variable}: {exc}") from None

    parse.__name__ = getattr(kind, "__name__", variable)
    return parse


def settings_to_json(settings: Settings) -> dict[str, object]:
    """``settings`` as JSON values (a serve group's parent hands them to its members this way)."""
    values = {}
    for field in dataclasses.fields(Settings):
        value = getattr(settings, field.name)
        if isinstance(value, Path):
            value = str(value)
        elif isinstance(value, (tuple, frozenset)):
            value = sorted(value) if isinstance(value, frozenset) else list(value)
        values[field.name] = value
    return values


def settings_from_json(values: Mapping[str, object]) -> Settings:
    """The inverse of :func:`settings_to_json`."""
    given: dict[str, object] = {}
    for field in dataclasses.fields(Settings):
        value = values[field.name]
        if value is not None and "Path" in str(field.type):
            value = Path(str(value))
        elif str(field.type).startswith("tuple"):
            value = tuple(value)  # type: ignore[arg-type]
        elif str(field.type).startswith("frozenset"):
            value = frozenset(value)  # type: ignore[arg-type]
        given[field.name] = value
    return Settings(**given)  # type: ignore[arg-type]


def settings_from_args(args: argparse.Namespace) -> Settings:
    names = {f.name for f in dataclasses.fields(Settings)} - {"explicit"}
    given = {k: v for k, v in vars(args).items() if k in names}
    return Settings(**given, explicit=frozenset(given.keys() & set(cs.NAMES)))
