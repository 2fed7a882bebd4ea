"""The lease clock: one task calls every lease's timer back, on time, in order, never once cancelled."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from pulse_trio.sdk import clock as lc


@pytest.fixture
def mock_clock():
    return trio.testing.MockClock(autojump_threshold=0)


async def test_timers_are_called_at_their_time_in_order(mock_clock):
    clock, calls = lc.LeaseClock(), []
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(clock.run)
        for delay, name in [(3, "c"), (1, "a"), (2, "b"), (2, "b2")]:  # a tie keeps the order it was set in
            clock.call_at(start + delay, lambda name=name: calls.append((name, trio.current_time() - start)))
        await trio.sleep(5)
        nursery.cancel_scope.cancel()
    assert calls == [("a", 1), ("b", 2), ("b2", 2), ("c", 3)]
    assert len(clock) == 0


async def test_an_earlier_timer_wakes_the_sleeping_clock(mock_clock):
    clock, calls = lc.LeaseClock(), []
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(clock.run)
        clock.call_at(start + 100, lambda: calls.append("late"))
        await trio.sleep(1)  # the clock now sleeps until +100
        clock.call_at(start + 2, lambda: calls.append(trio.current_time() - start))
        await trio.sleep(10)
        assert calls == [2]
        nursery.cancel_scope.cancel()


async def test_a_cancelled_timer_is_never_called_and_does_not_pile_up(mock_clock):
    clock, calls = lc.LeaseClock(), []
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(clock.run)
        kept = clock.call_at(start + 5, lambda: calls.append("kept"))
        for n in range(10 * lc.COMPACT_AFTER):  # one lease after another: set, then cancelled at its finish
            clock.cancel(clock.call_at(start + 1 + n / 1000, lambda: calls.append("cancelled")))
        assert len(clock._heap) <= 2 * lc.COMPACT_AFTER + 2  # compacted as it went
        await trio.sleep(10)
        assert calls == ["kept"] and kept.cancelled  # spent: cancelling it again is harmless
        clock.cancel(kept)
        clock.cancel(None)
        assert len(clock) == 0 and clock._heap == []
        nursery.cancel_scope.cancel()


async def test_a_callback_may_set_the_next_timer(mock_clock):
    clock, calls = lc.LeaseClock(), []
    start = trio.current_time()

    def ring() -> None:  # what a lease does: act, then re-arm
        calls.append(trio.current_time() - start)
        if len(calls) < 3:
            clock.call_at(trio.current_time() + 1, ring)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(clock.run)
        clock.call_at(start + 1, ring)
        await trio.sleep(10)
        nursery.cancel_scope.cancel()
    assert calls == [1, 2, 3]
