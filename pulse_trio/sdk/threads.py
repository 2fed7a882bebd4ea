"""The threads ``def`` handlers run in: at most ``capacity`` at once, let go of when the worker stops hard.

A thread cannot be interrupted. A lease's own stop (a cancel request, a
lost lease) still waits for its handler to return or to call
``check_cancelled()``: its outcome is wanted, and until then the thread
holds one of the worker's threads. A hard stop of the worker (``stop()``,
a second SIGTERM, ``run()`` cancelled by its caller) does not wait: each
handler still in its thread is *abandoned*, so ``run()`` returns at once,
and the thread runs on until the handler returns by itself (its
``check_cancelled()`` raises from then on). Python has no way to end a
thread.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, NoReturn

import anyio

from pulse_trio.sdk.stats import WorkerStats

log = logging.getLogger("pulse_trio.sdk")


class HandlerThreads:
    """One worker's handler threads: a limiter of one token per task of its capacity, and the waits a hard
    stop abandons."""

    def __init__(self, capacity: int, stats: WorkerStats) -> None:
        self.size = _threads_for(capacity)
        self.stats = stats
        self.limiter: anyio.CapacityLimiter | None = None  # made by open(): it belongs to one event loop
        self._unbounded: anyio.CapacityLimiter | None = None  # the threads run under ``limiter`` already
        self._waits: set[anyio.CancelScope] = set()

    def open(self) -> None:
        """Make the limiters for the event loop that runs the worker now (called in that loop)."""
        self.limiter = anyio.CapacityLimiter(self.size)
        self._unbounded = anyio.CapacityLimiter(math.inf)
        self._waits.clear()

    def resize(self, capacity: int) -> None:
        self.size = _threads_for(capacity)
        if self.limiter is not None:
            self.limiter.total_tokens = self.size

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in a thread, once one of ``size`` is free; only :meth:`abandon_on_stop` stops the wait."""
        assert self.limiter is not None and self._unbounded is not None, "the worker is not running"
        async with self.limiter:  # waiting for a free thread ends with the lease's own stop
            with anyio.CancelScope(shield=True) as wait:  # the handler's outcome is still wanted
                self._waits.add(wait)
                try:
                    return await anyio.to_thread.run_sync(fn, *args, limiter=self._unbounded,
                                                          abandon_on_cancel=True)
                finally:
                    self._waits.discard(wait)
        await _stopping()

    async def abandon_on_stop(self) -> None:
        """A task of the worker's task group: once that is cancelled (a hard stop), abandon every thread."""
        try:
            await anyio.sleep_forever()
        finally:
            if self._waits:
                self.stats.abandoned_threads += len(self._waits)
                log.warning("stopping now: %d def handler thread(s) still running are abandoned; each runs on "
                            "until its handler returns", len(self._waits))
                for wait in self._waits:
                    wait.cancel()


def _threads_for(capacity: int) -> int:
    """One thread per task the worker runs at once; one even at capacity 0, for the leases it still runs."""
    return max(1, capacity)


async def _stopping() -> NoReturn:
    """Raise the worker's own cancellation: only a hard stop cancels a thread's wait."""
    await anyio.sleep_forever()
    raise AssertionError("unreachable")
