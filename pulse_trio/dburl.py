"""Database URLs and raw connections.

One parser for every entry point (serve, migrate, CLI, tests) so that
``mysql://user:pass@host:port/db?unix_socket=/path`` means the same thing
everywhere. Connections are always utf8mb4, UTC, strict sql_mode,
autocommit off: the transaction functions rely on all four.

A URL may name several nodes of one cluster
(``mysql://u:p@h1:3306,h2:3306,h3:3306/db``): which of them is written to
is the store's choice (``pulse_trio.store.engine.writer``, whose ``connect`` takes
any URL). Creating the database, and the causal reads a Galera node needs
before it answers for the cluster, are here too, since the URL's own
database may not exist yet. The connection class itself (PyMySQL's, with
its hot paths made cheaper) is :mod:`pulse_trio.driver`, and the TLS
options (``ssl_mode``, ``ssl_ca``, ``ssl_cert``, ``ssl_key``) are read by
:mod:`pulse_trio.dbtls`. These three modules import nothing else of the
package: they are the bottom layer every other one may use.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import pymysql

from pulse_trio.dbtls import TLS_OPTIONS, TlsOptionError, TlsOptions, parse_tls
from pulse_trio.driver import CONVERSIONS, Connection

_SCHEMES = {"mysql", "mariadb", "mysql+pymysql"}
#: The options a database URL may carry (``?name=value``); any other is refused.
OPTIONS = ("unix_socket", "connect_timeout", *TLS_OPTIONS)
#: The port of a node the URL names without one.
DEFAULT_PORT = 3306


class DatabaseUrlError(ValueError):
    """The database URL cannot be understood."""


#: Seconds to connect to the server, unless the URL says otherwise (``?connect_timeout=``).
DEFAULT_CONNECT_TIMEOUT_S = 10.0
#: The longest ``connect_timeout`` PyMySQL takes (a year).
MAX_CONNECT_TIMEOUT_S = 31_536_000
#: What every connection runs first: UTC, and strict mode added to the server's own sql_mode,
#: whatever the server's default is. A value too long for its column must be refused, never cut
#: short: a batch falls back to one command at a time on the refusal, and the HTTP API answers 400.
SESSION_INIT = ("SET time_zone = '+00:00', "
                "sql_mode = CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), 'STRICT_ALL_TABLES')")


@dataclasses.dataclass(frozen=True, slots=True)
class DatabaseConfig:
    """Where the database is and how to log in; never carries a live socket."""

    database: str
    user: str = "root"
    #: Out of the repr: a config lands in logs, tracebacks and pytest's failure output.
    password: str = dataclasses.field(default="", repr=False)
    host: str = "localhost"
    port: int = DEFAULT_PORT
    unix_socket: str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S
    #: Every node of a multi-host URL, in the URL's order (empty for one host);
    #: ``host``/``port`` are then the first of them.
    hosts: tuple[tuple[str, int], ...] = ()
    #: TLS to every node alike (``?ssl_mode=`` and the files it uses); the default is opportunistic.
    tls: TlsOptions = TlsOptions()

    @property
    def clustered(self) -> bool:
        """Several nodes were named: connections go to the writer ``pulse_trio.store.engine.writer`` picks."""
        return len(self.hosts) > 1

    def for_node(self, host: str, port: int) -> DatabaseConfig:
        """The same login on one node of the cluster."""
        return dataclasses.replace(self, host=host, port=port, hosts=())

    def with_database(self, name: str) -> DatabaseConfig:
        return dataclasses.replace(self, database=name)

    def connect_kwargs(self, *, database: bool = True) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "user": self.user,
            # As bytes: PyMySQL sends a str password as latin-1, where the server hashed the
            # UTF-8 bytes that a percent-encoded URL stands for (and most characters have no latin-1).
            "password": self.password.encode("utf-8"),
            "charset": "utf8mb4",
            "autocommit": False,
            "connect_timeout": self.connect_timeout,
            "init_command": SESSION_INIT,
            "conv": CONVERSIONS,
        }
        if self.unix_socket:
            kwargs["unix_socket"] = self.unix_socket
        else:
            kwargs["host"] = self.host
            kwargs["port"] = self.port
        if database:
            kwargs["database"] = self.database
        kwargs.update(self.tls.connect_kwargs())
        return kwargs

    def url(self, *, redact: bool = True) -> str:
        """The URL form, with the password hidden unless asked for."""
        password = "***" if (redact and self.password) else quote(self.password, safe="")
        auth = quote(self.user, safe="") + (f":{password}" if password else "")
        options = [f"unix_socket={quote(self.unix_socket, safe='/')}"] if self.unix_socket else []
        if self.connect_timeout != DEFAULT_CONNECT_TIMEOUT_S:  # the URL must give back the same config
            options.append(f"connect_timeout={self.connect_timeout!r}")
        options += self.tls.query()
        query = "?" + "&".join(options) if options else ""
        where = ",".join(_netloc(h, p) for h, p in (self.hosts or ((self.host, self.port),)))
        return f"mysql://{auth}@{where}/{quote(self.database, safe='')}{query}"


def _netloc(host: str, port: int) -> str:
    """``host:port``, with an IPv6 address in brackets so its colons are not read as the port's."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_database_url(url: str) -> DatabaseConfig:
    """Parse ``mysql://user:pass@host:port[,host:port...]/db[?unix_socket=/path&ssl_mode=...]``."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unclosed IPv6 bracket, say
        raise DatabaseUrlError(f"not a database URL: {exc}") from None
    if parts.scheme not in _SCHEMES:
        raise DatabaseUrlError(f"unsupported database URL scheme {parts.scheme!r}; use mysql://")
    database = unquote(parts.path.lstrip("/"))
    if not database or "/" in database:
        raise DatabaseUrlError("the database URL must name exactly one database: mysql://host/dbname")
    query = _options(parts.query)
    auth, _, where = parts.netloc.rpartition("@")
    user, _, password = auth.partition(":")
    hosts = tuple(_host_port(item) for item in where.split(",")) if where else (("localhost", DEFAULT_PORT),)
    if len(set(hosts)) != len(hosts):
        raise DatabaseUrlError("the database URL names one node twice")
    if len(hosts) > 1 and "unix_socket" in query:
        raise DatabaseUrlError("unix_socket names one server; it cannot go with several hosts")
    config = DatabaseConfig(
        database=database,
        user=unquote(user) if user else "root",
        password=unquote(password) if password else "",
        host=hosts[0][0],
        port=hosts[0][1],
        unix_socket=query.get("unix_socket"),
        hosts=hosts if len(hosts) > 1 else (),
    )
    try:
        config = dataclasses.replace(config, tls=parse_tls(query, unix_socket="unix_socket" in query))
    except TlsOptionError as exc:
        raise DatabaseUrlError(str(exc)) from None
    if "connect_timeout" in query:
        try:
            timeout = float(query["connect_timeout"])
        except ValueError:
            timeout = float("nan")
        if not 0 < timeout <= MAX_CONNECT_TIMEOUT_S:  # NaN too
            raise DatabaseUrlError(f"connect_timeout must be a number of seconds, more than 0 and at most "
                                   f"{MAX_CONNECT_TIMEOUT_S}")
        config = dataclasses.replace(config, connect_timeout=timeout)
    return config


def _options(query: str) -> dict[str, str]:
    """The URL's options by name, each known, given once and with a value.

    Read by hand rather than by ``parse_qs``, which drops an option given
    without a value (``?ssl`` would pass as no option at all), keeps the
    last of two values, and reads ``+`` as a space, as in a form: in a URL
    it is a plus (``/run/c++/mysqld.sock``).
    """
    options: dict[str, str] = {}
    unknown: set[str] = set()
    for item in query.split("&"):
        if not item:
            continue
        raw_name, _, raw_value = item.partition("=")
        name, value = unquote(raw_name), unquote(raw_value)
        if name not in OPTIONS:
            unknown.add(name)
        elif not value:
            raise DatabaseUrlError(f"the database URL option {name} has no value")
        elif name in options:
            raise DatabaseUrlError(f"the database URL option {name} is given twice")
        else:
            options[name] = value
    if unknown:
        raise DatabaseUrlError(f"unknown database URL option(s): {', '.join(sorted(unknown))}")
    return options


def _host_port(item: str) -> tuple[str, int]:
    """``host``, ``host:port`` or ``[v6]:port`` -> (host, port); :data:`DEFAULT_PORT` when no port is given."""
    if not item:
        raise DatabaseUrlError("empty host in the database URL")
    try:
        parts = urlsplit(f"//{item}")
        port = parts.port
    except ValueError as exc:
        raise DatabaseUrlError(f"bad port in database URL: {exc}") from None
    if not parts.hostname:
        raise DatabaseUrlError(f"bad host in the database URL: {item!r}")
    if port is None and item.endswith(":"):
        raise DatabaseUrlError(f"bad port in database URL: {item!r} has none after its colon")
    if port == 0:
        raise DatabaseUrlError(f"bad port in database URL: {item!r}; a port is 1-65535")
    return parts.hostname, DEFAULT_PORT if port is None else port


def connect(config: DatabaseConfig, *, database: bool = True) -> pymysql.connections.Connection:
    """Open one connection to the one server ``config`` names; the caller owns it and must close it.

    A URL of several nodes is refused here rather than sent to its first
    node: only ``pulse_trio.store.engine.writer.connect`` knows which is the writer.
    """
    if config.clustered:
        raise ValueError(f"{config.url()} names several nodes: connect through pulse_trio.store.engine.writer.connect")
    return connect_node(config, database=database)


def connect_node(config: DatabaseConfig, *, database: bool = True,
                 io_timeout: float | None = None) -> pymysql.connections.Connection:
    """Open one connection to exactly the host ``config`` names.

    ``connect_timeout`` bounds the TCP connect and then each read and write
    of the handshake (the server's greeting, the login, the session setup):
    a node that accepts and then says nothing fails the connect instead of
    blocking the caller for good. ``io_timeout`` bounds every read and write
    after it too (a probe's, a pooled connection's); without it a statement
    waits as long as it needs (a migration's).
    """
    kwargs = config.connect_kwargs(database=database)
    if io_timeout is not None:
        kwargs["read_timeout"] = kwargs["write_timeout"] = io_timeout
    return Connection(handshake_timeout=config.connect_timeout, **kwargs)


Connector = Callable[..., pymysql.connections.Connection]


#: ER_UNKNOWN_SYSTEM_VARIABLE: a server built without Galera (MySQL) has no ``wsrep_*``.
UNKNOWN_VARIABLE = 1193
#: Makes each read on a Galera node wait until the node has applied every commit the
#: cluster acknowledged before it (docs/storage.md §10).
CAUSAL_READS = "SET SESSION wsrep_sync_wait = 1"


def set_causal_reads(cur) -> None:
    """Run :data:`CAUSAL_READS` on ``cur``'s session; a server without the variable needs none."""
    try:
        cur.execute(CAUSAL_READS)
    except pymysql.err.MySQLError as exc:
        if not (exc.args and exc.args[0] == UNKNOWN_VARIABLE):
            raise


def create_database(config: DatabaseConfig, *, connector: Connector = connect) -> None:
    """Create the configured database if it does not exist yet (``connector`` picks the server).

    A database that exists is left alone: no ``CREATE DATABASE IF NOT
    EXISTS`` is sent for it. On a Galera cluster even that no-op is a
    replicated, totally ordered DDL. Applied on a node where another
    process is running DDL in that database (a migration started there a
    moment earlier), it waits for that connection's schema lock, which waits
    for its own turn behind it, and the whole cluster stops (docs/storage.md
    §10). The look-up is a causal read, so a database just created through
    another node is seen.
    """
    conn = connector(config, database=False)
    try:
        with conn.cursor() as cur:
            set_causal_reads(cur)
            cur.execute("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = %s",
                        (config.database,))
            if cur.fetchone()[0] == 0:
                name = config.database.replace("`", "``")
                cur.execute(f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        conn.commit()
    finally:
        conn.close()


def drop_database(config: DatabaseConfig, *, connector: Connector = connect) -> None:
    """Drop the configured database if it exists (throwaway bench and test databases)."""
    conn = connector(config, database=False)
    try:
        with conn.cursor() as cur:
            name = config.database.replace("`", "``")
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    finally:
        conn.close()
