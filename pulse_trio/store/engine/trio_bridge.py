"""The Trio face of the store: ``await store.run(fn, **kwargs)``.

The one module of the store that imports Trio: every transaction function
and the blocking core (:class:`~pulse_trio.store.engine.facade.SyncStore`) stay
free of an event loop, so a producer or the CLI importing the store pays
for no Trio. ``run`` sends one transaction function to a worker thread
through ``trio.to_thread.run_sync`` with a CapacityLimiter sized to the
pool. Trio cancellation waits for the thread (``abandon_on_cancel=False``),
so a COMMIT is never abandoned half-way; a stop that cannot wait for a
database that hangs cuts the threads' work short instead
(:meth:`SyncStore.interrupt`), and records its node with :meth:`Store.run_once`.

``on_transaction`` (optional) is told how long each awaited transaction
took, waiting for a thread included: the service's metrics read it, and
the store knows nothing of them.

``activity`` (:class:`ThreadActivity`) counts the worker threads busy with
this process's work, and since when none has been: background work that
should keep out of dispatch's way (the retention purge) runs with
:meth:`Store.run_aside`, which is not counted, and waits for a gap.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import trio

from pulse_trio.store.engine.facade import SyncStore

T = TypeVar("T")


class ThreadActivity:
    """How many of this process's worker threads are busy with its foreground work, and since when none is.

    Counted on the Trio thread (:meth:`counted`); read from anywhere, so
    background work running in a thread of its own can see whether
    dispatch is at work right now (:meth:`quiet_for`) and keep its
    statements out of the way. A read from another thread may be a moment
    stale, which costs nothing: it only decides when to go on.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.running = 0
        self.quiet_since = clock()
        self._quiet = trio.Event()  # set (and replaced) whenever the count falls to zero
        self._idle = threading.Event()  # the same for other threads: set while the count is zero
        self._idle.set()

    @contextlib.contextmanager
    def counted(self) -> Iterator[None]:
        """Count one piece of foreground work while the block runs (on the Trio thread)."""
        if not self.running:
            self._idle.clear()
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1
            if not self.running:
                self.quiet_since = self.clock()
                self._idle.set()
                self._quiet.set()
                self._quiet = trio.Event()

    def quiet_for(self, seconds: float) -> bool:
        """No foreground work has run for ``seconds`` (callable from any thread)."""
        return not self.running and self.clock() - self.quiet_since >= seconds

    def wait_quiet(self, quiet: float, limit: float) -> float:
        """In a worker thread: block until :meth:`quiet_for` ``quiet``, at most ``limit`` seconds; seconds waited."""
        if self.quiet_for(quiet):
            return 0.0
        started = now = self.clock()
        while now - started < limit and not self.quiet_for(quiet):
            left = limit - (now - started)
            if self.running:
                self._idle.wait(left)
            else:
                time.sleep(max(0.0, min(left, self.quiet_since + quiet - now)))
            now = self.clock()
        return now - started

    async def gap(self, quiet: float, limit: float) -> bool:
        """Wait until no foreground work has run for ``quiet`` seconds, at most ``limit`` seconds: whether it came."""
        with trio.move_on_after(limit):
            while True:
                if self.running:
                    await self._quiet.wait()
                    continue
                left = self.quiet_since + quiet - self.clock()
                if left <= 0:
                    return True
                await trio.sleep(left)
        return False


class Store(SyncStore):
    """:class:`SyncStore` plus worker threads under one limiter, for a Trio program."""

    def __init__(self, *args: Any, on_transaction: Callable[[float], None] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limiter = trio.CapacityLimiter(self.pool.size)
        #: Called with the seconds each awaited transaction took (None: nobody asks).
        self.on_transaction = on_transaction
        #: The worker threads busy with foreground work (every :meth:`run`, not :meth:`run_aside`).
        self.activity = ThreadActivity()

    async def run(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        """Run ``fn`` as one transaction in a worker thread; cancellation waits for it."""
        return await self._in_thread(functools.partial(self.run_sync, fn, **kwargs))

    async def run_once(self, fn: Callable[..., T], /, *, timeout_s: float, **kwargs: Any) -> T:
        """:meth:`SyncStore.run_once_sync`, given up after ``timeout_s`` (TooSlowError) whatever the database does.

        For a stop's last record (its node's STOPPED): outside the limiter,
        whose threads a database that hangs may all hold, and abandoned at
        the deadline, its outcome unknown; its thread ends by its own bounds.
        """
        work = functools.partial(self.run_once_sync, fn, timeout_s=timeout_s, **kwargs)
        with trio.fail_after(timeout_s):
            return await trio.to_thread.run_sync(work, abandon_on_cancel=True)

    async def run_aside(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        """:meth:`run` for background work that yields to the rest: not counted in :attr:`activity`."""
        return await self._in_thread(functools.partial(self.run_sync, fn, **kwargs), counted=False)

    async def in_thread(self, work: Callable[[], T]) -> T:
        """Any blocking call in one of the store's threads, counted as foreground work (the HTTP API's)."""
        with self.activity.counted():
            return await trio.to_thread.run_sync(work, limiter=self.limiter)

    async def run_batch(self, calls: Sequence[tuple[Callable[..., Any], dict[str, Any]]],
                        then: Callable[[Any, list[Any]], Any] | None = None,
                        first: Callable[[Any], None] | None = None) -> list[Any]:
        """:meth:`SyncStore.run_batch_sync` in a worker thread: several entry functions, one COMMIT."""
        return await self._in_thread(functools.partial(self.run_batch_sync, calls, then, first))

    async def _in_thread(self, work: Callable[[], T], *, counted: bool = True) -> T:
        observe = self.on_transaction
        with self.activity.counted() if counted else contextlib.nullcontext():
            if observe is None:
                return await trio.to_thread.run_sync(work, limiter=self.limiter)
            started = time.perf_counter()
            try:
                return await trio.to_thread.run_sync(work, limiter=self.limiter)
            finally:
                observe(time.perf_counter() - started)

    def threads_busy(self) -> int:
        return int(self.limiter.borrowed_tokens)
