"""Migrations: ordered, idempotent, locked, and refusing a newer database."""

from __future__ import annotations

import threading

import pytest

from pulse_trio.dburl import connect
from pulse_trio.store.migrate import (
    MigrationError, available_migrations, code_version, current_version, migrate,
)


def _fresh(database_server, name: str):
    config = database_server.with_database(f"pulse_mig_{name}")
    conn = connect(config, database=False)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{config.database}`")
    conn.close()
    return config


def test_files_are_numbered_without_gaps():
    versions = [m.version for m in available_migrations()]
    assert versions == list(range(1, len(versions) + 1))
    assert code_version() == versions[-1]


def test_migrate_twice_is_a_no_op(database_server):
    config = _fresh(database_server, "twice")
    first = migrate(config)
    assert [m.version for m in first] == [m.version for m in available_migrations()]
    assert migrate(config) == []
    assert current_version(config) == code_version()


def test_concurrent_migrations_apply_each_file_once(database_server):
    config = _fresh(database_server, "race")
    results: list[list] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(migrate(config))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    applied = sorted(m.version for r in results for m in r)
    assert applied == [m.version for m in available_migrations()]
    conn = connect(config)
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM schema_migrations")
        assert cur.fetchone()[0] == code_version()
    conn.close()


def test_database_newer_than_code_is_refused(database_server):
    config = _fresh(database_server, "newer")
    migrate(config)
    conn = connect(config)
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, 'future', '2030-01-01')",
            (code_version() + 1,),
        )
    conn.commit()
    conn.close()
    with pytest.raises(MigrationError, match="newer than this code"):
        migrate(config)
