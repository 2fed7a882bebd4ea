"""`pulse-trio serve` on a listen address already in use: one line, exit 5, nothing recorded.

The listeners are bound before the process joins the cluster, so a typo in
a port never shows up in `server_nodes` as a node that later looks lost.
"""

from __future__ import annotations

import pytest

from cli_support import run, serve
from pulse_trio.dburl import connect
from pulse_trio.ports import free_port

EXIT_CANNOT_LISTEN = 5


def _node_count(db) -> int:
    conn = connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM server_nodes")
            return cur.fetchone()[0]
    finally:
        conn.close()


@pytest.mark.parametrize("taken", ["worker", "http"])
def test_a_taken_port_fails_in_one_line_before_joining(db, taken):
    with serve(db) as (worker_port, http_port):
        assert _node_count(db) == 1
        worker = worker_port if taken == "worker" else free_port()
        http = http_port if taken == "http" else free_port()
        done = run("serve", "--database-url", db.url(redact=False), "--worker-listen", f"127.0.0.1:{worker}",
                   "--http-listen", f"127.0.0.1:{http}", "--log-level", "warning", timeout=60)
        assert done.returncode == EXIT_CANNOT_LISTEN, done
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        flag = "--worker-listen" if taken == "worker" else "--http-listen"
        port = worker if taken == "worker" else http
        assert done.stderr.startswith("pulse-trio: cannot listen for ") and flag in done.stderr
        assert f"127.0.0.1:{port}" in done.stderr and "in use" in done.stderr
        assert _node_count(db) == 1  # the refused process never recorded itself ALIVE


def test_an_unreadable_certificate_is_a_bad_argument(tmp_path):
    done = run("serve", "--tls-cert", str(tmp_path / "missing.pem"), "--tls-key", str(tmp_path / "key.pem"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done
    assert "--tls-cert/--tls-key: cannot load" in done.stderr
    assert not (tmp_path / "state").exists()  # refused before any database was started
