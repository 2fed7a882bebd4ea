"""Versioned SQL migrations, applied in order under a named lock.

Files live beside this module as ``migrations/NNNN_name.sql``; statements
are separated by a ``;`` at the end of a line. ``GET_LOCK`` serialises two
instances starting at once: the second waits, then finds nothing to do.
MySQL DDL commits implicitly, so each file is recorded right after it runs;
a file that fails half-way leaves the version unrecorded and the error loud.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from importlib import resources

from pulse_trio.dburl import DatabaseConfig, connect, create_database

LOCK_NAME = "pulse_trio.migrate"
LOCK_TIMEOUT_S = 60
_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


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
    for entry in resources.files("pulse_trio.store").joinpath("migrations").iterdir():
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


def current_version(config: DatabaseConfig) -> int:
    """The schema version recorded in the database (0 for an empty one)."""
    conn = connect(config)
    try:
        with conn.cursor() as cur:
            return _read_version(cur)
    finally:
        conn.close()


def _read_version(cur) -> int:
    cur.execute(
        "SELECT COUNT(*) FROM information_schema.tables "
        "WHERE table_schema = DATABASE() AND table_name = 'schema_migrations'"
    )
    if cur.fetchone()[0] == 0:
        return 0
    cur.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")
    return int(cur.fetchone()[0])


def migrate(config: DatabaseConfig, *, now: dt.datetime | None = None, upto: int | None = None) -> list[Migration]:
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
        conn.autocommit(True)
        with conn.cursor() as cur:
            cur.execute("SELECT GET_LOCK(%s, %s)", (LOCK_NAME, LOCK_TIMEOUT_S))
            if cur.fetchone()[0] != 1:
                raise MigrationError(f"could not take the migration lock within {LOCK_TIMEOUT_S}s")
            try:
                cur.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations ("
                    " version INT NOT NULL PRIMARY KEY,"
                    " name VARCHAR(128) NOT NULL,"
                    " applied_at DATETIME(6) NOT NULL"
                    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
                )
                have = _read_version(cur)
                newest = migrations[-1].version if migrations else 0
                if have > newest:
                    raise MigrationError(
                        f"the database is at schema version {have}, newer than this code "
                        f"(version {newest}); upgrade pulse-trio before using this database"
                    )
                done: list[Migration] = []
                for migration in migrations:
                    if migration.version <= have or (upto is not None and migration.version > upto):
                        continue
                    for statement in migration.statements():
                        cur.execute(statement)
                    cur.execute(
                        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                        (migration.version, migration.name, applied_at),
                    )
                    done.append(migration)
                return done
            finally:
                cur.execute("SELECT RELEASE_LOCK(%s)", (LOCK_NAME,))
    finally:
        conn.close()
