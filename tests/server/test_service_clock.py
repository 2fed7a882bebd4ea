"""The service's "now": the wall clock in a running instance, Trio's clock in scenario tests."""

from __future__ import annotations

import datetime as dt

import pytest
import trio

from pulse_trio.server.clock import ServiceClock, virtual_origin

UTC = dt.timezone.utc


async def test_a_running_instance_follows_the_wall_clock_not_trios(mock_clock):
    """Trio's clock stands still while the host is suspended; the wall clock does not, and others judge by it."""
    clock = ServiceClock()
    assert not clock.virtual
    mock_clock.jump(3600)  # Trio's clock moves an hour; the wall clock does not
    assert abs((clock.now() - dt.datetime.now(UTC)).total_seconds()) < 1
    moment = dt.datetime.now(UTC) + dt.timedelta(seconds=30)
    assert clock.trio_time_at(moment) == pytest.approx(trio.current_time() + 30, abs=1)


async def test_a_virtual_clock_runs_on_trios_clock(mock_clock):
    clock = ServiceClock(virtual=True)
    before = clock.now()
    assert abs((before - dt.datetime.now(UTC)).total_seconds()) < 1
    mock_clock.jump(3600)
    assert clock.now() - before == dt.timedelta(hours=1)
    assert clock.trio_time_at(before + dt.timedelta(hours=2)) == pytest.approx(trio.current_time() + 3600)


async def test_virtual_clocks_with_one_origin_agree_whenever_they_started(mock_clock):
    origin = virtual_origin()
    first = ServiceClock(virtual=True, origin=origin)
    mock_clock.jump(90)
    second = ServiceClock(virtual=True, origin=origin)
    assert first.now() == second.now()
    alone = ServiceClock(virtual=True)  # its own origin: it reads the wall clock's time at its start
    assert (first.now() - alone.now()).total_seconds() == pytest.approx(90, abs=1)


def test_an_origin_is_only_for_a_virtual_clock():
    with pytest.raises(ValueError):
        ServiceClock(origin=dt.datetime.now(UTC))
