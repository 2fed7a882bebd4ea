"""Shared fixtures: a real MariaDB for the whole run, a clean database per test.

Without ``PULSE_TEST_DATABASE_URL`` the run starts its own private
``mariadbd`` (the same code as `serve`'s managed default) in a temporary
folder; with it, a throwaway database is created beside the named one and
dropped at the end. Either way tests talk to a real server: no fakes.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

from pulse_trio.dburl import DatabaseConfig, parse_database_url
from pulse_trio.managed_db import ManagedMariaDB
from pulse_trio.store.schema.migrate import migrate
from pulse_trio.store.engine.writer import connect, drop_database

#: The suite's tiers, cheapest first: ``./scripts/test -m unit`` runs the in-memory tier in seconds.
TIERS = ("unit", "db", "live")
#: Fixtures that start a service, a worker, a browser, a proxy or a cluster: their tests are ``live``.
LIVE_FIXTURES = frozenset({
    "start_service", "scenario_service", "service", "http", "connect", "connect_worker", "open_worker",
    "run_worker", "start_worker", "world", "chromium", "page", "proxy_for", "galera", "cluster",
    "pulse_server", "pulse_worker", "pulse_client", "pulse_sync_client", "pulse_queue",
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """File every test in one tier, by what it uses, unless its module names its tier.

    ``live``: a running service, worker, browser or cluster (or a chaos or
    Galera mark); ``db``: a database; ``unit``: neither. A module that starts
    processes on its own says so with ``pytestmark = pytest.mark.live``.
    """
    for item in items:
        if any(item.get_closest_marker(tier) for tier in TIERS):
            continue
        used = set(getattr(item, "fixturenames", ()))
        if used & LIVE_FIXTURES or item.get_closest_marker("chaos") or item.get_closest_marker("galera"):
            item.add_marker(pytest.mark.live)
        elif "database_server" in used:
            item.add_marker(pytest.mark.db)
        else:
            item.add_marker(pytest.mark.unit)


@pytest.fixture(scope="session", autouse=True)
def _state_dir_outside_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Commands run by tests keep their managed database in the run's temp folder, never in ~."""
    previous = os.environ.get("PULSE_STATE_DIR")
    os.environ["PULSE_STATE_DIR"] = str(tmp_path_factory.mktemp("state"))
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("PULSE_STATE_DIR", None)
        else:
            os.environ["PULSE_STATE_DIR"] = previous


@pytest.fixture(scope="session")
def database_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DatabaseConfig]:
    """A server to create test databases on (config names no database yet)."""
    url = os.environ.get("PULSE_TEST_DATABASE_URL")
    if url:
        yield parse_database_url(url)
        return
    server = ManagedMariaDB(tmp_path_factory.mktemp("mariadb"), fast=True)
    try:
        yield server.start().with_database("mysql")
    finally:
        server.stop()


def make_database(server: DatabaseConfig, prefix: str = "pulse_test") -> DatabaseConfig:
    """A new, migrated database with a unique name on ``server``."""
    config = server.with_database(f"{prefix}_{secrets.token_hex(4)}")
    migrate(config)
    return config


@pytest.fixture(scope="session")
def database_config(database_server: DatabaseConfig) -> Iterator[DatabaseConfig]:
    """The run's migrated database (shared; use ``db`` for a clean one)."""
    config = make_database(database_server)
    try:
        yield config
    finally:
        drop_database(config)


@pytest.fixture(scope="session")
def _seed_snapshot(database_config: DatabaseConfig) -> dict[str, tuple[list[str], list[tuple]]]:
    """What the migrations themselves put in each table, to restore per test."""
    conn = connect(database_config)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'"
            )
            tables = [row[0] for row in cur.fetchall()]
            snapshot: dict[str, tuple[list[str], list[tuple]]] = {}
            for table in tables:
                cur.execute(f"SELECT * FROM `{table}`")
                rows = list(cur.fetchall())
                snapshot[table] = ([d[0] for d in cur.description], rows)
        conn.rollback()
        return snapshot
    finally:
        conn.close()


@pytest.fixture
def db(database_config: DatabaseConfig, _seed_snapshot) -> DatabaseConfig:
    """The run's database, reset to its just-migrated contents for this test."""
    conn = connect(database_config)
    try:
        with conn.cursor() as cur:
            cur.execute("SET FOREIGN_KEY_CHECKS = 0")
            for table, (columns, rows) in _seed_snapshot.items():
                if table == "schema_migrations":
                    continue
                cur.execute(f"DELETE FROM `{table}`")
                if rows:
                    cols = ", ".join(f"`{c}`" for c in columns)
                    marks = ", ".join(["%s"] * len(columns))
                    cur.executemany(f"INSERT INTO `{table}` ({cols}) VALUES ({marks})", rows)
            cur.execute("SET FOREIGN_KEY_CHECKS = 1")
        conn.commit()
    finally:
        conn.close()
    return database_config


# -- a running service, in-process, on real sockets ---------------------------------

from pulse_trio.config import Settings
from token_support import make_token  # beside this file


@pytest.fixture
def token_factory(db: DatabaseConfig):
    """``token_factory(role="worker", queues=("billing",), allow=("cancel",))`` -> a bearer token."""
    return lambda role="worker", queues=(), allow=(): make_token(db, role, tuple(queues), allow=tuple(allow))


@pytest.fixture
def start_service(db: DatabaseConfig, nursery):
    """``handle = await start_service(**settings)``: a real instance on 127.0.0.1:0.

    Each call starts one more instance on the same database (for multi-
    instance tests); all are stopped with the test's nursery. ``handle``
    has ``worker_port``, the instance's parts (``settings``, ``store``,
    ``dispatcher`` ...) and ``stop()``. The settings are given as
    flags would be: the cluster settings among them are written to the
    cluster when the instance starts.
    """
    from pulse_trio.serve import serve

    async def start(clock=None, **overrides):
        settings = Settings(worker_listen=("127.0.0.1", 0), http_listen=("127.0.0.1", 0)).override(**overrides)
        return await nursery.start(lambda task_status: serve(settings, db, handle_signals=False, clock=clock,
                                                             task_status=task_status))

    return start


@pytest.fixture(scope="session")
def tls(tmp_path_factory):
    """A trustme CA and a server certificate for localhost/127.0.0.1: (cert, key, client ssl context).

    Here, not under tests/server, so the serve group's tests (tests/group) use the same one.
    """
    import ssl

    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    folder = tmp_path_factory.mktemp("tls")
    cert_path, key_path = folder / "server.pem", folder / "server.key"
    cert.private_key_pem.write_to_path(str(key_path))
    cert_path.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return cert_path, key_path, context
