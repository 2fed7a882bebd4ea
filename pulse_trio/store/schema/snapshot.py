"""The schema the migrations produce, as one file a reader can open: ``schema.sql`` beside this module.

The migrations (``migrations/*.sql``) stay the way a database gets there;
``schema.sql`` is where a reader sees every table as it is now. It is a
snapshot, not a source: ``tests/foundation/test_schema_snapshot.py``
migrates an empty database and checks that :func:`dump` of it equals the
file, so a migration that changes the schema fails the suite until the
snapshot is written again (``PULSE_WRITE_SCHEMA=1`` on that test writes it).
"""

from __future__ import annotations

import pathlib
import re
from typing import Any

#: Where the snapshot lives.
SNAPSHOT = pathlib.Path(__file__).with_name("schema.sql")
_HEADER = ("-- Every table as the migrations leave it (pulse_trio/store/schema/migrations). Generated, not applied:\n"
           "-- tests/foundation/test_schema_snapshot.py checks it; PULSE_WRITE_SCHEMA=1 on that test rewrites it.\n")
#: Counters that depend on the rows written, not on the schema.
_AUTO_INCREMENT = re.compile(r" AUTO_INCREMENT=\d+")


def dump(cursor: Any) -> str:
    """``SHOW CREATE TABLE`` of every base table of the cursor's database, by name, as one SQL text."""
    cursor.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()"
                   " AND table_type = 'BASE TABLE' ORDER BY table_name")
    tables = [name for (name,) in cursor.fetchall()]
    parts = [_HEADER]
    for name in tables:
        cursor.execute(f"SHOW CREATE TABLE `{name}`")
        parts.append(_AUTO_INCREMENT.sub("", cursor.fetchone()[1]) + ";\n")
    return "\n".join(parts)


__all__ = ["SNAPSHOT", "dump"]
