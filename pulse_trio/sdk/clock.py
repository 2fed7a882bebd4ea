"""One task that keeps every lease's timers for a worker.

A running handler needs two timers: its next renewal (a third of the time
left) and its watchdog (the local expiry). Two sleeping tasks per lease
cost two spawns and two cancellations for every task run, which is most of
what a short handler costs the worker. Instead each runner sets one
:class:`Timer` here, and a single task sleeps until the earliest and calls
it back, synchronously: the callback only decides (give the lease up, or
start a renewal in the runner's own nursery), so the clock never waits on
one lease while another's deadline passes.

A cancelled timer stays in the heap until it comes up or a compaction drops
it; it holds no reference to its runner meanwhile.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import sys
from collections.abc import Callable

import anyio

#: Compact the heap when more than this many entries, and over half of them, are cancelled.
COMPACT_AFTER = 256


def loop_clock() -> Callable[[], float]:
    """The running event loop's clock, as a function cheap enough for the hot path.

    It reads what ``anyio.current_time()`` reads, without looking the
    backend up on every call: ``loop.time`` under asyncio (uvloop included),
    ``trio.current_time`` under Trio (virtual clocks included; Trio is
    running, so it is loaded: the SDK never imports it), and
    ``anyio.current_time`` for any other backend.
    """
    try:
        import sniffio
    except ImportError:  # sniffio comes with Trio; without it, AnyIO can only be running asyncio
        return asyncio.get_running_loop().time
    library = sniffio.current_async_library()
    if library == "asyncio":
        return asyncio.get_running_loop().time
    running = sys.modules.get(library)
    if library == "trio" and running is not None:
        return running.current_time  # type: ignore[no-any-return]
    return anyio.current_time


class Timer:
    """A callback due at an event-loop clock time (``anyio.current_time()``); :meth:`cancel` before it is due and it never runs."""

    __slots__ = ("when", "callback")

    def __init__(self, when: float, callback: Callable[[], object]) -> None:
        self.when = when
        self.callback: Callable[[], object] | None = callback

    def cancel(self) -> None:
        self.callback = None

    @property
    def cancelled(self) -> bool:
        return self.callback is None


class LeaseClock:
    """Timers for many leases, run by one task (:meth:`run`, in the worker's nursery)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Timer]] = []
        self._order = itertools.count()  # ties are called in the order they were set
        self._nap: anyio.CancelScope | None = None
        self._cancelled = 0
        #: The loop's clock (set by :meth:`run`); timers are due in its time.
        self.now: Callable[[], float] = anyio.current_time

    def __len__(self) -> int:
        """Timers set and not yet called or cancelled (for tests)."""
        return sum(1 for _, _, timer in self._heap if not timer.cancelled)

    def call_at(self, when: float, callback: Callable[[], object]) -> Timer:
        """Call ``callback()`` from the clock's task once ``now() >= when``."""
        timer = Timer(when, callback)
        heapq.heappush(self._heap, (when, next(self._order), timer))
        if self._nap is not None and when < self._nap.deadline:
            self._nap.deadline = when  # wake earlier than planned
        return timer

    def cancel(self, timer: Timer | None) -> None:
        """Cancel ``timer`` (None and spent timers are fine) and keep the heap from filling with them."""
        if timer is None or timer.cancelled:
            return
        timer.cancel()
        self._cancelled += 1
        if self._cancelled > COMPACT_AFTER and 2 * self._cancelled > len(self._heap):
            self._heap = [entry for entry in self._heap if not entry[2].cancelled]
            heapq.heapify(self._heap)
            self._cancelled = 0

    async def run(self) -> None:
        self.now = now = loop_clock()
        while True:
            try:
                with anyio.CancelScope(deadline=self._next_due()) as self._nap:
                    await anyio.sleep_forever()
            finally:
                self._nap = None  # callbacks below (and a stopped clock) need no wake-up
            due = now()
            while self._heap and self._heap[0][0] <= due:
                timer = heapq.heappop(self._heap)[2]
                callback = timer.callback
                if callback is None:
                    self._cancelled -= 1
                    continue
                timer.callback = None  # spent: cancelling it now is a no-op
                callback()

    def _next_due(self) -> float:
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
            self._cancelled -= 1
        return self._heap[0][0] if self._heap else math.inf
