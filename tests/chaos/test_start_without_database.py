"""``serve`` starting on a database that hangs (SIGSTOP) once its schema is checked.

A signal then ends it promptly, with its exit code; a ``--processes``
group's first process, whose check of its flags the freeze meets, starts
its members all the same.

``serve`` checks the schema, then writes and reads the cluster settings and
records its node through the store, whose retries wait on a database that
answers nothing for minutes (each attempt up to the URL's
``connect_timeout``). The database is frozen the moment the connection
after the schema check's is opened (the store's first, or the group's
check): ``serve``'s connections go through a relay (a Unix socket) that
stops ``mariadbd`` on its second accept. SIGTERM then must end ``serve`` with exit 0 and Ctrl-C
with 130 (docs/operations.md §7.1), within about ``connect_timeout``
(docs/operations.md §4), and never with a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos_fleet import own_database
from pulse_trio.client import Client
from pulse_trio.dburl import DatabaseConfig
from pulse_trio.ports import free_port

pytestmark = pytest.mark.chaos

#: The URL's connect_timeout here: the store's retries then take 10 s or more to give up on their own.
CONNECT_TIMEOUT_S = 1.0
#: The store's attempts at one transaction, each waiting up to connect_timeout on a database that hangs.
STORE_ATTEMPTS = 10
#: What docs/operations.md §4 promises for a stop during the start: about one connect_timeout.
STOP_BOUND_S = CONNECT_TIMEOUT_S + 4.0


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


@dataclasses.dataclass(eq=False)
class _Relay:
    """What the relay saw: the pid of each connection's peer, in order, and whether it froze the database."""

    peers: list[int] = dataclasses.field(default_factory=list)
    frozen: threading.Event = dataclasses.field(default_factory=threading.Event)


@contextlib.contextmanager
def _freezing_relay(path: Path, upstream: str, mariadbd: int) -> Iterator[_Relay]:
    """Relay connections on ``path`` to ``upstream``; SIGSTOP ``mariadbd`` before relaying the second."""
    relay = _Relay()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(16)
    opened: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = listener.accept()
                relay.peers.append(struct.unpack("3i", client.getsockopt(
                    socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[0])
                if len(relay.peers) == 2:  # the schema check's connection came first: this is the next one
                    os.kill(mariadbd, signal.SIGSTOP)
                    relay.frozen.set()
                server = socket.socket(socket.AF_UNIX)
                server.connect(upstream)
                opened.extend((client, server))
                for a, b in ((client, server), (server, client)):
                    threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield relay
    finally:
        listener.close()
        for sock in opened:
            sock.close()


def _wait(what: str, check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


#: Heartbeats every second, lapse after five: the nodes are recorded soon after the database answers.
QUICK_NODES = ("--node-heartbeat", "1", "--node-lapse", "5")


@dataclasses.dataclass
class _Started:
    """A serve started through the freezing relay: the process, the relay, the database's own server and URL."""

    serve: subprocess.Popen
    relay: _Relay
    mariadbd_pid: int
    db: DatabaseConfig


@contextlib.contextmanager
def _serve_on_freezing_database(tmp_path: Path, name: str, *serve_args: str) -> Iterator[_Started]:
    """``pulse-trio serve SERVE_ARGS`` on its own database, reached through a relay that freezes mariadbd at the
    second connection; killed if still running at the end, and the database thawed."""
    with own_database(tmp_path, name) as (server, db, token):
        mariadbd = server._process
        assert mariadbd is not None and db.unix_socket is not None
        relayed = dataclasses.replace(db, unix_socket=str(tmp_path / "relay.sock"), connect_timeout=CONNECT_TIMEOUT_S)
        with _freezing_relay(tmp_path / "relay.sock", db.unix_socket, mariadbd.pid) as relay:
            serve = subprocess.Popen(
                [sys.executable, "-m", "pulse_trio", "serve", "--database-url", relayed.url(redact=False),
                 "--http-listen", "127.0.0.1:0", "--log-level", "warning", *serve_args],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                yield _Started(serve, relay, mariadbd.pid, db)
            finally:
                if serve.poll() is None:
                    serve.kill()
                    serve.wait()
                os.kill(mariadbd.pid, signal.SIGCONT)


@pytest.mark.parametrize("signum, expected", [(signal.SIGTERM, 0), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_serve_starts_on_a_frozen_database_ends_it_promptly(tmp_path, signum, expected):
    with _serve_on_freezing_database(tmp_path, "pulse_start", "--worker-listen", "127.0.0.1:0") as started:
        serve = started.serve
        assert started.relay.frozen.wait(30), "serve's store never connected"
        time.sleep(0.5)  # its first attempt now waits on the database
        assert serve.poll() is None
        began = time.monotonic()
        serve.send_signal(signum)
        try:
            returncode = serve.wait(STOP_BOUND_S)
        except subprocess.TimeoutExpired:
            returncode = None
        took = time.monotonic() - began
    stderr = serve.stderr.read().decode(errors="replace")
    assert (returncode, "Traceback" in stderr) == (expected, False), f"after {took:.1f} s: {stderr}"


def test_a_group_whose_settings_check_meets_a_frozen_database_starts_its_members(tmp_path):
    """``serve --processes`` checks its flags (one read) before any member starts; the database freezes then.

    Leaving the check to the members, as one process leaves it until the
    database answers, the group starts them within about twice the URL's
    connect_timeout (docs/operations.md §14), not after the store's retries,
    and not by ending on the store's error (exit 70, a traceback).
    """
    worker_port = free_port()
    with _serve_on_freezing_database(tmp_path, "pulse_group_start", "--processes", "2", "--worker-listen",
                                     f"127.0.0.1:{worker_port}", *QUICK_NODES) as started:
        group, relay = started.serve, started.relay
        assert relay.frozen.wait(30), "the group never checked its flags"
        try:  # a member's store connects once the first process has given up its check
            _wait("a member started", lambda: set(relay.peers) - {group.pid} or group.poll() is not None,
                  2 * CONNECT_TIMEOUT_S + 5)
        finally:
            os.kill(started.mariadbd_pid, signal.SIGCONT)
        assert group.poll() is None, "the first process ended on the database"
        with Client(started.db) as client:
            _wait("both members' nodes recorded", lambda: len(client.nodes()) == 2, 15)
        group.send_signal(signal.SIGTERM)
        returncode = group.wait(30)
    stderr = group.stderr.read().decode(errors="replace")
    assert returncode == 0 and "settings not checked (database unavailable)" in stderr, stderr


def test_serve_listens_once_its_store_gave_up_on_a_frozen_database(tmp_path):
    """The start's one wait on the store's attempts (docs/operations.md §4), not one for its settings and
    another for its node; then the node is recorded once the database answers, and a SIGTERM stops it."""
    worker_port = free_port()
    with _serve_on_freezing_database(tmp_path, "pulse_start_listens", "--worker-listen", f"127.0.0.1:{worker_port}",
                                     *QUICK_NODES) as started:
        serve = started.serve
        try:
            assert started.relay.frozen.wait(30), "serve's store never connected"
            frozen_at = time.monotonic()
            _wait("serve listening", lambda: _listens(worker_port) or serve.poll() is not None,
                  STORE_ATTEMPTS * CONNECT_TIMEOUT_S + 5)
            took = time.monotonic() - frozen_at
        finally:
            os.kill(started.mariadbd_pid, signal.SIGCONT)
        assert serve.poll() is None
        with Client(started.db) as client:
            _wait("the node recorded once the database answers", lambda: len(client.nodes()) == 1, 15)
        serve.send_signal(signal.SIGTERM)
        returncode = serve.wait(30)
    print(f"\nlistening {took:.1f} s after the database froze")
    assert returncode == 0


def _listens(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
