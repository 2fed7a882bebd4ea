"""Fixtures for the worker-server integration tests.

Tests do ``import harness`` (this folder is on the ``pythonpath`` of
pyproject.toml). The fixtures here hand out harness connections bound to
the test's nursery (closed with it), a trustme CA for WSS, and tasks.
"""

from __future__ import annotations

import pytest


import harness

from pulse_trio.client import Client
from sql_support import rows
from token_support import revoke_token
from ownership_support import session_owners  # noqa: F401  (autouse: only its own tasks change a session)


@pytest.fixture
async def connect():
    """``worker = await connect(service_or_port, token, name=..., ssl_context=...)``.

    The connections live in this fixture's own nursery, not the test's: when
    the test ends and its nursery (with the services) is cancelled, the
    clients are still there to answer the server's close handshake.
    """
    import trio

    opened = []
    async with trio.open_nursery() as own:

        async def open_(service, token, **kw):
            port = service if isinstance(service, int) else service.worker_port
            worker = await harness.connect(own, port, token, **kw)
            opened.append(worker)
            return worker

        yield open_
        for worker in opened:
            await worker.drop()
        own.cancel_scope.cancel()


@pytest.fixture
async def start_service(start_service, connect, db):
    """The global ``start_service``, plus a graceful stop of every instance at teardown.

    Requesting ``connect`` makes the clients outlive this teardown, so the
    instances close their sessions properly (server_shutting_down, close
    1001) instead of being cancelled mid-handshake.
    """
    import trio

    handles = []

    async def start(**overrides):
        handle = await start_service(**overrides)
        handles.append(handle)
        return handle

    def describe() -> str:
        lines = []
        for n, handle in enumerate(handles):
            lines.append(f"service {n}: hub {handle.hub.statistics()} dispatcher {handle.dispatcher.statistics()}"
                         f" store threads busy {handle.store.threads_busy()}")
            lines += [f"  session {s.session_id} instance {s.instance_id} capacity {s.capacity} drain {s.drain}"
                      f" held {sorted(s.held_leases())} active {s.active_leases} free {s.free_slots}"
                      for s in handle.hub]
        lines += [f"  row {row}" for row in _live_rows(db)]
        return "\n".join(lines)

    harness.DIAGNOSTICS.append(describe)
    try:
        yield start
    finally:
        harness.DIAGNOSTICS.remove(describe)
    for handle in handles:
        handle.stop()
    with trio.move_on_after(10):
        while any(handle.connections for handle in handles):
            await trio.sleep(0.01)


def _live_rows(db) -> list[tuple]:
    """The tasks not yet terminal and the live leases, as the database has them now."""
    tasks = rows(db, "SELECT 'task', task_id, queue, state, attempt FROM tasks"
                     " WHERE state NOT IN ('SUCCEEDED', 'FAILED', 'UNKNOWN', 'CANCELLED') LIMIT 20")
    return tasks + rows(db, "SELECT 'lease', lease_id, task_id, state, owner_session_id, revision FROM leases"
                            " WHERE state IN ('OFFERED', 'RUNNING') LIMIT 20")


@pytest.fixture
def worker_token(token_factory):
    """A worker token for the queues the tests use."""
    return token_factory("worker", ["billing", "mail", "reports"])


@pytest.fixture
def client(db):
    with Client(db) as c:
        yield c


@pytest.fixture
def revoke(db):
    """``revoke(token)``: revoke a token by its value."""

    return lambda token: revoke_token(db, token)
