"""``free_port``: where it looks; ``start_on_fresh_ports``: how often a start whose chosen port was taken is tried again."""

from __future__ import annotations

import pytest

import socket

from pulse_trio import ports
from pulse_trio.ports import PORT_ATTEMPTS, free_port, free_port_block, start_on_fresh_ports


class Taken(RuntimeError):
    pass


def test_a_start_is_tried_again_while_its_port_was_taken_and_returns_what_it_returns():
    calls: list[int] = []

    def start() -> str:
        calls.append(len(calls))
        if len(calls) < 3:
            raise Taken(len(calls))
        return "up"

    assert start_on_fresh_ports(start, lambda error: isinstance(error, Taken)) == "up"
    assert len(calls) == 3


def test_it_gives_up_after_the_last_attempt_with_the_last_error():
    calls: list[int] = []

    def start() -> None:
        calls.append(1)
        raise Taken(len(calls))

    with pytest.raises(Taken) as caught:
        start_on_fresh_ports(start, lambda error: True)
    assert len(calls) == PORT_ATTEMPTS and caught.value.args == (PORT_ATTEMPTS,)


def test_any_other_failure_is_raised_at_once():
    calls: list[int] = []

    def start() -> None:
        calls.append(1)
        raise ValueError("bad flag")

    with pytest.raises(ValueError, match="bad flag"):
        start_on_fresh_ports(start, lambda error: isinstance(error, Taken))
    assert calls == [1]


def test_a_free_port_lies_below_the_ephemeral_range_where_no_outgoing_connection_takes_it():
    low = int(open(ports.EPHEMERAL_RANGE_FILE).read().split()[0])
    chosen = {free_port() for _ in range(20)}
    assert all(low - ports.SPAN_BELOW <= port < low for port in chosen), chosen
    assert len(chosen) > 1  # at random, not the same for every caller
    for port in chosen:  # nothing was bound to it
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_in_use_is_never_chosen(monkeypatch):
    low = int(open(ports.EPHEMERAL_RANGE_FILE).read().split()[0])
    with socket.socket() as held:
        held.bind(("127.0.0.1", low - 1))
        monkeypatch.setattr(ports, "SPAN_BELOW", 1)  # the only candidate is the held one
        with socket.socket() as probe:
            port = free_port()
            probe.bind(("127.0.0.1", port))  # the operating system's choice, free
        assert port != low - 1


def test_a_block_is_consecutive_free_ports_below_the_span_free_port_picks_from():
    low = int(open(ports.EPHEMERAL_RANGE_FILE).read().split()[0])
    block = free_port_block(12)
    assert block == list(range(block[0], block[0] + 12))
    assert low - 2 * ports.SPAN_BELOW <= block[0] and block[-1] < low - ports.SPAN_BELOW
    assert all(ports.bindable(port) for port in block)
