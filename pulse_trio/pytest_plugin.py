"""pytest fixtures for integration tests against a real pulse-trio service.

Installed with the package (the ``pytest11`` entry point ``pulse_trio``),
it only defines fixtures: a run that uses none of them starts nothing.

* ``pulse_server`` (session): a real ``pulse-trio serve`` process on a
  managed MariaDB, started once per test session (or on the server named by
  ``PULSE_TEST_DATABASE_URL``, where it creates and later drops a database of
  its own), with a producer token (granted cancel and retry), a worker
  token and an operator token;
* ``pulse_queue``: a fresh queue name per test, so tests never see each
  other's tasks;
* ``pulse_client``: an :class:`~pulse_trio.producer.AsyncClient` for the
  producer token (asyncio or Trio: it binds to the loop of its first call);
  ``pulse_sync_client``: the blocking :class:`~pulse_trio.producer.Client`;
* ``pulse_worker``: ``pulse_worker({"kind": handler})`` runs an SDK worker
  with those handlers for ``pulse_queue``, on its own event loop in a
  background thread, until the test ends (it is drained then).

Every fixture is synchronous, so tests written for pytest-asyncio, AnyIO's
plugin or pytest-trio use them alike. See docs/worker.md §17.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pulse_trio.background_worker import BackgroundWorker
    from pulse_trio.dburl import DatabaseConfig
    from pulse_trio.producer import AsyncClient, Client
    from pulse_trio.sdk import Registry

#: Names a database server to use instead of starting a managed MariaDB (a MariaDB/MySQL URL).
DATABASE_URL_VARIABLE = "PULSE_TEST_DATABASE_URL"


@dataclasses.dataclass(frozen=True)
class PulseServer:
    """The running service of a test session: where it answers and the tokens to use it with.

    Its repr shows the URLs only: pytest prints it in a failed assertion that
    reads it, and a CI log must not hold the tokens or the database's
    password (a ``DatabaseConfig``'s repr shows it).
    """

    http_url: str
    worker_url: str
    database: DatabaseConfig = dataclasses.field(repr=False)
    producer_token: str = dataclasses.field(repr=False)  # every queue, granted cancel and retry
    worker_token: str = dataclasses.field(repr=False)
    operator_token: str = dataclasses.field(repr=False)


def _make_token(database: DatabaseConfig, role: str, allow: tuple[str, ...] = ()) -> str:
    from pulse_trio.store.engine.writer import connect
    from pulse_trio.store.token.tokens import create_token

    conn = connect(database)
    try:
        token, _ = create_token(conn, role=role, queues=(), label="pytest", now=dt.datetime.now(dt.timezone.utc),
                                allow=allow)
        return token
    finally:
        conn.close()


@pytest.fixture(scope="session")
def pulse_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulseServer]:
    """A real ``pulse-trio serve`` for the whole session (managed MariaDB unless PULSE_TEST_DATABASE_URL)."""
    from pulse_trio.dburl import parse_database_url
    from pulse_trio.store.engine.writer import drop_database
    from pulse_trio.managed_db import ManagedMariaDB, socket_fits
    from pulse_trio.serve_process import ServeProcess
    from pulse_trio.store.schema.migrate import migrate

    url = os.environ.get(DATABASE_URL_VARIABLE)
    with contextlib.ExitStack() as cleanup:  # undone in reverse: serve, then its database, then the socket's folder
        if url:
            server = parse_database_url(url)
        else:
            state_dir = tmp_path_factory.mktemp("pulse-mariadb")
            socket_dir = None
            if not socket_fits(state_dir):  # a deep temp folder (tox's --basetemp, a CI checkout)
                socket_dir = Path(tempfile.mkdtemp(prefix="pulse-"))
                cleanup.callback(shutil.rmtree, socket_dir, ignore_errors=True)
            # Both children die with this process too: a run killed by SIGTERM or SIGKILL (a CI time limit)
            # cleans nothing up.
            managed = ManagedMariaDB(state_dir, fast=True, die_with_parent=True, socket_dir=socket_dir)
            server = managed.start()
            cleanup.callback(managed.stop)
        database = server.with_database(f"pulse_pytest_{secrets.token_hex(4)}")
        if url:
            cleanup.callback(drop_database, database)
        migrate(database)
        tokens = {role: _make_token(database, role) for role in ("worker", "operator")}
        producer = _make_token(database, "producer", ("cancel", "retry"))
        serve = cleanup.enter_context(ServeProcess(database, die_with_parent=True))
        yield PulseServer(http_url=serve.http_url, worker_url=serve.worker_url, database=database,
                          producer_token=producer, worker_token=tokens["worker"], operator_token=tokens["operator"])


@pytest.fixture
def pulse_queue() -> str:
    """A queue name no other test uses."""
    return f"q{secrets.token_hex(6)}"


@pytest.fixture
def pulse_client(pulse_server: PulseServer) -> AsyncClient:
    """An AsyncClient with the session's producer token (bound to the loop of its first call).

    It keeps no idle connection: each call closes its own on the test's loop
    when it ends. A sync fixture cannot close it after the test, whose loop
    is gone by then, so kept ones would be left open (a ``ResourceWarning``
    that fails a suite run with ``filterwarnings = error``) whenever the test
    did not close it itself.
    """
    import httpx

    from pulse_trio.producer import AsyncClient
    from pulse_trio.producer.clients import DEFAULT_LIMITS

    limits = httpx.Limits(max_connections=DEFAULT_LIMITS.max_connections, max_keepalive_connections=0)
    return AsyncClient(pulse_server.http_url, pulse_server.producer_token, limits=limits)


@pytest.fixture
def pulse_sync_client(pulse_server: PulseServer) -> Iterator[Client]:
    """The blocking Client with the session's producer token; closed after the test."""
    from pulse_trio.producer import Client

    with Client(pulse_server.http_url, pulse_server.producer_token) as client:
        yield client


@pytest.fixture
def pulse_worker(pulse_server: PulseServer, pulse_queue: str) -> Iterator[Callable[..., BackgroundWorker]]:
    """``pulse_worker({"invoice.send": handler}, capacity=4)``: an SDK worker for ``pulse_queue`` until the test ends.

    Handlers are ``async def`` (run on the worker's loop) or ``def`` (run in a
    thread); a ready :class:`~pulse_trio.sdk.Registry` is taken as it is.
    ``backend`` is the worker's own event loop (AnyIO's name for it); other
    keyword arguments go to :class:`~pulse_trio.sdk.Worker`.
    """
    from pulse_trio.background_worker import BackgroundWorker, registry_for, stop_all

    started: list[BackgroundWorker] = []

    def start(handlers: Registry | Mapping[str, Callable[..., Any]], *, capacity: int = 4, backend: str = "asyncio",
              **options: Any) -> BackgroundWorker:
        worker = BackgroundWorker(pulse_server.worker_url, pulse_server.worker_token,
                                  registry_for(pulse_queue, handlers), backend=backend, capacity=capacity, **options)
        started.append(worker)  # before it starts: a start interrupted half-way is stopped at teardown too
        return worker.start()

    yield start
    stop_all(reversed(started))
