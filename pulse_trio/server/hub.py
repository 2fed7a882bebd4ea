"""The live sessions of this instance, as the dispatcher sees them.

A session registers here once welcomed; its :class:`SessionService`
keeps its own numbers (capacity, drain, active leases) current. The
dispatcher reads them to decide who gets work and hands committed offers
back to the session (``offers_committed``); it never touches a socket.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from pulse_trio.server.session_service import SessionService


class Wake(enum.Enum):
    """Why the dispatcher runs a pass."""

    NEWS = "news"  # new work or new capacity
    FREED = "freed"  # only leases that ended
    TIMEOUT = "timeout"  # the poll: work other processes submitted, if any


class SessionHub:
    """Registry of live sessions plus the dispatcher's wake-up signal."""

    def __init__(self) -> None:
        self._sessions: dict[str, SessionService] = {}
        self._queues: list[str] | None = None  # every subscribed queue, rebuilt after add/remove
        self._wake = trio.Event()
        self._news = False  # new work or capacity since the last pass, not only freed slots
        self._ended_listeners: list[Callable[[str], None]] = []
        #: The queues paused cluster-wide (chart ``queue``), as ``queue_sync`` last read them; claims
        #: skip them. None until first read: a claim then reads them in its own transaction.
        self.paused: frozenset[str] | None = None

    def add(self, session: SessionService) -> None:
        self._sessions[session.session_id] = session
        self._queues = None

    def remove(self, session_id: str) -> None:
        if self._sessions.pop(session_id, None) is not None:
            self._queues = None

    def subscribed_queues(self) -> list[str]:
        """Every queue some live session subscribes to and nobody paused, sorted (cached between changes)."""
        if self._queues is None:
            paused = self.paused or frozenset()
            self._queues = sorted({q for s in self._sessions.values() for q in s.queues if q not in paused})
        return self._queues

    def set_paused(self, paused: frozenset[str]) -> None:
        """The paused queues as just read; a queue resumed since the last read wakes the dispatcher."""
        if paused == self.paused:
            return
        resumed = self.paused is not None and bool(self.paused - paused)
        self.paused = paused
        self._queues = None
        if resumed:
            self.wake()

    def get(self, session_id: str) -> SessionService | None:
        return self._sessions.get(session_id)

    def __iter__(self) -> Iterator[SessionService]:
        return iter(list(self._sessions.values()))

    def __len__(self) -> int:
        return len(self._sessions)

    def wake(self) -> None:
        """Ask the dispatcher for a pass now: there is new work or new capacity."""
        self._news = True
        self._wake.set()

    def slot_freed(self) -> None:
        """Ask for a pass because a lease ended (it tops up sessions past their refill mark)."""
        self._wake.set()

    async def wait_woken(self, timeout: float) -> Wake:
        """Wait for a wake-up or ``timeout``: what the dispatcher was woken for."""
        with trio.move_on_after(timeout):
            await self._wake.wait()
        woken = self._wake.is_set()
        self._wake = trio.Event()
        news, self._news = self._news, False
        return Wake.NEWS if news else Wake.FREED if woken else Wake.TIMEOUT

    def on_task_ended(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(task_id)`` whenever this process commits the end of a task's attempt."""
        self._ended_listeners.append(listener)

    def task_ended(self, task_id: str) -> None:
        """A finish (or a timer) ended an attempt here; the task may be terminal: tell whoever awaits it."""
        for listener in self._ended_listeners:
            listener(task_id)

    def statistics(self) -> dict[str, int]:
        sessions = list(self._sessions.values())
        return {
            "sessions": len(sessions),
            "capacity": sum(s.capacity for s in sessions),
            "active_leases": sum(s.active_leases for s in sessions),
            "free_slots": sum(s.free_slots for s in sessions),
        }
