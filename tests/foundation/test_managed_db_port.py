"""A managed MariaDB whose chosen port was taken before it bound it starts again on a fresh port.

The port is free when :func:`pulse_trio.ports.free_port` picks it, but any
socket (a client's outgoing connection takes its port from the same range)
can take it before ``mariadbd`` binds it. ``mariadbd`` then exits at once;
the test run and ``serve`` without a database URL must not fail for that.
A port the caller gave is never changed.
"""

from __future__ import annotations

import socket

import pymysql
import pytest

from pulse_trio import managed_db
from pulse_trio.managed_db import ManagedDatabaseError, ManagedMariaDB

pytestmark = pytest.mark.live  # it runs mariadb-install-db and mariadbd


def _squat() -> socket.socket:
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    return squatter


def _answers_on(port: int) -> int:
    with pymysql.connect(host="127.0.0.1", port=port, user="root", connect_timeout=5) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@port")
        return cur.fetchone()[0]


def test_a_chosen_port_taken_before_mariadbd_binds_it_is_replaced_by_a_fresh_one(tmp_path, monkeypatch):
    with _squat() as squatter:
        taken = squatter.getsockname()[1]
        picks: list[int] = []

        def pick() -> int:
            port = taken if not picks else real()
            picks.append(port)
            return port

        real = managed_db.free_port
        monkeypatch.setattr(managed_db, "free_port", pick)
        server = ManagedMariaDB(tmp_path / "chosen", fast=True)
        with _notify_socket(tmp_path, monkeypatch) as notices, server:
            assert picks[0] == taken and len(picks) == 2
            assert server.port == picks[1] != taken
            assert _answers_on(server.port) == server.port
            with pytest.raises(BlockingIOError):  # serve's unit hears serve's READY=1, never mariadbd's
                notices.recv(4096)
        assert "Address already in use" in server.log_path.read_text()


def _notify_socket(tmp_path, monkeypatch) -> socket.socket:
    """A datagram socket named by ``NOTIFY_SOCKET``, as systemd gives a unit with Type=notify."""
    notices = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notices.bind(str(tmp_path / "notify"))
    notices.setblocking(False)
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify"))
    return notices


def test_a_port_the_caller_gave_is_never_changed(tmp_path):
    with _squat() as squatter:
        taken = squatter.getsockname()[1]
        server = ManagedMariaDB(tmp_path / "given", port=taken, fast=True)
        with pytest.raises(ManagedDatabaseError, match="exited at start"):
            server.start(timeout=60)
        assert server.port == taken
        server.stop()
