"""Multi-host database URLs: parsed once, the same everywhere, refused clearly when malformed."""

from __future__ import annotations

import pytest

from pulse_trio.dburl import DatabaseUrlError, parse_database_url


def test_several_hosts_keep_their_order_and_default_port():
    config = parse_database_url("mysql://u:p@db1:3306,db2:3307,db3/pulse")
    assert config.hosts == (("db1", 3306), ("db2", 3307), ("db3", 3306))
    assert config.clustered and (config.host, config.port) == ("db1", 3306)
    assert config.url(redact=False) == "mysql://u:p@db1:3306,db2:3307,db3:3306/pulse"
    assert config.for_node("db2", 3307).hosts == () and config.for_node("db2", 3307).port == 3307


def test_one_host_is_not_a_cluster():
    config = parse_database_url("mysql://u@db1/pulse")
    assert config.hosts == () and not config.clustered


@pytest.mark.parametrize("url, message", [
    ("mysql://u@db1,db1/pulse", "names one node twice"),
    ("mysql://u@db1,,db2/pulse", "empty host"),
    ("mysql://u@db1:x,db2/pulse", "bad port"),
    ("mysql://u@db1,db2/pulse?unix_socket=/s", "cannot go with several hosts"),
    ("mysql://u@db1/pulse?connect_timeout=soon", "connect_timeout"),
])
def test_malformed_multi_host_urls_are_refused(url, message):
    with pytest.raises(DatabaseUrlError, match=message):
        parse_database_url(url)
