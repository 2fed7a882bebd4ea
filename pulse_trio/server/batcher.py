"""Coalescing of lease commands into shared transactions.

Every task costs a start and a finish; one transaction each would cap the
service at what PyMySQL and one COMMIT per command allow (about 190 tasks/s
on the reference machine). The batcher lets commands from every connection
share statements and one COMMIT: each *lane* takes whatever commands are
queued when it becomes free — one command when the service is idle, so
idle latency is one transaction, and up to ``MAX_BATCH`` under load. The
service runs one lane (``service.COMMAND_LANES``): the pool threads share
one GIL, so a second lane splits the batches without adding CPU.

Each batch holds at most one command per lease, so the batched transaction
functions never see two commands racing for the same row; a repeat waits
for the next batch. Results come back to each caller in its own order.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import trio

from pulse_trio.server.clock import ServiceClock
from pulse_trio.store import Store
from pulse_trio.store.leases import LeaseCommand, finish, renew, start
from pulse_trio.store.task_steps import FinishReport

log = logging.getLogger("pulse_trio.batcher")

MAX_BATCH = 128
QUEUE_SIZE = 4096
_FUNCTIONS = {"start": start, "renew": renew, "finish": finish}
_ORDER = ("start", "renew", "finish")


@dataclasses.dataclass(eq=False, slots=True)
class _Pending:
    kind: str
    command: LeaseCommand
    report: FinishReport | None
    done: trio.Event = dataclasses.field(default_factory=trio.Event)
    result: Any = None


class CommandFailed(RuntimeError):
    """The shared transaction failed for this command (the caller answers ``internal``)."""


class LeaseCommandBatcher:
    def __init__(self, store: Store, clock: ServiceClock, *, lanes: int) -> None:
        self.store = store
        self.clock = clock
        self.lanes = max(1, lanes)
        self._send, self._receive = trio.open_memory_channel[_Pending](QUEUE_SIZE)
        self.batches = 0
        self.commands = 0

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(self.lanes):
                nursery.start_soon(self._lane)

    async def submit(self, kind: str, command: LeaseCommand, report: FinishReport | None = None) -> Any:
        """Queue one command and wait for its result (a CommandResult or a Refusal).

        Cancellation after queueing still lets the command run: its outcome
        is in the database and a replay finds the receipt.
        """
        pending = _Pending(kind, command, report)
        await self._send.send(pending)
        with trio.CancelScope(shield=True):
            await pending.done.wait()
        if isinstance(pending.result, BaseException):
            raise CommandFailed(str(pending.result)) from pending.result
        return pending.result

    def statistics(self) -> dict[str, float]:
        return {"batches": self.batches, "commands": self.commands,
                "mean_batch": self.commands / self.batches if self.batches else 0.0}

    async def _lane(self) -> None:
        async for first in self._receive:
            waiting = [first]
            while len(waiting) < MAX_BATCH:
                try:
                    waiting.append(self._receive.receive_nowait())
                except trio.WouldBlock:
                    break
            while waiting:
                batch, waiting = _one_per_lease(waiting)
                await self._run(batch)

    async def _run(self, batch: Sequence[_Pending]) -> None:
        groups = {kind: [p for p in batch if p.kind == kind] for kind in _ORDER}
        groups = {kind: items for kind, items in groups.items() if items}
        now = self.clock.now()
        calls = []
        for kind, items in groups.items():
            if kind == "finish":
                kwargs = {"commands": [(p.command, p.report) for p in items], "now": now}
            else:
                kwargs = {"commands": [p.command for p in items], "now": now}
            calls.append((_FUNCTIONS[kind], kwargs))
        try:
            outcomes = await self.store.run_batch(calls)
        except Exception as exc:  # the store gave up: every caller answers internal
            log.warning("lease command batch of %d failed: %r", len(batch), exc)
            outcomes = [exc] * len(calls)
        self.batches += 1
        self.commands += len(batch)
        for (kind, items), outcome in zip(groups.items(), outcomes, strict=True):
            for i, pending in enumerate(items):
                pending.result = outcome if isinstance(outcome, BaseException) else outcome[i]
                pending.done.set()


def _one_per_lease(items: Sequence[_Pending]) -> tuple[list[_Pending], list[_Pending]]:
    """Split into (a batch with each lease once, the rest) keeping arrival order."""
    seen: set[str] = set()
    batch, rest = [], []
    for item in items:
        if item.command.lease_id in seen:
            rest.append(item)
        else:
            seen.add(item.command.lease_id)
            batch.append(item)
    return batch, rest
