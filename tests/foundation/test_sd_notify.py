"""Whether systemd asked this process for watchdog pings, read as sd_watchdog_enabled(3) reads it."""

from __future__ import annotations

import logging

from pulse_trio.sd_notify import watchdog_interval, without_notify_socket

PID = 4242


def test_watchdog_usec_asks_for_pings_every_so_many_microseconds():
    assert watchdog_interval({"WATCHDOG_USEC": "30000000"}, PID) == 30.0
    assert watchdog_interval({"WATCHDOG_USEC": "1500000", "WATCHDOG_PID": str(PID)}, PID) == 1.5


def test_no_watchdog_without_watchdog_usec_or_for_another_process(caplog):
    with caplog.at_level(logging.INFO, logger="pulse_trio.systemd"):
        assert watchdog_interval({}, PID) is None
        assert watchdog_interval({"WATCHDOG_USEC": ""}, PID) is None
        # Inherited from the process systemd started: the pings are that one's to send.
        assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, PID) is None
    assert caplog.records == []


def test_a_bad_watchdog_value_is_no_watchdog_and_one_log_line(caplog):
    for environ, named in (({"WATCHDOG_USEC": "30s"}, "WATCHDOG_USEC='30s'"),
                           ({"WATCHDOG_USEC": "0"}, "WATCHDOG_USEC='0'"),
                           ({"WATCHDOG_USEC": "-5"}, "WATCHDOG_USEC='-5'"),
                           ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "main"}, "WATCHDOG_PID='main'")):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="pulse_trio.systemd"):
            assert watchdog_interval(environ, PID) is None
        assert [(r.levelno, named in r.getMessage()) for r in caplog.records] == [(logging.WARNING, True)], (
            environ, caplog.text)


def test_a_child_that_is_not_the_service_gets_none_of_systemds_variables():
    environ = {"NOTIFY_SOCKET": "/run/n", "WATCHDOG_USEC": "1", "WATCHDOG_PID": "7", "PATH": "/bin"}
    assert without_notify_socket(environ) == {"PATH": "/bin"}
