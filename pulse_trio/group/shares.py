"""How many worker connections each member of a serve group holds, in memory every member maps.

All members accept on the same inherited listening socket; the kernel hands
a new connection to whichever member is waiting first, which can put two
workers on one process while another holds none. So a member accepts only
while it holds no more connections than the least loaded member: the one
with the fewest always accepts, and a connection never waits for a member
to become eligible (nor long for one that holds the fewest but hangs: see
``pulse_trio.server.gated_accept``). Each member writes only its own slot
(one aligned 64-bit integer) and reads the others'; a read that races a
write only delays a member's turn by one connection, which the next accept
corrects.
"""

from __future__ import annotations

import struct

from pulse_trio.group.slots import create_slots, map_slots

_SLOT = struct.Struct("=q")


def create_shares(size: int) -> int:
    """A new anonymous shared memory file with one zeroed slot per member; its descriptor (not inheritable)."""
    return create_slots("pulse-trio-connection-shares", size, _SLOT)


class ConnectionShares:
    """Member ``index``'s view of the group's connection counts (an ``AcceptGate`` of the worker endpoint)."""

    def __init__(self, fd: int, size: int, index: int) -> None:
        if not 0 <= index < size:
            raise ValueError(f"member {index} of a group of {size}")
        self._memory = map_slots(fd, size, _SLOT)
        self._size, self._index = size, index
        self._own = index * _SLOT.size
        self._held = 0

    @property
    def held(self) -> int:
        """The connections this member holds."""
        return self._held

    def counts(self) -> list[int]:
        """Every member's count, by member index."""
        return [_SLOT.unpack_from(self._memory, i * _SLOT.size)[0] for i in range(self._size)]

    def may_accept(self) -> bool:
        """True while this member holds no more than the least loaded member."""
        return self._held <= min(self.counts())

    def opened(self) -> None:
        self._held += 1
        _SLOT.pack_into(self._memory, self._own, self._held)

    def closed(self) -> None:
        self._held -= 1
        _SLOT.pack_into(self._memory, self._own, self._held)

    def close(self) -> None:
        self._memory.close()
