"""Service settings: one flag per setting, each with a ``PULSE_…`` variable.

Durations are seconds and accept decimals (``--lease-ttl 0.5``) so that
black-box tests can exercise real timeouts quickly. Precedence: flag, then
environment variable, then the default of docs/operations.md §3.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from decimal import Decimal, InvalidOperation
from pathlib import Path


def parse_seconds(text: str) -> float:
    """A positive decimal number of seconds."""
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value.is_finite() or value <= 0:
        raise argparse.ArgumentTypeError(f"seconds must be a positive number: {text!r}")
    return float(value)


def parse_listen(text: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:7380`` for IPv6); port 0 picks a free one."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"listen address must be HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    """Everything `serve` needs to know; built once from flags and environment."""

    database_url: str | None = None
    state_dir: Path = Path(".pulse-state")
    worker_listen: tuple[str, int] = ("127.0.0.1", 7380)
    http_listen: tuple[str, int] = ("127.0.0.1", 7381)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    lease_ttl: float = 30.0
    start_timeout: float = 30.0
    cancel_grace: float = 30.0
    permit_quarantine: float | None = None  # None: the task's own lease ttl
    priority_step: float = 30.0
    hello_timeout: float = 10.0
    ping_interval: float = 20.0
    poll_interval: float = 0.05
    # Server-process liveness: heartbeat this often; another instance declares
    # this process lost (and disconnects its sessions) once a heartbeat is
    # this late. 15 s is three missed heartbeats.
    node_heartbeat: float = 5.0
    node_lapse: float = 15.0
    managed_db_port: int | None = None

    def check(self) -> None:
        """Refuse combinations that cannot work (ValueError naming the flags)."""
        if self.node_lapse < 2 * self.node_heartbeat:
            raise ValueError(f"--node-lapse ({self.node_lapse:g}s) must be at least twice --node-heartbeat "
                             f"({self.node_heartbeat:g}s), or one late heartbeat would declare a live process lost")


# (flag, field, type, help). The env variable is PULSE_ + the field in capitals.
_OPTIONS: tuple[tuple[str, str, object, str], ...] = (
    ("--database-url", "database_url", str, "mysql://user:pass@host:port/db[?unix_socket=PATH]; "
     "without it a managed local MariaDB is started under --state-dir"),
    ("--state-dir", "state_dir", Path, "folder for the managed database and other local state"),
    ("--worker-listen", "worker_listen", parse_listen, "HOST:PORT for the worker WebSocket endpoint"),
    ("--http-listen", "http_listen", parse_listen, "HOST:PORT for the HTTP API"),
    ("--tls-cert", "tls_cert", Path, "PEM certificate chain: serve WSS instead of WS"),
    ("--tls-key", "tls_key", Path, "PEM private key for --tls-cert"),
    ("--lease-ttl", "lease_ttl", parse_seconds, "seconds a started lease lives without renewal"),
    ("--start-timeout", "start_timeout", parse_seconds, "seconds an offer may wait for task.start"),
    ("--cancel-grace", "cancel_grace", parse_seconds, "seconds a cancelled task may keep running"),
    ("--permit-quarantine", "permit_quarantine", parse_seconds,
     "seconds a key permit stays quarantined after a lost lease (default: the task's lease ttl)"),
    ("--priority-step", "priority_step", parse_seconds, "seconds of waiting one priority level is worth"),
    ("--hello-timeout", "hello_timeout", parse_seconds, "seconds a new connection has to send worker.hello"),
    ("--ping-interval", "ping_interval", parse_seconds, "seconds between WebSocket pings"),
    ("--poll-interval", "poll_interval", parse_seconds, "seconds between dispatcher polls for new work"),
    ("--node-heartbeat", "node_heartbeat", parse_seconds,
     "seconds between this process's liveness heartbeats (sent by a task of their own)"),
    ("--node-lapse", "node_lapse", parse_seconds,
     "seconds without a heartbeat after which another instance declares this process lost and disconnects "
     "its sessions (at least twice --node-heartbeat)"),
    ("--managed-db-port", "managed_db_port", int, "TCP port of the managed MariaDB (default: a free one)"),
)



def options_for(*fields: str) -> tuple[tuple[str, str, object, str], ...]:
    """The flag declarations of ``fields`` (for commands that take only some settings)."""
    chosen = tuple(o for o in _OPTIONS if o[1] in fields)
    missing = set(fields) - {o[1] for o in chosen}
    if missing:
        raise KeyError(f"no such setting(s): {', '.join(sorted(missing))}")
    return chosen


DATABASE_OPTIONS = options_for("database_url", "state_dir")


def env_name(field: str) -> str:
    return "PULSE_" + field.upper()


def add_options(parser: argparse.ArgumentParser, options=_OPTIONS) -> None:
    """Add the flags; defaults come from the environment, then Settings."""
    defaults = Settings()
    for flag, field, kind, help_text in options:
        raw = os.environ.get(env_name(field))
        default = getattr(defaults, field)
        if raw not in (None, ""):
            try:
                default = kind(raw)  # type: ignore[operator]
            except (argparse.ArgumentTypeError, ValueError) as exc:
                parser.error(f"{env_name(field)}: {exc}")
        parser.add_argument(flag, dest=field, type=kind, default=default,
                            help=f"{help_text} [env {env_name(field)}]")


def settings_from_args(args: argparse.Namespace) -> Settings:
    names = {f.name for f in dataclasses.fields(Settings)}
    return Settings(**{k: v for k, v in vars(args).items() if k in names})
