"""Multi-host database URLs: parsed once, the same everywhere, refused clearly when malformed."""

from __future__ import annotations

import pytest

from pulse_trio.dburl import DatabaseConfig, DatabaseUrlError, parse_database_url


def test_several_hosts_keep_their_order_and_default_port():
    config = parse_database_url("mysql://u:p@db1:3306,db2:3307,db3/pulse")
    assert config.hosts == (("db1", 3306), ("db2", 3307), ("db3", 3306))
    assert config.clustered and (config.host, config.port) == ("db1", 3306)
    assert config.url(redact=False) == "mysql://u:p@db1:3306,db2:3307,db3:3306/pulse"
    assert config.for_node("db2", 3307).hosts == () and config.for_node("db2", 3307).port == 3307


def test_the_url_form_gives_back_the_same_config():
    """What a serve group hands its members: every option survives the round trip."""
    for url in ("mysql://u:p%40x@db1:3307/pulse?connect_timeout=2.5",
                "mysql://u@localhost:3306/pulse?unix_socket=/run/m.sock&connect_timeout=0.25",
                "mysql://u@db1:3306,db2:3306/pulse"):
        config = parse_database_url(url)
        assert parse_database_url(config.url(redact=False)) == config


def test_a_config_s_repr_holds_no_password():
    """A config lands in logs, tracebacks and pytest's failure output: its repr leaves the password out."""
    config = parse_database_url("mysql://app:s3cret-Pa55@db.example:3306/pulse")
    assert config.password == "s3cret-Pa55"
    assert "s3cret-Pa55" not in repr(config)
    assert "s3cret-Pa55" not in repr(config.for_node("other", 3307))


def test_one_host_is_not_a_cluster():
    config = parse_database_url("mysql://u@db1/pulse")
    assert config.hosts == () and not config.clustered


@pytest.mark.parametrize("url, message", [
    ("mysql://u@db1,db1/pulse", "names one node twice"),
    ("mysql://u@db1,,db2/pulse", "empty host"),
    ("mysql://u@db1:x,db2/pulse", "bad port"),
    ("mysql://u@db1,db2/pulse?unix_socket=/s", "cannot go with several hosts"),
    ("mysql://u@db1/pulse?connect_timeout=soon", "connect_timeout"),
    ("mysql://u@db1/pulse?connect_timeout=0", "connect_timeout"),
    ("mysql://u@db1/pulse?connect_timeout=-1", "connect_timeout"),
    ("mysql://u@db1/pulse?connect_timeout=nan", "connect_timeout"),
    ("mysql://u@db1/pulse?connect_timeout=1e10", "connect_timeout"),
    ("mysql://u:p@[::1/pulse", "not a database URL"),
    ("mysql://u@db1,[::1/pulse", "not a database URL"),
])
def test_malformed_multi_host_urls_are_refused(url, message):
    with pytest.raises(DatabaseUrlError, match=message):
        parse_database_url(url)


@pytest.mark.parametrize("url, message", [
    # parse_qs dropped an option without a value: TLS asked for this way was silently a plain-text connection,
    ("mysql://u:p@db1/pulse?ssl", "unknown database URL option"),
    ("mysql://u:p@db1/pulse?ssl=", "unknown database URL option"),
    ("mysql://u:p@db1/pulse?ssl-mode=", "unknown database URL option"),
    # and a known option given empty was read as absent (TCP to localhost:3306 instead of the socket).
    ("mysql://u:p@localhost/pulse?unix_socket=", "unix_socket has no value"),
    ("mysql://u:p@db1/pulse?connect_timeout=", "connect_timeout has no value"),
    # Two values are ambiguous; the last one silently won.
    ("mysql://u@db1/pulse?connect_timeout=1&connect_timeout=300", "connect_timeout is given twice"),
    # An explicit port 0 became 3306, and so did a colon with no port after it.
    ("mysql://u@db1:0/pulse", "port"),
    ("mysql://u@db1:3306,db2:0/pulse", "port"),
    ("mysql://u@db1:/pulse", "port"),
], ids=["ssl-flag", "ssl-empty", "ssl-mode-empty", "unix-socket-empty", "connect-timeout-empty",
        "option-twice", "port-zero", "port-zero-second-node", "port-empty"])
def test_an_option_or_port_the_url_does_not_really_give_is_refused_not_read_as_something_else(url, message):
    with pytest.raises(DatabaseUrlError, match=message):
        parse_database_url(url)


def test_a_plus_sign_in_an_option_is_a_plus_not_a_space():
    """A URL query is not a form (RFC 3986): ``/run/c++/mysqld.sock`` must not become ``/run/c  /mysqld.sock``."""
    config = parse_database_url("mysql://u@localhost/pulse?unix_socket=/run/c++/mysqld.sock")
    assert config.unix_socket == "/run/c++/mysqld.sock"
    assert parse_database_url(config.url(redact=False)) == config


def test_a_multi_host_url_writes_through_the_first_node_that_answers(database_server):
    """A plain server (no Galera) counts as ready; a node that refuses connections is passed over."""
    import contextlib
    import socket

    from pulse_trio.dburl import connect_node
    from pulse_trio.store.engine.writer import connect, create_database, drop_database, writer_for

    with contextlib.closing(connect_node(database_server, database=False)) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@port")
        (port,) = cur.fetchone()
        cur.execute("CREATE USER IF NOT EXISTS 'pulse_tcp'@'127.0.0.1' IDENTIFIED BY 'tcp'")
        cur.execute("GRANT ALL PRIVILEGES ON *.* TO 'pulse_tcp'@'127.0.0.1'")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    config = parse_database_url(f"mysql://pulse_tcp:tcp@127.0.0.1:{dead},127.0.0.1:{port}/pulse_multi_host")
    create_database(config)
    try:
        with contextlib.closing(connect(config)) as conn:
            assert conn.port == port
        assert writer_for(config).current() == ("127.0.0.1", port)
    finally:
        drop_database(config)


@pytest.mark.parametrize("password", ["päss-wörd", "pass€word", "пароль"], ids=["latin1-letters", "euro", "cyrillic"])
def test_a_non_ascii_password_given_percent_encoded_logs_in(database_server, password):
    """Percent-encoding stands for UTF-8 bytes, and the server hashed the password's UTF-8 bytes: PyMySQL sent
    a str password as latin-1 (1045 for ``ä``, a UnicodeEncodeError for ``€``)."""
    import contextlib
    import secrets
    from urllib.parse import quote

    from pulse_trio.dburl import connect_node

    user = f"pulse_u8_{secrets.token_hex(3)}"
    with contextlib.closing(connect_node(database_server, database=False)) as admin, admin.cursor() as cur:
        cur.execute("SELECT @@port, @@character_set_client")
        port, charset = cur.fetchone()
        assert charset == "utf8mb4"  # the password below is sent, and hashed, as UTF-8
        cur.execute(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY %s", (password,))
    try:
        config = parse_database_url(f"mysql://{user}:{quote(password, safe='')}@127.0.0.1:{port}/mysql")
        assert config.password == password
        with contextlib.closing(connect_node(config, database=False)) as conn, conn.cursor() as cur:
            cur.execute("SELECT CURRENT_USER()")
            assert cur.fetchone()[0] == f"{user}@127.0.0.1"
    finally:
        with contextlib.closing(connect_node(database_server, database=False)) as admin, admin.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'127.0.0.1'")


def test_a_multi_host_url_is_not_sent_to_its_first_node_by_the_one_server_connect():
    """Only the store's writer choice knows which node to write to: the URL module refuses to guess."""
    from pulse_trio.dburl import connect, create_database

    config = parse_database_url("mysql://u@127.0.0.1:1,127.0.0.1:2/pulse")
    with pytest.raises(ValueError, match="names several nodes: connect through pulse_trio.store.engine.writer.connect"):
        connect(config)
    with pytest.raises(ValueError, match="names several nodes"):
        create_database(config)


def test_no_node_answering_is_a_connection_error_naming_the_nodes():
    import socket

    import pymysql

    from pulse_trio.store.engine.writer import connect, writer_for

    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    config = parse_database_url(f"mysql://u@127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/pulse?connect_timeout=1")
    with pytest.raises(pymysql.err.OperationalError, match="no database node is synced and ready among"):
        connect(config)
    writer_for(config).failed(("127.0.0.1", ports[0]))  # a failure report never raises
    assert writer_for(config).writer is None


def _port(server) -> int:
    import contextlib

    from pulse_trio.dburl import connect_node

    with contextlib.closing(connect_node(server, database=False)) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@port")
        return cur.fetchone()[0]


def test_a_wrong_password_on_a_multi_host_url_is_reported_as_such(database_server):
    """A node that refuses the login is up: the caller sees 1045, not "no database node is synced and ready"."""
    import socket

    import pymysql

    from pulse_trio.store.engine.writer import connect, writer_for

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    config = parse_database_url(f"mysql://pulse_nobody:wrong@127.0.0.1:{_port(database_server)},"
                                f"127.0.0.1:{dead}/pulse?connect_timeout=1")
    try:
        with pytest.raises(pymysql.err.OperationalError) as caught:
            connect(config)
        assert caught.value.args[0] == 1045, caught.value
    finally:
        writer_for(config).reset()


@pytest.fixture
def second_server(tmp_path):
    """Another real MariaDB, standing for a second node (neither runs Galera, so both count as ready)."""
    from pulse_trio.managed_db import ManagedMariaDB

    server = ManagedMariaDB(tmp_path / "node-b", fast=True)
    try:
        yield server.start().with_database("mysql")
    finally:
        server.stop()


@pytest.mark.live  # a second server
def test_a_writer_that_refuses_a_login_for_want_of_connections_stays_the_writer(database_server, second_server):
    """A writer whose connection slots are full for a moment (1040, 1226) is still up: the process that hit it
    moved to the next node alone while every other one stayed, two writers (docs/deployment.md §1, §2)."""
    import contextlib
    import secrets
    import time

    import pymysql

    from pulse_trio.dburl import connect_node
    from pulse_trio.store.engine.writer import RECHECK_AFTER_S, connect, writer_for

    user, password = f"cap_{secrets.token_hex(3)}", "pw"
    for server, limit in ((database_server, 2), (second_server, 0)):
        with contextlib.closing(connect_node(server, database=False)) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY %s WITH MAX_USER_CONNECTIONS {limit}",
                        (password,))
            cur.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{user}'@'127.0.0.1'")
    a, b = ("127.0.0.1", _port(database_server)), ("127.0.0.1", _port(second_server))
    config = parse_database_url(f"mysql://{user}:{password}@{a[0]}:{a[1]},{b[0]}:{b[1]}/mysql")
    selector = writer_for(config)
    others: list = []
    try:
        assert selector.current() == a  # the first node writes
        others = [connect_node(config.for_node(*a)) for _ in range(2)]  # other processes hold every slot A allows
        time.sleep(RECHECK_AFTER_S + 0.1)  # a while after the choice, as in production
        with pytest.raises(pymysql.err.OperationalError) as caught:
            connect(config)
        assert caught.value.args[0] == 1226, caught.value  # the store's retries take it from here
        assert (selector.current(), selector.changes) == (a, 0), "the process moved its writer on its own"
    finally:
        for conn in others:
            conn.close()
        selector.reset()
        with contextlib.closing(connect_node(database_server, database=False)) as conn, conn.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'127.0.0.1'")


@pytest.mark.live  # a listening socket that never answers
def test_a_node_that_accepts_and_never_answers_is_not_ready_and_does_not_block():
    """connect_timeout covers only the TCP connect; the probe bounds the greeting too."""
    import socket
    import time

    from pulse_trio.store.engine.writer import PROBE_TIMEOUT_S, _ready

    with socket.socket() as hung:  # the kernel completes the handshake; nobody ever writes a greeting
        hung.bind(("127.0.0.1", 0))
        hung.listen(8)
        port = hung.getsockname()[1]
        node = parse_database_url(f"mysql://u:p@127.0.0.1:{port}/db")
        began = time.monotonic()
        assert _ready(node) is False
        assert time.monotonic() - began < PROBE_TIMEOUT_S * 3


@pytest.mark.parametrize("config", [
    DatabaseConfig(database="pulse", user="app@edge", password="p@ss:w/rd?#%", host="db.internal", port=3307),
    DatabaseConfig(database="pulse", user="root", password="", host="::1", port=3306),
    DatabaseConfig(database="pulse db", user="root", host="localhost", port=3306, unix_socket="/run/my sql/s.sock"),
    DatabaseConfig(database="pulse", user="u", password="x y", host="fd00::1", port=3306,
                   hosts=(("fd00::1", 3306), ("node-2", 3307))),
], ids=["reserved-characters", "ipv6", "spaces-and-socket", "ipv6-cluster"])
def test_the_url_form_reads_back_as_the_same_config(config):
    """What the bench hands its serve processes must parse back to the very same login."""
    assert parse_database_url(config.url(redact=False)) == config
    assert config.password == "" or config.password not in config.url()


@pytest.mark.live  # a socket that refuses, then accepts and never answers
def test_a_bounded_single_attempt_goes_through_the_writer_the_process_chose(database_server):
    """A stop's last record (``Store.run_once``) connects with a shorter connect_timeout than the URL's.

    That config was a key of its own among the writer choices: the record
    went through a second choice, made from scratch, which probed the nodes
    the process had already left and spent its whole bound on one that hangs.
    """
    import contextlib
    import functools
    import socket

    import trio

    from pulse_trio.dburl import connect_node
    from pulse_trio.store.engine.registry import read_only
    from pulse_trio.store.engine.trio_bridge import Store
    from pulse_trio.store.engine.writer import writer_for

    @read_only
    def node_port(tx):
        return tx.one("SELECT @@port")[0]

    with contextlib.closing(connect_node(database_server, database=False)) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@port")
        (port,) = cur.fetchone()
        cur.execute("CREATE USER IF NOT EXISTS 'pulse_tcp'@'127.0.0.1' IDENTIFIED BY 'tcp'")
        cur.execute("GRANT ALL PRIVILEGES ON *.* TO 'pulse_tcp'@'127.0.0.1'")
    with socket.socket() as first:
        first.bind(("127.0.0.1", 0))  # not listening yet: refused, so the process writes through the second
        config = parse_database_url(f"mysql://pulse_tcp:tcp@127.0.0.1:{first.getsockname()[1]},"
                                    f"127.0.0.1:{port}/mysql")
        selector = writer_for(config)
        selector.reset()
        store = Store(config, pool_size=1)
        try:
            assert store.run_sync(node_port) == port and selector.writer == ("127.0.0.1", port)
            first.listen(8)  # the first node now accepts and never answers (a frozen host)
            assert trio.run(functools.partial(store.run_once, node_port, timeout_s=1.0)) == port
        finally:
            store.close()
            selector.reset()
