"""Keepalive for the whole worker endpoint: one task pings every connection, a slot at a time.

The connections themselves (``wire.py``) write the ping and count the
unanswered ones; this module only decides whose turn it is, so it knows a
connection by the two things it uses of it (:class:`Pinged`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import trio

if TYPE_CHECKING:
    from pulse_trio.server.live_settings import LiveSettings

#: Each interval is cut into this many slots; a connection is pinged in its own.
KEEPALIVE_SLOTS = 20


class Pinged(Protocol):
    """A connection as the keepalive sees it."""

    keepalive_slot: int

    def keepalive(self, now: float, interval: float) -> None:
        """Ping now, or close if three pings went unanswered."""


class Keepalive:
    """Pings every connection once per interval, a slot at a time; closes those that left a ping unanswered for three.

    A connection keeps its slot for its whole life, so it is visited every
    interval exactly and the three intervals are counted as the contract
    states them, whatever comes and goes around it.
    """

    def __init__(self, settings: LiveSettings) -> None:
        self._settings = settings
        self._slots: list[set[Pinged]] = [set() for _ in range(KEEPALIVE_SLOTS)]
        self._next_slot = 0

    def add(self, connection: Pinged) -> None:
        slot = self._next_slot
        self._next_slot = (slot + 1) % KEEPALIVE_SLOTS
        connection.keepalive_slot = slot
        self._slots[slot].add(connection)

    def discard(self, connection: Pinged) -> None:
        self._slots[connection.keepalive_slot].discard(connection)

    async def run(self) -> None:
        slot = 0
        due = trio.current_time()
        while True:
            interval = self._settings.current.ping_interval
            due = max(due + interval / KEEPALIVE_SLOTS, trio.current_time())
            await trio.sleep_until(due)
            now = trio.current_time()
            for connection in list(self._slots[slot]):
                connection.keepalive(now, interval)
            slot = (slot + 1) % KEEPALIVE_SLOTS


__all__ = ["KEEPALIVE_SLOTS", "Keepalive", "Pinged"]
