"""Bearer tokens in a test database: make one, revoke one by its value.

Shared by every test folder (``tests/`` is on the ``pythonpath`` of pyproject.toml).
"""

from __future__ import annotations

import datetime as dt

from pulse_trio.store.token import tokens
from pulse_trio.dburl import DatabaseConfig
from pulse_trio.store.engine.writer import connect


def make_token(config: DatabaseConfig, role: str = "worker", queues: tuple[str, ...] = (), label: str = "test",
               allow: tuple[str, ...] = ()) -> str:
    """A new bearer token stored in ``config``'s database (``allow``: its grants)."""
    conn = connect(config)
    try:
        token, _ = tokens.create_token(conn, role=role, queues=queues, label=label,
                                       now=dt.datetime.now(dt.timezone.utc), allow=allow)
        return token
    finally:
        conn.close()


def revoke_token(config: DatabaseConfig, token: str) -> None:
    """Revoke the live token ``token`` (by its value, as a caller would hold it)."""
    conn = connect(config)
    try:
        info = tokens.authenticate(conn, token)
        assert info is not None, "no live token to revoke"
        tokens.revoke_token(conn, info.token_id, now=dt.datetime.now(dt.timezone.utc))
    finally:
        conn.close()
