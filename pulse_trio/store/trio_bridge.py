"""The Trio face of the store: ``await store.run(fn, **kwargs)``.

The one module of the store that imports Trio: every transaction function
and the blocking core (:class:`~pulse_trio.store.facade.SyncStore`) stay
free of an event loop, so a producer or the CLI importing the store pays
for no Trio. ``run`` sends one transaction function to a worker thread
through ``trio.to_thread.run_sync`` with a CapacityLimiter sized to the
pool. Trio cancellation waits for the thread (``abandon_on_cancel=False``),
so a COMMIT is never abandoned half-way.

``on_transaction`` (optional) is told how long each awaited transaction
took, waiting for a thread included: the service's metrics read it, and
the store knows nothing of them.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import trio

from pulse_trio.store.facade import SyncStore

T = TypeVar("T")


class Store(SyncStore):
    """:class:`SyncStore` plus worker threads under one limiter, for a Trio program."""

    def __init__(self, *args: Any, on_transaction: Callable[[float], None] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limiter = trio.CapacityLimiter(self.pool.size)
        #: Called with the seconds each awaited transaction took (None: nobody asks).
        self.on_transaction = on_transaction

    async def run(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        """Run ``fn`` as one transaction in a worker thread; cancellation waits for it."""
        return await self._in_thread(functools.partial(self.run_sync, fn, **kwargs))

    async def run_batch(self, calls: Sequence[tuple[Callable[..., Any], dict[str, Any]]],
                        then: Callable[[Any, list[Any]], Any] | None = None,
                        first: Callable[[Any], None] | None = None) -> list[Any]:
        """:meth:`SyncStore.run_batch_sync` in a worker thread: several entry functions, one COMMIT."""
        return await self._in_thread(functools.partial(self.run_batch_sync, calls, then, first))

    async def _in_thread(self, work: Callable[[], T]) -> T:
        observe = self.on_transaction
        if observe is None:
            return await trio.to_thread.run_sync(work, limiter=self.limiter)
        started = time.perf_counter()
        try:
            return await trio.to_thread.run_sync(work, limiter=self.limiter)
        finally:
            observe(time.perf_counter() - started)

    def threads_busy(self) -> int:
        return int(self.limiter.borrowed_tokens)
