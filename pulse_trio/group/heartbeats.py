"""When each member of a serve group last showed life, in memory every member maps (under systemd's watchdog).

The first process talks to systemd for the group, so its own loop running
proves nothing about a member's: a member whose loop is held would leave
the group serving a share of the workers with nobody answering them. Each
member therefore writes the monotonic clock into its slot (one aligned
64-bit float) every :data:`BEATS_PER_INTERVAL`-th of the watchdog interval,
from a task of its own event loop, and the first process sends ``WATCHDOG=1``
only while every slot is younger than the interval. A held member misses the
group's watchdog, and systemd restarts the whole group, as it does when a
member exits (docs/operations.md §14). ``CLOCK_MONOTONIC`` is one clock for
every process of the host, so the readings compare.
"""

from __future__ import annotations

import struct
import time

import anyio

from pulse_trio.group.slots import create_slots, map_slots

#: How many beats a member writes per watchdog interval: one late beat is no miss.
BEATS_PER_INTERVAL = 4
_SLOT = struct.Struct("=d")


def create_heartbeats(size: int) -> int:
    """A new anonymous shared memory file with one zeroed slot (never beaten) per member; its descriptor."""
    return create_slots("pulse-trio-heartbeats", size, _SLOT)


class Heartbeats:
    """The group's slots: a member beats its own, the first process reads them all."""

    def __init__(self, fd: int, size: int) -> None:
        self._memory = map_slots(fd, size, _SLOT)
        self._size = size

    def beat(self, index: int) -> None:
        _SLOT.pack_into(self._memory, index * _SLOT.size, time.monotonic())

    async def beat_every(self, index: int, interval: float) -> None:
        """Beat member ``index``'s slot now and every ``interval / BEATS_PER_INTERVAL`` seconds until cancelled."""
        while True:
            self.beat(index)
            await anyio.sleep(interval / BEATS_PER_INTERVAL)

    def silent(self, within: float) -> list[int]:
        """The members that have not beaten within the last ``within`` seconds (or never)."""
        oldest = time.monotonic() - within
        beats = (_SLOT.unpack_from(self._memory, index * _SLOT.size)[0] for index in range(self._size))
        return [index for index, last in enumerate(beats) if not last or last < oldest]

    def close(self) -> None:
        self._memory.close()
