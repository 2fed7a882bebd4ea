"""What every command shares: finding the database, printing JSON, failing clearly."""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pymysql

from pulse_trio import config as cfg
from pulse_trio.cli.output import print_json  # noqa: F401  (re-exported: every command prints through it)
from pulse_trio.client.producer import INVALID_REQUEST, ClientError
from pulse_trio.dburl import DatabaseConfig, DatabaseUrlError, parse_database_url
from pulse_trio.managed_db import ManagedDatabaseError, ManagedDatabaseMissing, ManagedMariaDB
from pulse_trio.store.engine.codes import INSTANCE_NOT_FOUND, TASK_NOT_FOUND
from pulse_trio.store.engine.facade import StoreUnavailable
from pulse_trio.store.engine.failures import refusal, unavailable
from pulse_trio.store.schema.migrate import MigrationError, code_version, current_version, migrate


#: Exit codes of every command besides 0 (docs/operations.md §7 lists them for users).
EXIT_REFUSED = 1  # the service or the database refused: a conflict, a rule, a token
EXIT_USAGE = 2  # bad arguments (argparse's own code too): nothing was written
EXIT_NOT_FOUND = 3  # the task, token or worker named does not exist
EXIT_UNREACHABLE = 4  # no database to talk to: unreachable, or no managed database yet
EXIT_CANNOT_LISTEN = 5  # serve: a listen address is taken or invalid; nothing was recorded
EXIT_CRASHED = 70  # a service command (serve, worker run) ended on an unexpected error: a traceback, not a refusal
EXIT_INTERRUPTED = 130  # SIGINT, or a second SIGTERM for `worker run`

#: What a refusal of the client exits with, by its code; any other code is EXIT_REFUSED.
CLIENT_EXIT_CODES = {INVALID_REQUEST: EXIT_USAGE, TASK_NOT_FOUND: EXIT_NOT_FOUND, INSTANCE_NOT_FOUND: EXIT_NOT_FOUND}

LEGACY_STATE_DIR = ".pulse-state"  # where earlier versions put the managed database: the current folder


class CommandFailed(Exception):
    """A refusal to report to the user: message on stderr, exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def add_database_options(parser: argparse.ArgumentParser) -> None:
    cfg.add_options(parser, cfg.DATABASE_OPTIONS)


def add_inherited_database_options(parser: argparse.ArgumentParser) -> None:
    """The database flags on a sub-action, defaulting to "not given" so the parent's value (or env) stands."""
    for flag, field, kind, help_text in cfg.DATABASE_OPTIONS:
        parser.add_argument(flag, dest=field, type=kind, default=argparse.SUPPRESS,
                            help=f"{help_text}; also accepted before the action's name [env {cfg.env_name(field)}]")


@contextlib.contextmanager
def database(args: argparse.Namespace, *, ensure_schema: bool = True, create: bool = False) -> Iterator[DatabaseConfig]:
    """The configured database, or the managed local MariaDB when none is.

    Only a command that may create a database (``create=True``: serve,
    migrate, token create, bench) initialises a managed MariaDB and applies
    migrations; every other command uses what exists and fails with
    EXIT_UNREACHABLE when there is none. A managed server that is already
    running (e.g. under `serve`) is reused and left running; one started
    here is stopped on exit.
    """
    managed: ManagedMariaDB | None = None
    try:
        if args.database_url:
            try:
                target = parse_database_url(args.database_url)
            except DatabaseUrlError as exc:
                raise CommandFailed(str(exc), EXIT_USAGE) from None
        else:
            home = Path(args.state_dir).expanduser()
            managed = ManagedMariaDB(home / "mariadb", port=getattr(args, "managed_db_port", None))
            legacy = _legacy_home(managed)
            try:
                if legacy and create and not managed.initialised:
                    sys.stderr.write(f"pulse-trio: {legacy}; creating a new one in {home}\n")
                target = managed.start(create=create).with_database("pulse")
            except ManagedDatabaseMissing:
                raise CommandFailed(
                    f"no managed database in {home}: `pulse-trio serve` or `pulse-trio migrate` creates one "
                    "(--state-dir / PULSE_STATE_DIR name another home), or give --database-url"
                    + (f" ({legacy})" if legacy else ""), EXIT_UNREACHABLE) from None
            except ManagedDatabaseError as exc:
                raise CommandFailed(str(exc).splitlines()[0] if str(exc) else repr(exc), EXIT_UNREACHABLE) from None
        if ensure_schema:
            _check_schema(target, migrate_it=create)
        yield target
    finally:
        if managed is not None:
            managed.stop()


def _legacy_home(managed: ManagedMariaDB) -> str:
    """Earlier versions kept the managed database in ./.pulse-state: say so if one is here and unused."""
    old = Path(LEGACY_STATE_DIR, "mariadb").resolve()
    if old != managed.state_dir and (old / "data" / "mysql").is_dir():
        return (f"a managed database of an earlier version is in {old.parent}: use it with "
                f"--state-dir {old.parent}, or move that folder to the new home")
    return ""


def _check_schema(target: DatabaseConfig, *, migrate_it: bool) -> None:
    """Bring the schema to this code's version (creators), or insist that it is (everyone else)."""
    try:
        have = current_version_or_zero(target)
        if have == code_version():
            return
        if migrate_it:
            migrate(target)  # also refuses, clearly, a database newer than the code
            return
    except MigrationError as exc:
        raise CommandFailed(str(exc)) from None
    except pymysql.err.MySQLError as exc:
        raise database_failure(exc, target.url()) from None
    if have == 0:
        raise CommandFailed(f"no pulse-trio schema in the database {target.url()}: `pulse-trio migrate` "
                            "creates it", EXIT_UNREACHABLE)
    raise CommandFailed(f"the database {target.url()} has schema version {have}, this code needs "
                        f"{code_version()}: " + ("run `pulse-trio migrate`" if have < code_version()
                                                 else "upgrade the code"))


def database_failure(exc: pymysql.err.MySQLError | StoreUnavailable, url: str = "") -> CommandFailed:
    """A database error as the user's failure: no database to talk to now (exit 4: worth trying again), else
    the database's own answer, a refused login or statement, a table or column that is not there (exit 1:
    it answered, and waiting never mends it; a unit restarting on 4 would run it again for ever).

    A store that gave up after its retries is judged by the last error it met.
    """
    where = f"the database {url}" if url else "the database"
    if isinstance(exc, StoreUnavailable):
        if exc.conflict or not isinstance(exc.__cause__, pymysql.err.MySQLError):
            return CommandFailed(f"{where} is busy: {exc}", EXIT_UNREACHABLE)
        exc = exc.__cause__
    refused = refusal(exc)
    if refused == "login":
        return CommandFailed(f"{where} refused the login: {_reason(exc)}", EXIT_REFUSED)
    if refused == "tls":
        return CommandFailed(f"{where} fails the TLS the URL's ssl_mode requires: {_reason(exc)}", EXIT_REFUSED)
    if not unavailable(exc):  # a refused statement included: the server answered, and waiting never mends it
        return CommandFailed(f"{where} refused: {_reason(exc)}", EXIT_REFUSED)
    return CommandFailed(f"cannot reach {where}: {_reason(exc)}", EXIT_UNREACHABLE)


def _reason(exc: Exception) -> str:
    return str(exc.args[1]) if len(exc.args) > 1 else str(exc)


def current_version_or_zero(target: DatabaseConfig) -> int:
    try:
        return current_version(target)
    except pymysql.err.OperationalError as exc:
        if exc.args and exc.args[0] == 1049:  # unknown database: migrate creates it
            return 0
        raise


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows each flag's default, unless there is none to show or the help already says it.

    A switch (a flag taking no value) shows none: ``--no-cancel-notifications
    (default: True)`` would read as if the switch were on by default.
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.nargs == 0 or action.default in (None, False, argparse.SUPPRESS) or "default" in text.lower():
            return text
        return f"{text} (default: {_shown(action.default)})".replace("%", "%%").replace("%%(", "%(")


def _shown(value: object) -> str:
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], int):  # a listen address
        host, port = value
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) or "none"
    return str(value)


class CliParser(argparse.ArgumentParser):
    """Every parser of the command (subcommands inherit the class): defaults shown in ``--help``."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """A bad argument is one line on stderr and exit 2 (docs/operations.md §7.1), not the whole usage.

        ``--help`` still prints the usage; a mistyped flag should not bury
        the one line that says what was wrong.
        """
        self.exit(EXIT_USAGE, f"{self.prog}: error: {' '.join(message.split())}\n")


def fail(message: str, exit_code: int = 1) -> NoReturn:
    raise CommandFailed(message, exit_code)


#: The cyclic collector's young-generation threshold in a long-running process, well above CPython's
#: default: a task makes many short-lived containers (frames, messages, commands) that reference counting
#: frees anyway, and at the default the collector took a visible share of the process's CPU
#: (docs/performance.md).
YOUNG_GENERATION_THRESHOLD = 10_000


@contextlib.contextmanager
def tuned_collector() -> Iterator[None]:
    """Collect the young generation less often while the block runs, then as before.

    Never more often than already set, and a disabled collector stays off; the older generations
    keep their thresholds, which count the young generation's collections, so they are collected
    less often in the same proportion. Only garbage in reference cycles waits longer to be freed.
    A command run in-process (a test, a program calling ``main``) leaves the collector as it found it.
    """
    saved = gc.get_threshold()
    young, older, oldest = saved
    gc.set_threshold(max(young, YOUNG_GENERATION_THRESHOLD), older, oldest)
    try:
        yield
    finally:
        gc.set_threshold(*saved)


def run_guarded(fn, *, long_running: bool = False):
    """Wrap a command body so CommandFailed, or a ClientError it lets through, becomes a message and an exit code.

    A ClientError's exit code follows its code (``CLIENT_EXIT_CODES``): input
    the client refused is a bad argument, as the same input is when the
    command checks it itself.

    A Ctrl-C is exit 130 (``main``) in every command, also when Trio raised it in a task and its
    nurseries grouped it (:func:`ctrl_c_alone`): one more Ctrl-C while a service stops is no crash.

    ``long_running``: a service process (``serve``, ``worker run``), whose body runs with the
    collector tuned for it (:func:`tuned_collector`), and whose unexpected error exits
    EXIT_CRASHED with its traceback: Python's own exit 1 would read as a refusal, which a
    service manager is told not to restart (deploy/systemd).
    """

    def runner(args: argparse.Namespace) -> int:
        try:
            with tuned_collector() if long_running else contextlib.nullcontext():
                return int(fn(args) or 0)
        except CommandFailed as exc:
            sys.stderr.write(f"pulse-trio: {exc}\n")
            return exc.exit_code
        except ClientError as exc:
            sys.stderr.write(f"pulse-trio: {exc.message}\n")
            return CLIENT_EXIT_CODES.get(exc.code, EXIT_REFUSED)
        except (pymysql.err.MySQLError, StoreUnavailable) as exc:  # the database went away, or answered no
            failure = database_failure(exc)
            sys.stderr.write(f"pulse-trio: {failure}\n")
            return failure.exit_code
        except BaseException as exc:
            if ctrl_c_alone(exc):
                raise KeyboardInterrupt from None  # ungrouped, for main to answer
            if not long_running or _interrupted(exc):
                raise
            traceback.print_exception(exc)
            sys.stderr.write(f"pulse-trio: ended on an unexpected error (the traceback above); exit {EXIT_CRASHED}\n")
            return EXIT_CRASHED

    runner.long_running = long_running  # type: ignore[attr-defined]
    return runner


def ctrl_c_alone(exc: BaseException) -> bool:
    """A KeyboardInterrupt, alone or in a group of nothing else (Trio's nurseries group one raised in a task)."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(KeyboardInterrupt)[1] is None
    return isinstance(exc, KeyboardInterrupt)


def _interrupted(exc: BaseException) -> bool:
    """Ctrl-C or an exit asked for (alone or grouped): the command's own answers to them stand."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_interrupted(inner) for inner in exc.exceptions)
    return isinstance(exc, (KeyboardInterrupt, SystemExit))
