"""Database URLs and raw connections.

One parser for every entry point (serve, migrate, CLI, tests) so that
``mysql://user:pass@host:port/db?unix_socket=/path`` means the same thing
everywhere. Connections are always utf8mb4, UTC, autocommit off: the
transaction functions rely on all three.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pymysql
from pymysql.constants import FIELD_TYPE
from pymysql.converters import conversions, convert_datetime, escape_datetime

_SCHEMES = {"mysql", "mariadb", "mysql+pymysql"}


def _read_datetime(text: str) -> dt.datetime | str:
    """DATETIME(6) text -> naive datetime through the C parser.

    PyMySQL's own converter is a regex plus int() per field; a task's
    commands read about a dozen timestamps, so this is on the hot path.
    Anything ``fromisoformat`` refuses goes to PyMySQL's converter.
    """
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return convert_datetime(text)


def _write_datetime(value: dt.datetime, mapping: Any = None) -> str:
    """A naive datetime -> its SQL literal through the C ``isoformat``.

    The same text as PyMySQL's ``escape_datetime`` (fraction only when
    there are microseconds) at a third of the cost; a task's commands send
    about a dozen timestamps. Aware values keep PyMySQL's behaviour.
    """
    if value.tzinfo is not None:
        return escape_datetime(value, mapping)
    return "'" + value.isoformat(" ") + "'"


_CONVERSIONS = {**conversions, FIELD_TYPE.DATETIME: _read_datetime, FIELD_TYPE.TIMESTAMP: _read_datetime,
                dt.datetime: _write_datetime}


class DatabaseUrlError(ValueError):
    """The database URL cannot be understood."""


@dataclasses.dataclass(frozen=True, slots=True)
class DatabaseConfig:
    """Where the database is and how to log in; never carries a live socket."""

    database: str
    user: str = "root"
    password: str = ""
    host: str = "localhost"
    port: int = 3306
    unix_socket: str | None = None
    connect_timeout: float = 10.0

    def with_database(self, name: str) -> DatabaseConfig:
        return dataclasses.replace(self, database=name)

    def connect_kwargs(self, *, database: bool = True) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "user": self.user,
            "password": self.password,
            "charset": "utf8mb4",
            "autocommit": False,
            "connect_timeout": self.connect_timeout,
            "init_command": "SET time_zone = '+00:00'",
            "conv": _CONVERSIONS,
        }
        if self.unix_socket:
            kwargs["unix_socket"] = self.unix_socket
        else:
            kwargs["host"] = self.host
            kwargs["port"] = self.port
        if database:
            kwargs["database"] = self.database
        return kwargs

    def url(self, *, redact: bool = True) -> str:
        """The URL form, with the password hidden unless asked for."""
        password = "***" if (redact and self.password) else self.password
        auth = self.user + (f":{password}" if password else "")
        query = f"?unix_socket={self.unix_socket}" if self.unix_socket else ""
        return f"mysql://{auth}@{self.host}:{self.port}/{self.database}{query}"


def parse_database_url(url: str) -> DatabaseConfig:
    """Parse ``mysql://user:pass@host:port/db[?unix_socket=/path]``."""
    parts = urlsplit(url)
    if parts.scheme not in _SCHEMES:
        raise DatabaseUrlError(f"unsupported database URL scheme {parts.scheme!r}; use mysql://")
    database = unquote(parts.path.lstrip("/"))
    if not database or "/" in database:
        raise DatabaseUrlError("the database URL must name exactly one database: mysql://host/dbname")
    query = parse_qs(parts.query)
    unknown = set(query) - {"unix_socket", "connect_timeout"}
    if unknown:
        raise DatabaseUrlError(f"unknown database URL option(s): {', '.join(sorted(unknown))}")
    try:
        port = parts.port or 3306
    except ValueError as exc:
        raise DatabaseUrlError(f"bad port in database URL: {exc}") from None
    config = DatabaseConfig(
        database=database,
        user=unquote(parts.username) if parts.username else "root",
        password=unquote(parts.password) if parts.password else "",
        host=parts.hostname or "localhost",
        port=port,
        unix_socket=query["unix_socket"][-1] if "unix_socket" in query else None,
    )
    if "connect_timeout" in query:
        config = dataclasses.replace(config, connect_timeout=float(query["connect_timeout"][-1]))
    return config


def connect(config: DatabaseConfig, *, database: bool = True) -> pymysql.connections.Connection:
    """Open one connection; the caller owns it and must close it."""
    return pymysql.connect(**config.connect_kwargs(database=database))


def create_database(config: DatabaseConfig) -> None:
    """Create the configured database if it does not exist yet."""
    conn = connect(config, database=False)
    try:
        with conn.cursor() as cur:
            name = config.database.replace("`", "``")
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        conn.commit()
    finally:
        conn.close()


def drop_database(config: DatabaseConfig) -> None:
    """Drop the configured database if it exists (throwaway bench and test databases)."""
    conn = connect(config, database=False)
    try:
        with conn.cursor() as cur:
            name = config.database.replace("`", "``")
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    finally:
        conn.close()
