"""``start_on_fresh_ports``: how often a start whose chosen port was taken is tried again."""

from __future__ import annotations

import pytest

from pulse_trio.ports import PORT_ATTEMPTS, start_on_fresh_ports


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
