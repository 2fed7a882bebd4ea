"""A signal while ``serve`` starts on a database that hangs (SIGSTOP) ends it promptly, with its exit code.

``serve`` checks the schema, then writes and reads the cluster settings and
records its node through the store, whose retries wait on a database that
answers nothing for minutes (each attempt up to the URL's
``connect_timeout``). The database is frozen the moment the store opens its
first connection: ``serve``'s connections go through a relay (a Unix
socket) that stops ``mariadbd`` on its second accept, the schema check's
being the first. SIGTERM then must end ``serve`` with exit 0 and Ctrl-C
with 130 (docs/operations.md §7.1), within about ``connect_timeout``
(docs/operations.md §4), and never with a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos_fleet import own_database

pytestmark = pytest.mark.chaos

#: The URL's connect_timeout here: the store's retries then take 10 s or more to give up on their own.
CONNECT_TIMEOUT_S = 1.0
#: What docs/operations.md §4 promises for a stop during the start: about one connect_timeout.
STOP_BOUND_S = CONNECT_TIMEOUT_S + 4.0


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def _freezing_relay(path: Path, upstream: str, mariadbd: int) -> Iterator[threading.Event]:
    """Relay connections on ``path`` to ``upstream``; SIGSTOP ``mariadbd`` before relaying the second.

    Yields an event set once the database is frozen.
    """
    frozen = threading.Event()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(16)
    opened: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = listener.accept()
                if opened:  # the schema check's connection came first: this is the store's
                    os.kill(mariadbd, signal.SIGSTOP)
                    frozen.set()
                server = socket.socket(socket.AF_UNIX)
                server.connect(upstream)
                opened.extend((client, server))
                for a, b in ((client, server), (server, client)):
                    threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield frozen
    finally:
        listener.close()
        for sock in opened:
            sock.close()


@pytest.mark.parametrize("signum, expected", [(signal.SIGTERM, 0), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_serve_starts_on_a_frozen_database_ends_it_promptly(tmp_path, signum, expected):
    with own_database(tmp_path, "pulse_start") as (server, db, token):
        mariadbd = server._process
        assert mariadbd is not None and db.unix_socket is not None
        relayed = dataclasses.replace(db, unix_socket=str(tmp_path / "relay.sock"), connect_timeout=CONNECT_TIMEOUT_S)
        with _freezing_relay(tmp_path / "relay.sock", db.unix_socket, mariadbd.pid) as frozen:
            serve = subprocess.Popen(
                [sys.executable, "-m", "pulse_trio", "serve", "--database-url", relayed.url(redact=False),
                 "--worker-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--log-level", "warning"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                assert frozen.wait(30), "serve's store never connected"
                time.sleep(0.5)  # its first attempt now waits on the database
                assert serve.poll() is None
                started = time.monotonic()
                serve.send_signal(signum)
                try:
                    returncode = serve.wait(STOP_BOUND_S)
                except subprocess.TimeoutExpired:
                    returncode = None
                took = time.monotonic() - started
            finally:
                if serve.poll() is None:
                    serve.kill()
                    serve.wait()
                os.kill(mariadbd.pid, signal.SIGCONT)
            stderr = serve.stderr.read().decode(errors="replace")
    assert (returncode, "Traceback" in stderr) == (expected, False), f"after {took:.1f} s: {stderr}"
