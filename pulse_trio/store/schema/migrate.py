"""Versioned SQL migrations, applied in order under a committed lock row.

Files live beside this module as ``migrations/NNNN_name.sql``; statements
are separated by a ``;`` at the end of a line. A row in ``schema_lock``
(an owner and an expiry, committed before any file runs) serialises two
instances starting at once, on one server or on two nodes of a cluster:
``GET_LOCK`` would be local to one node of a Galera cluster, a committed row
is not (two nodes inserting it at once conflict, and one of them loses).
A run that finds every file recorded needs no lock (a recorded file stays
recorded); one that finds a file missing takes the lock and reads the
versions again under it: the second of two instances waits, then finds
nothing to do. An owner that died
holding the lock loses it at its expiry; the holder extends it before each
file.

MySQL DDL commits implicitly, so each file is recorded right after it runs.
A statement that meets "already exists" (the lock expired under a slow run,
or another process won a race the lock could not see) re-reads the recorded
versions: if the file is recorded meanwhile, the run moves on; otherwise the
file was half-applied and the error is loud.

One statement may run longer than the lock's ttl (a table rebuild on
millions of rows takes minutes) while the holder's connection is busy with
it, so a keeper thread extends the lock from a connection of its own for as
long as the run lasts, and releases it when the run fails (the holder's
connection may be in mid-statement then; a run that succeeded releases
through its own).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
import secrets
import socket
import threading
import time
from importlib import resources

import pymysql

from pulse_trio.dburl import DatabaseConfig, set_causal_reads
from pulse_trio.store.engine.writer import connect, create_database
from pulse_trio.store.engine.failures import CONFLICT, classify

LOCK_NAME = "pulse_trio.migrate"
#: How long to wait for another run's lock before giving up.
LOCK_TIMEOUT_S = 60
#: A holder that stops extending its lock loses it after this long.
LOCK_TTL_S = 30
_LOCK_POLL_S = 0.1
_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

#: "Already exists" / "does not exist" answers to DDL that another run has applied
#: already: table, column, index, constraint, and a recorded version.
_ALREADY_DONE = frozenset({1050, 1060, 1061, 1062, 1826, 1091})


class MigrationError(RuntimeError):
    """The database cannot be brought to the code's schema version."""


@dataclasses.dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    def statements(self) -> list[str]:
        chunks = re.split(r";[ \t]*(?:\r?\n|$)", self.sql)
        return [c.strip() for c in chunks if _strip_comments(c).strip()]


def _strip_comments(sql: str) -> str:
    return "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))


def available_migrations() -> list[Migration]:
    """Every migration shipped with the package, in version order."""
    found: list[Migration] = []
    for entry in resources.files("pulse_trio.store.schema").joinpath("migrations").iterdir():
        match = _FILE_RE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"two migration files share a version: {versions}")
    return found


def code_version() -> int:
    migrations = available_migrations()
    return migrations[-1].version if migrations else 0


def current_version(config: DatabaseConfig, *, io_timeout: float | None = None) -> int:
    """The schema version recorded in the database (0 for an empty one); ``io_timeout``: as ``connect``."""
    conn = connect(config, io_timeout=io_timeout)
    try:
        with conn.cursor() as cur:
            set_causal_reads(cur)
            return _read_version(cur)
    finally:
        conn.close()


#: The columns of pulse-trio's own ``schema_migrations`` (``_MACHINERY``).
_RECORD_COLUMNS = ("applied_at", "name", "version")


def _read_version(cur) -> int:
    """The recorded version; a ``schema_migrations`` that another application made is refused, not read.

    Other tools keep a table of that name too (golang-migrate, dbmate, Rails,
    Ecto): read as ours, its version had migrate create tables among the
    other application's, or report a database with none of ours up to date.
    """
    cur.execute(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = DATABASE() AND table_name = 'schema_migrations' ORDER BY column_name"
    )
    columns = tuple(row[0] for row in cur.fetchall())
    if not columns:
        return 0
    if columns != _RECORD_COLUMNS:
        raise MigrationError(
            f"the database's schema_migrations table is not pulse-trio's (its columns: {', '.join(columns)}): "
            f"it belongs to another application; give pulse-trio a database of its own"
        )
    cur.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")
    return int(cur.fetchone()[0])


def _error_code(exc: BaseException) -> int:
    return exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0


class _Lock:
    """The committed lock row: taken, extended before each file, released at the end."""

    def __init__(self, conn, ttl_s: float = LOCK_TTL_S, owner: str | None = None) -> None:
        self.conn = conn
        self.ttl_s = ttl_s
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"

    def _commit_one(self, sql: str, args: tuple) -> int:
        return _commit_statement(self.conn, sql, args)

    def try_take(self) -> bool:
        try:
            self._commit_one(
                "INSERT INTO schema_lock (name, owner, expires_at) "
                "VALUES (%s, %s, UTC_TIMESTAMP(6) + INTERVAL %s MICROSECOND)",
                (LOCK_NAME, self.owner, int(self.ttl_s * 1e6)))
            return True
        except pymysql.err.MySQLError as exc:
            if _error_code(exc) != 1062 and classify(exc) != CONFLICT:
                raise
        try:  # held: take it only if its holder let it expire
            return self._commit_one(
                "UPDATE schema_lock SET owner = %s, expires_at = UTC_TIMESTAMP(6) + INTERVAL %s MICROSECOND "
                "WHERE name = %s AND expires_at < UTC_TIMESTAMP(6)",
                (self.owner, int(self.ttl_s * 1e6), LOCK_NAME)) == 1
        except pymysql.err.MySQLError as exc:
            if classify(exc) == CONFLICT:
                return False
            raise

    def take(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.try_take():
            if time.monotonic() >= deadline:
                raise MigrationError(f"could not take the migration lock within {timeout_s:g}s")
            time.sleep(_LOCK_POLL_S)

    def extend(self) -> None:
        if self._commit_one(
                "UPDATE schema_lock SET expires_at = UTC_TIMESTAMP(6) + INTERVAL %s MICROSECOND "
                "WHERE name = %s AND owner = %s",
                (int(self.ttl_s * 1e6), LOCK_NAME, self.owner)) != 1:
            raise MigrationError("the migration lock expired under this run and another run took it")

    def release(self) -> None:
        self._commit_one("DELETE FROM schema_lock WHERE name = %s AND owner = %s", (LOCK_NAME, self.owner))


class _Keeper:
    """Keeps the run's lock alive from a connection of its own while the holder's runs the files; releases it.

    Extended only between files, the lock expired under a file that ran longer
    than its ttl: another run took it and ran the same file, and both failed
    (one on a lock it no longer held, the other on a file "half-applied").
    The keeper's connection is idle when the run ends, so a failing run's
    release goes through it even when an interrupt (Ctrl-C, serve's SIGTERM)
    left the holder's in mid-statement: released there, its error hid the
    interrupt. A run that succeeded releases through the holder's.
    """

    def __init__(self, config: DatabaseConfig, lock: _Lock) -> None:
        self.lock = _Lock(connect(config), lock.ttl_s, owner=lock.owner)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, name="pulse-trio-migration-lock", daemon=True)

    def start(self) -> None:
        """Begin extending: the lock is taken."""
        self._thread.start()

    def _keep(self) -> None:
        while not self._stop.wait(self.lock.ttl_s / 3):
            try:
                self.lock.extend()
            except MigrationError:
                return  # lost: the holder's own extend before its next file says so
            except pymysql.err.MySQLError:
                continue  # a passing failure: the next turn tries again

    def close(self, *, failing: bool) -> None:
        """Stop extending; a run that fails is released here, and a release that fails leaves the row to expire.

        A run that succeeded releases through the holder's own connection,
        which has just answered: this one may have been lost meanwhile (its
        extends fail quietly), and a success is not made a failure by it.
        """
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        try:
            if failing:
                self.lock.release()
        except pymysql.err.MySQLError:
            pass  # the run fails anyway, with its own error
        finally:
            self.lock.conn.close()


def _commit_statement(conn, sql: str, args: tuple, attempts: int = 5) -> int:
    """One statement in its own transaction; a conflict at COMMIT (a cluster's certification) runs it again."""
    for attempt in range(attempts):
        cur = conn.cursor()
        try:
            changed = cur.execute(sql, args)
            conn.commit()
            return changed
        except pymysql.err.MySQLError as exc:
            conn.rollback()
            if classify(exc) != CONFLICT or attempt == attempts - 1:
                raise
            time.sleep(_LOCK_POLL_S)
        finally:
            cur.close()
    raise AssertionError("unreachable")


#: Tables of the migration machinery itself, created before any file runs.
_MACHINERY = {
    "schema_lock": (
        "CREATE TABLE IF NOT EXISTS schema_lock ("
        " name VARCHAR(64) NOT NULL PRIMARY KEY,"
        " owner VARCHAR(128) NOT NULL,"
        " expires_at DATETIME(6) NOT NULL"
        ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"),
    # The writer every process of a multi-host URL writes through (``writer.py``):
    # outside the versioned files, like the lock, since it serves the connection layer.
    "db_writer": (
        "CREATE TABLE IF NOT EXISTS db_writer ("
        " id TINYINT NOT NULL PRIMARY KEY,"
        " node VARCHAR(255) NOT NULL,"
        " chosen_at DATETIME(6) NOT NULL,"
        " chosen_by VARCHAR(128) NOT NULL"
        ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"),
    "schema_migrations": (
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INT NOT NULL PRIMARY KEY,"
        " name VARCHAR(128) NOT NULL,"
        " applied_at DATETIME(6) NOT NULL"
        ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"),
}


def _create_machinery(cur) -> None:
    """Create the machinery tables that are missing, and only those.

    On a Galera cluster every DDL statement, even ``CREATE TABLE IF NOT
    EXISTS`` of a table that exists, is replicated in total order and aborts
    any transaction that touches its table on any node: a second run must not
    abort the first one's recording of a file.
    """
    cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()"
                " AND table_name IN %s", (tuple(_MACHINERY),))
    present = {row[0] for row in cur.fetchall()}
    for name, ddl in _MACHINERY.items():
        if name not in present:
            cur.execute(ddl)


def migrate(config: DatabaseConfig, *, now: dt.datetime | None = None, upto: int | None = None,
            lock_timeout_s: float = LOCK_TIMEOUT_S, lock_ttl_s: float = LOCK_TTL_S) -> list[Migration]:
    """Bring the database up to the code's version (or ``upto``); return what was applied.

    Re-running is a no-op. A database newer than the code is refused rather
    than silently used with a schema this code does not understand.
    ``upto`` stops at an older version, to test a data migration.
    """
    create_database(config)
    applied_at = (now or dt.datetime.now(dt.timezone.utc)).replace(tzinfo=None)
    migrations = available_migrations()
    conn = connect(config)
    try:
        # Each statement commits as it runs, as if typed by hand: a file's seed rows are there
        # the moment its table is (an instance already running may write to the table at once).
        conn.autocommit(True)
        with conn.cursor() as cur:
            set_causal_reads(cur)
            have = _read_version(cur)  # refuses another application's schema_migrations before creating anything
            _create_machinery(cur)  # DDL: committed implicitly (a replicated, ordered event on a cluster)
        conn.commit()
        if not _pending(migrations, have, upto):  # a recorded file stays recorded: no run can undo it
            return []
        lock = _Lock(conn, lock_ttl_s)
        keeper = _Keeper(config, lock)
        try:
            lock.take(lock_timeout_s)
            keeper.start()
            done = _apply(conn, lock, migrations, applied_at, upto)
        except BaseException:
            keeper.close(failing=True)
            raise
        keeper.close(failing=False)
        lock.release()  # through the holder's connection, idle and just heard from
        return done
    finally:
        conn.close()


def _pending(migrations: list[Migration], have: int, upto: int | None) -> list[Migration]:
    """The files a database at version ``have`` lacks (up to ``upto``); refuses a database newer than the code."""
    newest = migrations[-1].version if migrations else 0
    if have > newest:
        raise MigrationError(
            f"the database is at schema version {have}, newer than this code "
            f"(version {newest}); upgrade pulse-trio before using this database"
        )
    return [m for m in migrations if m.version > have and (upto is None or m.version <= upto)]


def _apply(conn, lock: _Lock, migrations: list[Migration], applied_at: dt.datetime,
           upto: int | None) -> list[Migration]:
    """Under the lock: the version read again (another run may have applied files since), then what is missing."""
    with conn.cursor() as cur:
        have = _read_version(cur)
    conn.commit()
    done: list[Migration] = []
    for migration in _pending(migrations, have, upto):
        lock.extend()
        if apply_file(conn, migration, applied_at):
            done.append(migration)
    return done


def apply_file(conn, migration: Migration, applied_at: dt.datetime) -> bool:
    """Run one file and record it; False when another run had applied it meanwhile."""
    try:
        with conn.cursor() as cur:
            for statement in migration.statements():
                cur.execute(statement)
        conn.commit()
        # Recorded in a transaction of its own: a conflict there (another node's DDL on the
        # table, a certification failure) is retried without running the file again.
        _commit_statement(conn, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                          (migration.version, migration.name, applied_at))
        return True
    except pymysql.err.MySQLError as exc:
        conn.rollback()
        if _error_code(exc) not in _ALREADY_DONE:
            raise
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM schema_migrations WHERE version = %s", (migration.version,))
            recorded = cur.fetchone()[0] == 1
        conn.commit()
        if not recorded:
            detail = exc.args[1] if len(exc.args) > 1 else str(exc)
            raise MigrationError(
                f"migration {migration.version:04d}_{migration.name} met {detail!r} but is not recorded: "
                f"the schema was changed by hand or a run stopped half-way"
            ) from exc
        return False
