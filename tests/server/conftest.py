"""Fixtures for the worker-server integration tests.

The suite runs with ``--import-mode=importlib``, where sibling modules are
not importable, so this folder is put on ``sys.path`` and tests do
``import harness``. The fixtures here hand out harness connections bound to
the test's nursery (closed with it), a trustme CA for WSS, and tasks.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import harness  # noqa: E402

from pulse_trio.client import Client  # noqa: E402
from pulse_trio.dburl import connect as db_connect  # noqa: E402
from pulse_trio import tokens  # noqa: E402


@pytest.fixture
def connect(nursery):
    """``worker = await connect(service_or_port, token, name=..., ssl_context=...)``."""

    async def open_(service, token, **kw):
        port = service if isinstance(service, int) else service.worker_port
        return await harness.connect(nursery, port, token, **kw)

    return open_


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

    def run(token: str) -> None:
        conn = db_connect(db)
        try:
            info = tokens.authenticate(conn, token)
            assert info is not None
            tokens.revoke_token(conn, info.token_id, now=dt.datetime.now(dt.timezone.utc))
        finally:
            conn.close()

    return run


@pytest.fixture(scope="session")
def tls(tmp_path_factory):
    """A trustme CA and a server certificate for localhost/127.0.0.1: (cert, key, client ssl context)."""
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
