"""Coalescing of session requests (``worker.hello``, ``worker.capacity``) into shared transactions.

A reconnect storm brings thousands of hellos, each followed by its
capacity frame. One transaction each costs a thread hand-off and a COMMIT
apiece; since registration takes no cluster-wide row (the epoch is the
insert's AUTO_INCREMENT), the requests of many connections can share
both. A free lane takes whatever requests are queued (one when the
service is quiet, so a lone hello costs what it did; up to ``MAX_BATCH``
in a storm) and runs them with ``Store.run_batch``: one transaction,
each request still its own transition with its own answer, a refused one
writing nothing. Registrations go first in a batch, so its locks follow
the store's order (node, then session); they re-check their tokens with
one read for the batch (``LiveTokens``), not one each.

The caller waits for its own answer, as it did for its own transaction:
a connection reads no further frame until its hello or capacity frame is
answered, so one session's requests never share a batch. A request whose
caller was cancelled before its batch started is dropped.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import trio

from pulse_trio.store.instance.instances import register, set_capacity
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.token.tokens import LiveTokens

log = logging.getLogger("pulse_trio.registrations")

MAX_BATCH = 64
LANES = 2  # one batch's COMMIT overlaps the next one's Python
#: Functions that may share a batch, in the order a batch runs them (the store's lock order).
_ORDER: dict[Callable[..., Any], int] = {register: 0, set_capacity: 1}

_QUEUED, _RUNNING, _DONE = range(3)


@dataclasses.dataclass(eq=False, slots=True)
class _Request:
    fn: Callable[..., Any]
    kwargs: dict[str, Any]
    done: trio.Event = dataclasses.field(default_factory=trio.Event)
    stage: int = _QUEUED
    outcome: Any = None


class SessionRequests:
    """Registrations and capacity declarations of every connection, run in shared transactions."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._queue: collections.deque[_Request] = collections.deque()
        self._idle_lanes = trio.lowlevel.ParkingLot()
        self.batches = 0
        self.requests = 0

    async def call(self, fn: Callable[..., Any], /, **kwargs: Any) -> Any:
        """Run ``fn`` (``register`` or ``set_capacity``) in the next batch; its result, or its exception."""
        if fn not in _ORDER:
            raise ValueError(f"{getattr(fn, '__name__', fn)!r} does not share session-request batches")
        request = _Request(fn, kwargs)
        self._queue.append(request)
        self._idle_lanes.unpark()
        try:
            await request.done.wait()
        except BaseException:
            if request.stage == _QUEUED:  # not started: it never runs
                self._queue.remove(request)
            raise
        if isinstance(request.outcome, BaseException):
            raise request.outcome
        return request.outcome

    def statistics(self) -> dict[str, float]:
        return {"batches": self.batches, "requests": self.requests, "queued": len(self._queue)}

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(LANES):
                nursery.start_soon(self._lane)

    async def _lane(self) -> None:
        while True:
            if not self._queue:
                await self._idle_lanes.park()
                continue
            batch = [self._queue.popleft() for _ in range(min(MAX_BATCH, len(self._queue)))]
            batch.sort(key=lambda r: _ORDER[r.fn])
            for request in batch:
                request.stage = _RUNNING
            outcomes: list[Any] = []
            try:
                outcomes = await self.store.run_batch(_calls(batch))
            except Exception as exc:  # the store gave up: every caller answers internal
                log.warning("session request batch of %d failed: %r", len(batch), exc)
                outcomes = [exc] * len(batch)
            finally:
                self.batches += 1
                self.requests += len(batch)
                if len(outcomes) != len(batch):  # the lane itself is being cancelled: nobody waits forever
                    outcomes = [RuntimeError("the service is stopping")] * len(batch)
                for request, outcome in zip(batch, outcomes, strict=True):
                    request.outcome, request.stage = outcome, _DONE
                    request.done.set()


def _calls(batch: list[_Request]) -> list[tuple[Callable[..., Any], dict[str, Any]]]:
    """The batch's calls, its registrations sharing one read of their tokens."""
    hellos = [r.kwargs["instance"] for r in batch if r.fn is register]
    if len(hellos) < 2:
        return [(r.fn, r.kwargs) for r in batch]
    tokens = LiveTokens(h.token_id for h in hellos if h.token_id is not None)
    return [(r.fn, {**r.kwargs, "tokens": tokens} if r.fn is register else r.kwargs) for r in batch]
