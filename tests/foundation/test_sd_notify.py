"""Whether systemd asked this process for watchdog pings, read as sd_watchdog_enabled(3) reads it."""

from __future__ import annotations

import logging
import socket

import anyio

from pulse_trio.sd_notify import notify, watchdog_interval, without_notify_socket
from pulse_trio.watchdog import keep_alive

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
                           ({"WATCHDOG_USEC": "3²"}, "WATCHDOG_USEC='3²'"),  # a digit to str.isdigit, not to int
                           ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "7²"}, "WATCHDOG_PID='7²'"),
                           ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "main"}, "WATCHDOG_PID='main'")):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="pulse_trio.systemd"):
            assert watchdog_interval(environ, PID) is None
        assert [(r.levelno, named in r.getMessage()) for r in caplog.records] == [(logging.WARNING, True)], (
            environ, caplog.text)


def test_a_child_that_is_not_the_service_gets_none_of_systemds_variables():
    environ = {"NOTIFY_SOCKET": "/run/n", "WATCHDOG_USEC": "1", "WATCHDOG_PID": "7", "PATH": "/bin"}
    assert without_notify_socket(environ) == {"PATH": "/bin"}


def _notify_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "pulse_trio.systemd"]


def test_a_notify_socket_that_keeps_failing_is_logged_once_and_once_more_when_it_works_again(tmp_path, monkeypatch,
                                                                                             caplog):
    """A unit's watchdog pings every half interval: a broken NOTIFY_SOCKET must not write a line each time.

    The path names no socket at first, then a real datagram socket that is
    bound there and receives, then one that is closed under it.
    """
    path = tmp_path / "notify.sock"
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    caplog.set_level(logging.INFO, logger="pulse_trio.systemd")
    assert [notify("WATCHDOG=1") for _ in range(5)] == [False] * 5
    lines = _notify_lines(caplog)
    assert len(lines) == 1 and str(path) in lines[0], lines

    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as systemd:
        systemd.bind(str(path))
        systemd.settimeout(5)
        caplog.clear()
        assert notify("WATCHDOG=1") and notify("WATCHDOG=1")
        assert systemd.recv(4096) == b"WATCHDOG=1" and systemd.recv(4096) == b"WATCHDOG=1"
        lines = _notify_lines(caplog)
        assert len(lines) == 1 and "works again" in lines[0] and "4 more" in lines[0], lines
    caplog.clear()
    assert [notify("WATCHDOG=1") for _ in range(3)] == [False] * 3  # the socket closed: a new failure, said once
    lines = _notify_lines(caplog)
    assert len(lines) == 1 and "could not notify" in lines[0], lines


def test_each_failing_notify_socket_is_logged_on_its_own(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="pulse_trio.systemd")
    for name in ("first.sock", "second.sock", "first.sock", "second.sock"):
        monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / name))
        assert not notify("READY=1")
    assert [line.split(" at ")[1].split(":")[0] for line in _notify_lines(caplog)] == [
        str(tmp_path / "first.sock"), str(tmp_path / "second.sock")]


def test_the_watchdogs_pings_to_a_missing_socket_write_one_line(tmp_path, monkeypatch, caplog):
    """keep_alive as serve and worker run use it, a ping every few milliseconds here, for a moment."""
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "gone.sock"))
    caplog.set_level(logging.INFO, logger="pulse_trio.systemd")

    async def watch() -> None:
        with anyio.move_on_after(0.3):
            await keep_alive(0.02)

    anyio.run(watch)
    lines = _notify_lines(caplog)
    assert len(lines) == 1 and "gone.sock" in lines[0], lines
