"""Settings: flags, PULSE_* variables, decimal seconds, database URLs."""

from __future__ import annotations

import argparse

import pytest

from pulse_trio import config as cfg
from pulse_trio.dburl import DatabaseUrlError, parse_database_url


def _parse(argv, monkeypatch=None, env=None):
    if env:
        for k, v in env.items():
            monkeypatch.setenv(k, v)
    parser = argparse.ArgumentParser()
    cfg.add_options(parser)
    return cfg.settings_from_args(parser.parse_args(argv))


def test_defaults_match_platform_spec():
    s = _parse([])
    assert (s.lease_ttl, s.start_timeout, s.cancel_grace, s.priority_step) == (30, 30, 30, 30)
    assert (s.hello_timeout, s.ping_interval) == (10, 20)
    assert s.poll_interval <= 0.05
    assert s.permit_quarantine is None and s.database_url is None


def test_decimal_seconds_and_listen_addresses():
    s = _parse(["--lease-ttl", "0.5", "--worker-listen", "0.0.0.0:0", "--http-listen", "[::1]:8080"])
    assert s.lease_ttl == 0.5
    assert s.worker_listen == ("0.0.0.0", 0)
    assert s.http_listen == ("::1", 8080)


@pytest.mark.parametrize("bad", ["0", "-1", "abc", "nan", "inf"])
def test_non_positive_or_non_numeric_seconds_are_rejected(bad):
    with pytest.raises(SystemExit):
        _parse(["--lease-ttl", bad])


@pytest.mark.parametrize("bad", ["1e-400", "1e400", "9" * 400])
def test_seconds_and_shares_whose_float_would_be_zero_or_infinite_are_rejected(bad, monkeypatch):
    """Judged as the float the process runs by: 1e-400 s is 0.0 (a dispatcher polling without a pause)."""
    for flag in ("--poll-interval", "--hello-timeout", "--purge-busy-share"):
        with pytest.raises(SystemExit):
            _parse([flag, bad])
    with pytest.raises(SystemExit):
        _parse([], monkeypatch, {"PULSE_POLL_INTERVAL": bad})
    with pytest.raises(SystemExit):
        _parse(["--lease-ttl", bad])  # a cluster setting: its own bounds, to the millisecond


def test_a_share_just_above_one_is_rejected_though_its_float_is_one():
    """The bound is the number as written: 1.00000000000000000001 is over 1 though it rounds to 1.0."""
    with pytest.raises(SystemExit):
        _parse(["--purge-busy-share", "1.00000000000000000001"])
    assert _parse(["--purge-busy-share", "1"]).purge_busy_share == 1.0


def test_environment_variables_and_flag_precedence(monkeypatch):
    s = _parse([], monkeypatch, {"PULSE_LEASE_TTL": "1.25", "PULSE_DATABASE_URL": "mysql://u@h/db"})
    assert s.lease_ttl == 1.25 and s.database_url == "mysql://u@h/db"
    s = _parse(["--lease-ttl", "2"], monkeypatch, {"PULSE_LEASE_TTL": "1.25"})
    assert s.lease_ttl == 2


def test_database_url_forms():
    c = parse_database_url("mysql://app:p%40ss@db.example:3307/pulse")
    assert (c.user, c.password, c.host, c.port, c.database) == ("app", "p@ss", "db.example", 3307, "pulse")
    assert "p@ss" not in c.url() and c.url(redact=False).startswith("mysql://app:p%40ss@")
    assert parse_database_url(c.url(redact=False)) == c
    c = parse_database_url("mysql://root@localhost/pulse?unix_socket=/run/mysqld/mysqld.sock")
    assert c.unix_socket == "/run/mysqld/mysqld.sock"
    assert c.connect_kwargs()["unix_socket"] == "/run/mysqld/mysqld.sock"


@pytest.mark.parametrize("bad", ["postgres://h/db", "mysql://h/", "mysql://h/a/b", "mysql://h/db?sslmode=x"])
def test_bad_database_urls(bad):
    with pytest.raises(DatabaseUrlError):
        parse_database_url(bad)


def test_datetime_columns_read_back_exactly(database_config):
    """DATETIME(6) goes through the C parser: microseconds kept, whole seconds too, odd values as text."""
    import datetime as dt

    from pulse_trio.dburl import connect

    conn = connect(database_config)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT CAST('2026-12-02 12:00:00.000123' AS DATETIME(6)),"
                        " CAST('2026-12-02 12:00:00' AS DATETIME), CAST('2026-12-02 23:59:59.999999' AS DATETIME(6))")
            assert cur.fetchone() == (dt.datetime(2026, 12, 2, 12, 0, 0, 123), dt.datetime(2026, 12, 2, 12),
                                      dt.datetime(2026, 12, 2, 23, 59, 59, 999999))
    finally:
        conn.close()
    from pulse_trio.driver import _read_datetime

    assert _read_datetime("0000-00-00 00:00:00") == "0000-00-00 00:00:00"  # what PyMySQL gives for zero dates


def test_datetime_parameters_are_written_as_pymysql_would(database_config):
    """The C-backed DATETIME encoder sends PyMySQL's exact literal, and the server reads it back exactly."""
    import datetime as dt

    from pymysql.converters import escape_datetime

    from pulse_trio.dburl import connect
    from pulse_trio.driver import _write_datetime

    values = [dt.datetime(2026, 12, 2, 12, 0, 0, 123), dt.datetime(2026, 12, 2, 12), dt.datetime(1, 1, 1),
              dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
              dt.datetime(2026, 12, 2, 12, 0, 0, 5, tzinfo=dt.timezone(dt.timedelta(hours=2)))]
    for value in values:
        assert _write_datetime(value) == escape_datetime(value)
    conn = connect(database_config)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT CAST(%s AS DATETIME(6)), CAST(%s AS DATETIME(6)), CAST(%s AS DATETIME(6))",
                        values[:3])
            assert cur.fetchone() == tuple(values[:3])
    finally:
        conn.close()


def test_node_liveness_defaults_flags_and_environment(monkeypatch):
    s = _parse([])
    assert (s.node_heartbeat, s.node_lapse) == (5, 15)  # a process is lost after three missed heartbeats
    s = _parse(["--node-heartbeat", "0.2", "--node-lapse", "1"])
    assert (s.node_heartbeat, s.node_lapse) == (0.2, 1)
    s = _parse([], monkeypatch, {"PULSE_NODE_HEARTBEAT": "2", "PULSE_NODE_LAPSE": "7.5"})
    assert (s.node_heartbeat, s.node_lapse) == (2, 7.5)
    s.check()


def test_a_lapse_shorter_than_two_heartbeats_is_refused(tmp_path):
    import subprocess
    import sys

    with pytest.raises(ValueError, match="--node-lapse"):
        cfg.Settings(node_heartbeat=5, node_lapse=9.9).check()
    cfg.Settings(node_heartbeat=5, node_lapse=10).check()
    done = subprocess.run([sys.executable, "-m", "pulse_trio", "serve", "--node-heartbeat", "5", "--node-lapse", "6",
                           "--state-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--node-lapse" in done.stderr, done
    assert not (tmp_path / "mariadb").exists()  # refused before anything started


def test_purge_busy_share_is_a_fraction_of_time(monkeypatch):
    assert _parse([]).purge_busy_share == 0.05
    assert _parse(["--purge-busy-share", "0.2"]).purge_busy_share == 0.2
    assert _parse([], monkeypatch, {"PULSE_PURGE_BUSY_SHARE": "1"}).purge_busy_share == 1
    for bad in ("0", "-0.1", "1.5", "abc", "nan"):
        with pytest.raises(SystemExit):
            _parse(["--purge-busy-share", bad])
