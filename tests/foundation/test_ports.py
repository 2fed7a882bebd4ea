"""``free_port``: where it looks; ``start_on_fresh_ports``: how often a start whose chosen port was taken is tried again."""

from __future__ import annotations

import collections
import socket

import pytest

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



# -- choosing ports: these bind sockets, so they are not of the in-memory tier --------------------------

@pytest.mark.live
def test_a_free_port_comes_from_its_band_below_the_ephemeral_range_and_is_free():
    first, last = ports._below_ephemeral(ports.SINGLE_BAND)
    low = ports.ephemeral_low()
    chosen = [free_port() for _ in range(20)]
    if last - first >= ports._LEAST_SPAN:  # this host leaves room below its ephemeral range (Linux's default does)
        assert all(first <= port < last for port in chosen), chosen
        assert low is None or max(chosen) < low  # where no outgoing connection takes its local port
    assert len(set(chosen)) == len(chosen)  # none handed out twice, the system's choices included
    for port in chosen:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


@pytest.mark.live
def test_a_port_in_use_or_handed_out_lately_is_not_chosen_again(monkeypatch):
    monkeypatch.setattr(ports, "ephemeral_low", lambda: None)  # the band as it is, whatever this host's range
    monkeypatch.setattr(ports, "_LEAST_SPAN", 1)
    monkeypatch.setattr(ports, "_RECENT", collections.deque(maxlen=256))  # what other tests here were handed
    low, high = ports.SINGLE_BAND
    first = next(port for port in range(low, high - 1) if ports.bindable(port) and ports.bindable(port + 1))
    with socket.socket() as held:
        held.bind(("127.0.0.1", first))
        monkeypatch.setattr(ports, "SINGLE_BAND", (first, first + 2))  # one port in use, one free
        one = free_port()
        assert one == first + 1
        other = free_port()  # the band's only free port was just handed out: the system chooses
        assert other not in (first, first + 1) and ports.bindable(other)


@pytest.mark.live
def test_a_block_is_consecutive_free_ports_from_the_band_below_the_single_ports():
    block = free_port_block(12)
    assert block == list(range(block[0], block[0] + 12))
    assert ports.BLOCK_BAND[0] <= block[0] and block[-1] < ports.BLOCK_BAND[1] <= ports.SINGLE_BAND[0]
    assert all(ports.bindable(port) for port in block)
