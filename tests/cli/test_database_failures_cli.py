"""What a command says when the database fails it: one line and the code of docs/operations.md §7.1, never a traceback.

1 when the database answered and said no (a statement it refuses, a table
or column that is not there): waiting never mends it. 4 when it could not
be reached or is too busy to serve now: worth trying again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import secrets
from collections.abc import Iterator

import pytest

from cli_support import run
from pulse_trio.dburl import DatabaseConfig, connect
from pulse_trio.store.engine.writer import drop_database
from pulse_trio.store.schema.migrate import available_migrations, code_version, migrate

pytestmark = pytest.mark.live  # it runs commands in processes of their own

EXIT_REFUSED = 1
EXIT_UNREACHABLE = 4


@contextlib.contextmanager
def fresh_database(server: DatabaseConfig, upto: int | None = None) -> Iterator[DatabaseConfig]:
    """A database of its own, migrated (up to ``upto``), for a test that changes its schema by hand."""
    config = server.with_database(f"pulse_broken_{secrets.token_hex(4)}")
    migrate(config, upto=upto)
    try:
        yield config
    finally:
        drop_database(config)


def _execute(config: DatabaseConfig, *statements: str) -> None:
    conn = connect(config)
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
        conn.commit()
    finally:
        conn.close()


def _one_line(done) -> str:
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    return done.stderr


def _last_files_table() -> str:
    """The table the code's last migration file changes first (whatever file is last now)."""
    first = available_migrations()[-1].statements()[0]
    match = re.search(r"\b(?:ALTER TABLE|UPDATE|INSERT INTO|CREATE INDEX \w+ ON)\s+`?(\w+)", first, re.IGNORECASE)
    assert match, first
    return match.group(1)


@pytest.fixture(scope="module")
def half_migrated(database_server) -> Iterator[DatabaseConfig]:
    """A database one file short of the code's version, whose table that file changes was dropped by hand."""
    with fresh_database(database_server, upto=code_version() - 1) as config:
        _execute(config, "SET FOREIGN_KEY_CHECKS = 0", f"DROP TABLE {_last_files_table()}")
        yield config


@pytest.mark.parametrize("command", [
    ["migrate"], ["token", "create", "--role", "worker"],
    ["serve", "--worker-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--log-level", "warning"],
], ids=lambda c: c[0])
def test_a_migration_statement_the_database_refuses_is_one_line_and_exit_1(half_migrated, command):
    """The last file's statement meets 1146 "doesn't exist", which no wait mends."""
    done = run(*command, "--database-url", half_migrated.url(redact=False))
    assert done.returncode == EXIT_REFUSED, done
    line = _one_line(done)
    assert _last_files_table() in line and "doesn't exist" in line and "cannot reach" not in line, line


@pytest.fixture(scope="module")
def column_dropped(database_server) -> Iterator[DatabaseConfig]:
    """A database at the code's version, with a column its statements read dropped by hand."""
    with fresh_database(database_server) as config:
        _execute(config, "ALTER TABLE cluster_settings DROP COLUMN updated_by")
        yield config


@pytest.mark.parametrize("command", [["settings", "show"], ["settings", "set", "cancel_grace", "3"]],
                         ids=lambda c: " ".join(c[:2]))
def test_a_column_that_is_not_there_is_a_refusal_not_unreachable(column_dropped, command):
    """1054 "Unknown column" is the database's answer: exit 1, not "cannot reach"."""
    done = run(*command, "--database-url", column_dropped.url(redact=False))
    assert done.returncode == EXIT_REFUSED, done
    line = _one_line(done)
    assert "Unknown column" in line and "cannot reach" not in line, line


@pytest.fixture
def one_connection_an_hour(db):
    """The test database's URL for a user that may open one connection an hour: the schema check takes it."""
    user, password = f"pulse_once_{secrets.token_hex(3)}", "once-pw"
    conn = connect(db)
    try:
        with conn.cursor() as cur:
            for host in ("%", "localhost"):
                cur.execute(f"CREATE USER '{user}'@'{host}' IDENTIFIED BY '{password}' "
                            "WITH MAX_CONNECTIONS_PER_HOUR 1")
                cur.execute(f"GRANT ALL ON `{db.database}`.* TO '{user}'@'{host}'")
        yield dataclasses.replace(db, user=user, password=password)
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%', '{user}'@'localhost'")
        conn.close()


def test_a_database_that_stops_serving_after_the_schema_check_is_one_line_and_exit_4(one_connection_an_hour):
    """The store gives up (StoreUnavailable) after the check passed: unreachable for now, not a traceback."""
    done = run("queues", "--database-url", one_connection_an_hour.url(redact=False))
    assert done.returncode == EXIT_UNREACHABLE, done
    line = _one_line(done)
    assert "max_connections_per_hour" in line and "once-pw" not in line, line
