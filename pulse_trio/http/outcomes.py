"""Long-polls for a task's outcome: many waiters, one shared probe per serve process.

``GET /v1/tasks/{task_id}/outcome?wait=S`` holds its request until the task
is terminal or ``S`` seconds pass. A waiter never reads the database while
it waits: it parks on an event here, shared by every waiter of the same
task. Two things set the events:

* **this process ended an attempt** (a worker's finish, a lease timer, a
  cancel through this API): :meth:`OutcomeWatch.hint` asks for a probe of
  that task now;
* **another process did**: every ``interval`` seconds while anyone waits,
  a probe asks about every awaited task, so a finish committed by any
  serve process of the same database is seen within that interval.

A probe is one statement for all the tasks it asks about (primary-key
look-ups, :func:`~pulse_trio.store.views.queries.ended_tasks`): a thousand
idle waiters cost one query per interval, not a thousand, and no waiter
costs anything while nobody waits. A hinted probe asks only about the
hinted tasks: were it to ask about every awaited one, each end committed
here would read a row per waiter, and a busy process with many waiters
would read waiters times ends. A hint is only a hint: the probe reads the
database, so a finish that scheduled a retry wakes no one.

Waits are bounded (:func:`~pulse_trio.http.connections.wait_limit`):
each holds a connection, and were they unbounded they would hold every
connection the API may, leaving none for a submit or a health check.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import trio

from pulse_trio.http.connections import wait_limit
from pulse_trio.http.errors import too_many_waits
from pulse_trio.store.views.queries import ended_tasks
from pulse_trio.store.engine.trio_bridge import Store

log = logging.getLogger("pulse_trio.http")

#: Between two probes while anyone waits: how late a finish on another serve process can be seen.
PROBE_INTERVAL_S = 0.5


class _Awaited:
    """The waiters of one task: their shared event and how many they are."""

    __slots__ = ("count", "ended")

    def __init__(self) -> None:
        self.ended = trio.Event()
        self.count = 0


class OutcomeWatch:
    """The awaited tasks of one serve process, and the loop that probes them."""

    def __init__(self, store: Store, *, interval: float = PROBE_INTERVAL_S) -> None:
        self.store = store
        self.interval = interval
        self._waits = trio.CapacityLimiter(wait_limit())
        self._awaited: dict[str, _Awaited] = {}
        self._hinted = trio.Event()
        #: The awaited tasks hinted since the last probe: the next probe asks about them alone.
        self._hinted_ids: set[str] = set()
        self._closed = False
        #: Probes run so far (what the bench reads: it must not grow with the number of waiters).
        self.probes = 0
        #: Task ids those probes asked about, in all: a hint must add its own task, not every awaited one.
        self.probed_ids = 0

    @property
    def waiting(self) -> int:
        """How many requests wait now."""
        return sum(a.count for a in self._awaited.values())

    @contextlib.contextmanager
    def watching(self, task_id: str) -> Iterator[trio.Event]:
        """Register a waiter for ``task_id`` (before its first read, so no end is missed); yields its event."""
        awaited = self._awaited.get(task_id)
        if awaited is None:
            awaited = self._awaited[task_id] = _Awaited()
            if self._closed:
                awaited.ended.set()
        awaited.count += 1
        try:
            yield awaited.ended
        finally:
            awaited.count -= 1
            if awaited.count == 0 and self._awaited.get(task_id) is awaited:
                del self._awaited[task_id]

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """One of the waits this process may hold (:func:`~pulse_trio.http.connections.wait_limit`), for as
        long as the request waits; 503 ``too_many_waits`` when all are held.

        Taken once the request knows it will wait, not when it registers: a
        burst of requests for ended tasks holds none, and refuses no one.
        """
        try:
            self._waits.acquire_nowait()
        except trio.WouldBlock:
            raise too_many_waits() from None
        try:
            yield
        finally:
            self._waits.release()

    def hint(self, task_id: str) -> None:
        """This process ended an attempt of ``task_id``: probe it now if anyone awaits it."""
        if task_id in self._awaited:
            self._hinted_ids.add(task_id)
            self._hinted.set()

    def close(self) -> None:
        """The process is stopping: release every waiter (each answers what the task is now)."""
        self._closed = True
        for awaited in self._awaited.values():
            awaited.ended.set()

    async def run(self) -> None:
        """Probe the hinted tasks on a hint, and every awaited one every ``interval`` while anyone waits; forever."""
        every_due = trio.current_time() + self.interval
        while True:
            with trio.move_on_at(every_due):
                await self._hinted.wait()
            self._hinted = trio.Event()
            hinted, self._hinted_ids = self._hinted_ids, set()
            if trio.current_time() >= every_due:  # the periodic probe: ends committed by other processes
                every_due = trio.current_time() + self.interval
                hinted = set(self._awaited)
            pending = [task_id for task_id in hinted
                       if (a := self._awaited.get(task_id)) is not None and not a.ended.is_set()]
            if not pending:
                continue
            self.probes += 1
            self.probed_ids += len(pending)
            try:
                ended = await self.store.run(ended_tasks, task_ids=pending)
            except Exception as exc:  # the database is away: the waiters time out, the next probe tries again
                log.warning("outcome probe failed: %s", exc)
                continue
            for task_id in ended:
                awaited = self._awaited.get(task_id)
                if awaited is not None:
                    awaited.ended.set()
