"""TLS to the database, against a real MariaDB that offers it, and one that does not.

One private ``mariadbd`` with a trustme CA's certificate for ``localhost``
(not for 127.0.0.1: the same server is then reached under a name its
certificate holds and under one it does not), started once for the module;
a second one without TLS for the refusal of ``ssl_mode=required``. The
user ``certified`` must present a client certificate the CA issued
(``REQUIRE X509``): a connection that lost the URL's ``ssl_cert`` on its
way is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest
import trustme

from pulse_trio.dburl import connect, parse_database_url
from pulse_trio.managed_db import ManagedMariaDB
from pulse_trio.serve_process import ServeProcess

pytestmark = pytest.mark.live  # starts its own mariadbd processes, and pulse-trio commands

PASSWORD = "tls-" + secrets.token_hex(4)


@dataclasses.dataclass(frozen=True)
class Server:
    port: int
    ca: Path
    wrong_ca: Path
    cert: Path
    key: Path

    def url(self, query: str, *, host: str = "localhost", user: str = "app", database: str = "mysql") -> str:
        auth = f"{user}:{PASSWORD}" if user == "app" else user
        return f"mysql://{auth}@{host}:{self.port}/{database}?{query}"


def _start(folder: Path, *options: str) -> ManagedMariaDB:
    server = ManagedMariaDB(folder, fast=True, die_with_parent=True, server_options=options)
    config = server.start()
    with contextlib.closing(connect(config.with_database("mysql"))) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER 'app'@'%' IDENTIFIED BY '{PASSWORD}'")
        cur.execute("GRANT ALL ON *.* TO 'app'@'%'")
        cur.execute("CREATE USER 'certified'@'%' REQUIRE X509")
        cur.execute("GRANT ALL ON *.* TO 'certified'@'%'")
    return server


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("tls-db")
    ca, wrong = trustme.CA(), trustme.CA()
    server_cert, client_cert = ca.issue_cert("localhost"), ca.issue_cert("pulse-client")
    paths = {name: folder / f"{name}.pem" for name in ("ca", "wrong_ca", "server", "server_key", "cert", "key")}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    wrong.cert_pem.write_to_path(str(paths["wrong_ca"]))
    paths["server"].write_bytes(b"".join(blob.bytes() for blob in server_cert.cert_chain_pems))
    server_cert.private_key_pem.write_to_path(str(paths["server_key"]))
    paths["cert"].write_bytes(b"".join(blob.bytes() for blob in client_cert.cert_chain_pems))
    client_cert.private_key_pem.write_to_path(str(paths["key"]))
    server = _start(folder / "mariadb", f"--ssl-ca={paths['ca']}", f"--ssl-cert={paths['server']}",
                    f"--ssl-key={paths['server_key']}")
    try:
        yield Server(server.port, paths["ca"], paths["wrong_ca"], paths["cert"], paths["key"])
    finally:
        server.stop()


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory, tls_server) -> Iterator[Server]:
    """A server that offers no TLS (MariaDB without ``--ssl-*``), with the same CA files at hand."""
    server = _start(tmp_path_factory.mktemp("plain-db") / "mariadb")
    try:
        yield dataclasses.replace(tls_server, port=server.port)
    finally:
        server.stop()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """A real ``pulse-trio`` command to its end."""
    return subprocess.run([sys.executable, "-m", "pulse_trio", *args], capture_output=True, text=True, timeout=60)


def _cipher(url: str) -> str:
    """The TLS cipher of a session opened from ``url``: empty when it is plain text."""
    with contextlib.closing(connect(parse_database_url(url))) as conn, conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        return cur.fetchone()[1]


def _refusal(url: str) -> str:
    with pytest.raises(pymysql.err.OperationalError) as refused:
        connect(parse_database_url(url)).close()
    return str(refused.value)


def test_required_connects_over_tls(tls_server):
    assert _cipher(tls_server.url("ssl_mode=required", host="127.0.0.1"))


def test_verify_identity_with_the_server_s_ca_connects_over_tls(tls_server):
    assert _cipher(tls_server.url(f"ssl_mode=verify_identity&ssl_ca={tls_server.ca}"))


def test_a_server_certificate_from_another_ca_is_refused(tls_server):
    for mode in ("verify_ca", "verify_identity"):
        assert "CERTIFICATE_VERIFY_FAILED" in _refusal(tls_server.url(f"ssl_mode={mode}&ssl_ca={tls_server.wrong_ca}"))


def test_a_name_the_certificate_does_not_hold_is_refused_by_verify_identity_alone(tls_server):
    """The certificate is for ``localhost``; reached as 127.0.0.1 it is the right CA's, under another name."""
    assert "mismatch" in _refusal(tls_server.url(f"ssl_mode=verify_identity&ssl_ca={tls_server.ca}",
                                                 host="127.0.0.1"))
    assert _cipher(tls_server.url(f"ssl_mode=verify_ca&ssl_ca={tls_server.ca}", host="127.0.0.1"))


def test_required_against_a_server_without_tls_is_refused_not_sent_in_plain_text(plain_server):
    for query in ("ssl_mode=required", f"ssl_mode=verify_identity&ssl_ca={plain_server.ca}"):
        assert "SSL is required but the server doesn't support it" in _refusal(plain_server.url(query))
    assert _cipher(plain_server.url("connect_timeout=5")) == ""  # the default still falls back, as before


def test_serve_refused_by_the_database_s_tls_at_its_start_exits_1_not_4(tls_server):
    """Exit 4 says "worth trying again" (docs/operations.md §7.1): a wrong CA is no outage."""
    started = run("serve", "--database-url", tls_server.url(f"ssl_ca={tls_server.wrong_ca}"),
                  "--worker-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0")
    assert started.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in started.stderr, started.stderr


def test_several_nodes_that_all_fail_the_url_s_tls_are_a_refusal_with_its_reason(tls_server):
    """The writer choice probes each node: when every one fails the URL's TLS, the command says so (exit 1),
    not "no node is synced and ready" (exit 4), which hid the reason."""
    url = tls_server.url(f"ssl_ca={tls_server.wrong_ca}").replace(
        f"@localhost:{tls_server.port}", f"@localhost:{tls_server.port},127.0.0.1:{tls_server.port}")
    refused = run("queues", "--database-url", url)
    assert refused.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in refused.stderr, refused.stderr
    assert refused.stderr.count("\n") == 1, refused.stderr


def test_cli_reports_a_server_without_tls_under_required_as_a_refusal(plain_server):
    refused = run("queues", "--database-url", plain_server.url("ssl_mode=required"))
    assert refused.returncode == 1 and "doesn't support it" in refused.stderr, refused.stderr
    assert refused.stderr.count("\n") == 1 and "TLS" in refused.stderr, refused.stderr


def test_disabled_talks_plain_text_to_a_server_that_offers_tls(tls_server):
    assert _cipher(tls_server.url("ssl_mode=disabled")) == ""
    assert _cipher(tls_server.url("connect_timeout=5"))  # the default takes the TLS offered


def test_a_client_certificate_is_presented(tls_server):
    """``certified`` may log in only with a certificate the server's CA issued."""
    with_cert = f"ssl_ca={tls_server.ca}&ssl_cert={tls_server.cert}&ssl_key={tls_server.key}"
    assert _cipher(tls_server.url(with_cert, user="certified"))
    with pytest.raises(pymysql.err.OperationalError, match="Access denied"):
        connect(parse_database_url(tls_server.url(f"ssl_ca={tls_server.ca}", user="certified"))).close()


def test_connections_of_one_configuration_share_one_verifying_context(tls_server):
    config = parse_database_url(tls_server.url(f"ssl_ca={tls_server.ca}"))
    with contextlib.closing(connect(config)) as first, contextlib.closing(connect(config)) as second:
        assert first.ctx is second.ctx


def test_cli_commands_work_over_verified_tls_end_to_end(tls_server):
    """``migrate`` creates the database and its schema, then a read-only command reads it, both verified."""
    url = tls_server.url(f"ssl_mode=verify_identity&ssl_ca={tls_server.ca}", database="pulse_cli_tls")
    migrated = run("migrate", "--database-url", url)
    assert migrated.returncode == 0, migrated.stderr
    listed = run("queues", "--database-url", url)
    assert listed.returncode == 0, listed.stderr


def test_cli_reports_a_refused_certificate_and_a_contradiction_in_one_line(tls_server):
    """A certificate that fails verification is a refusal (exit 1), not a database to try again later (exit 4):
    waiting never mends a wrong CA."""
    refused = run("queues", "--database-url", tls_server.url(f"ssl_ca={tls_server.wrong_ca}"))
    assert refused.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in refused.stderr, refused.stderr
    assert refused.stderr.count("\n") == 1 and "TLS" in refused.stderr, refused.stderr
    assert PASSWORD not in refused.stderr
    other_name = run("queues", "--database-url", tls_server.url(f"ssl_ca={tls_server.ca}", host="127.0.0.1"))
    assert other_name.returncode == 1 and "mismatch" in other_name.stderr, other_name.stderr
    contradiction = run("queues", "--database-url", tls_server.url(f"ssl_mode=disabled&ssl_ca={tls_server.ca}"))
    assert contradiction.returncode == 2, contradiction.stderr
    assert contradiction.stderr.count("\n") == 1 and "ssl_ca" in contradiction.stderr


def test_a_serve_group_s_members_present_the_client_certificate_too(tls_server):
    """Each member reads the URL the first process hands it: a member without ``ssl_cert`` would be refused."""
    config = parse_database_url(tls_server.url(
        f"ssl_ca={tls_server.ca}&ssl_cert={tls_server.cert}&ssl_key={tls_server.key}", user="certified",
        database="pulse_group_tls"))
    with ServeProcess(config, extra_args=("--processes", "2")) as serve:
        assert serve.process.poll() is None
