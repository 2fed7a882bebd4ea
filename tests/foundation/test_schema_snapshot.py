"""``pulse_trio/store/schema/schema.sql`` is exactly what the migrations build: one file shows every table."""

from __future__ import annotations

import os

from pulse_trio.dburl import connect
from pulse_trio.store.schema.migrate import migrate
from pulse_trio.store.schema.snapshot import SNAPSHOT, dump


def test_the_migrations_reproduce_the_schema_snapshot(database_server):
    config = database_server.with_database("pulse_schema_snapshot")
    conn = connect(config, database=False)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{config.database}`")
    conn.close()
    migrate(config)
    conn = connect(config)
    try:
        with conn.cursor() as cur:
            built = dump(cur)
    finally:
        conn.close()
    if os.environ.get("PULSE_WRITE_SCHEMA") == "1":
        SNAPSHOT.write_text(built, encoding="utf-8")
    assert "CREATE TABLE `tasks`" in built and "CREATE TABLE `leases`" in built
    assert SNAPSHOT.read_text(encoding="utf-8") == built, (
        "the migrations no longer build pulse_trio/store/schema/schema.sql: if the change is meant, run this test"
        " with PULSE_WRITE_SCHEMA=1 and commit the file")
