"""The live sessions of this instance, as the dispatcher sees them.

A session registers here once welcomed; its :class:`~pulse_trio.server.live_session.LiveSession`
keeps its own numbers (capacity, drain, active leases) current and tells
the hub whenever they change (:meth:`SessionHub.refresh`). The hub keeps,
beside every session, the *hungry* ones: those with a free slot, per
queue they subscribe to, and those past their refill mark. A dispatch
pass visits only those, so its cost follows the sessions that can take
work, not the sessions connected. The dispatcher posts committed offers
to the session's inbox (``session_inbox.py``), as a batch's ride-along
claims do; it never touches a session's state or socket.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterator
from typing import Generic, Protocol, TypeVar

import trio


class HubMember(Protocol):
    """What the hub reads of a session to file it (``LiveSession`` is one; the hub never imports it)."""

    @property
    def session_id(self) -> str: ...
    @property
    def instance_id(self) -> str | None: ...
    @property
    def cancellation_notifications(self) -> bool: ...
    @property
    def queues(self) -> Collection[str]: ...
    @property
    def capacity(self) -> int: ...
    @property
    def active_leases(self) -> int: ...
    @property
    def free_slots(self) -> int: ...
    @property
    def refill_at(self) -> int: ...


S = TypeVar("S", bound=HubMember)


class Wake(enum.Enum):
    """Why the dispatcher runs a pass."""

    NEWS = "news"  # new work or new capacity
    FREED = "freed"  # only leases that ended
    TIMEOUT = "timeout"  # the poll: work other processes submitted, if any


class SessionHub(Generic[S]):
    """Registry of live sessions, the hungry ones among them, and the dispatcher's wake-up signal."""

    def __init__(self, tell_others: Callable[[], None] | None = None) -> None:
        """``tell_others``: in a serve group, tells the other members of new work (``pulse_trio.group.wake``)."""
        self._tell_others = tell_others
        self._sessions: dict[str, S] = {}
        self._by_instance: dict[str, S] = {}
        #: Sessions with at least one free slot, in the order they became hungry (dicts as ordered sets).
        self._free: dict[str, S] = {}
        #: The same, per subscribed queue; a queue without hungry sessions has no entry.
        self._free_by_queue: dict[str, dict[str, S]] = {}
        #: Sessions with at least their refill mark of free slots (a subset of ``_free``).
        self._ripe: dict[str, S] = {}
        #: Sessions holding a lease: the ones whose count the timers reconcile.
        self._busy: dict[str, S] = {}
        self._opted_in = 0  # sessions that declared cancellation_notifications
        self._wake = trio.Event()
        self._news = False  # new work or capacity since the last pass, not only freed slots
        self._ended_listeners: list[Callable[[str], None]] = []
        #: The queues paused cluster-wide (chart ``queue``), as ``queue_sync`` last read them; claims
        #: skip them. None until first read: a claim then reads them in its own transaction.
        self.paused: frozenset[str] | None = None

    def add(self, session: S) -> None:
        if session.session_id not in self._sessions:
            self._opted_in += bool(session.cancellation_notifications)
        self._sessions[session.session_id] = session
        if session.instance_id is not None:
            self._by_instance[session.instance_id] = session
        self.refresh(session)

    def remove(self, session_id: str) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            if self._by_instance.get(session.instance_id) is session:
                del self._by_instance[session.instance_id]
            self._opted_in -= bool(session.cancellation_notifications)
            self._busy.pop(session_id, None)
            self._forget(session)

    def refresh(self, session: S) -> None:
        """Re-file ``session`` as hungry or not after its numbers changed: O(its queues)."""
        sid = session.session_id
        if self._sessions.get(sid) is not session:
            return
        if session.active_leases > 0:
            self._busy[sid] = session
        else:
            self._busy.pop(sid, None)
        free = session.free_slots
        if free < 1:
            self._forget(session)
            return
        if sid not in self._free:
            self._free[sid] = session
            for queue in session.queues:
                self._free_by_queue.setdefault(queue, {})[sid] = session
        if free >= session.refill_at:
            self._ripe[sid] = session
        else:
            self._ripe.pop(sid, None)

    def _forget(self, session: S) -> None:
        sid = session.session_id
        self._ripe.pop(sid, None)
        if self._free.pop(sid, None) is None:
            return
        for queue in session.queues:
            hungry = self._free_by_queue.get(queue)
            if hungry is not None:
                hungry.pop(sid, None)
                if not hungry:
                    del self._free_by_queue[queue]

    # -- what the dispatcher asks ---------------------------------------------
    def has_hungry(self, *, ripe_only: bool = False) -> bool:
        return bool(self._ripe if ripe_only else self._free)

    def hungry(self, *, ripe_only: bool = False, queues: Collection[str] | None = None) -> list[S]:
        """Sessions with a free slot (past their refill mark if ``ripe_only``), on ``queues`` if given.

        The cost is the number of sessions returned (and, with ``queues``,
        the queues named), never the number of sessions connected.
        """
        if queues is None:
            return list((self._ripe if ripe_only else self._free).values())
        picked: dict[str, S] = {}
        for queue in queues:
            picked.update(self._free_by_queue.get(queue, {}))
        if ripe_only:
            return [s for sid, s in picked.items() if sid in self._ripe]
        return list(picked.values())

    def hungry_count(self, *, ripe_only: bool = False) -> int:
        return len(self._ripe if ripe_only else self._free)

    def busy(self) -> list[S]:
        """Sessions that hold at least one lease, as far as their counts know."""
        return list(self._busy.values())

    def hungry_queues(self) -> list[str]:
        """The queues some hungry session subscribes to and nobody paused, sorted: what a dispatch probe asks about."""
        paused = self.paused or frozenset()
        return sorted(q for q in self._free_by_queue if q not in paused)

    def set_paused(self, paused: frozenset[str]) -> None:
        """The paused queues as just read; a queue resumed since the last read wakes the dispatcher."""
        if paused == self.paused:
            return
        resumed = self.paused is not None and bool(self.paused - paused)
        self.paused = paused
        if resumed:
            self.wake()

    @property
    def any_opted_in(self) -> bool:
        """Some live session here declared cancellation_notifications (the timers push cancels)."""
        return self._opted_in > 0

    def get(self, session_id: str) -> S | None:
        return self._sessions.get(session_id)

    def by_instance(self, instance_id: str) -> S | None:
        """The live session here of a worker instance, if it lives here."""
        return self._by_instance.get(instance_id)

    def __iter__(self) -> Iterator[S]:
        return iter(list(self._sessions.values()))

    def __len__(self) -> int:
        return len(self._sessions)

    def wake(self) -> None:
        """Ask the dispatcher for a pass now: there is new work or new capacity."""
        self._news = True
        self._wake.set()

    def announce(self) -> None:
        """Work others may take was committed here: a serve group's other members hear of it (nothing alone)."""
        if self._tell_others is not None:
            self._tell_others()

    def slot_freed(self) -> None:
        """Ask for a pass because a lease ended (it tops up sessions past their refill mark)."""
        self._wake.set()

    def wake_pending(self) -> bool:
        """A wake-up the dispatcher has not taken yet: a pass is due."""
        return self._wake.is_set()

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
            "hungry_sessions": len(self._free),
        }
