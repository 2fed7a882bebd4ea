"""Memory a serve group's processes all map: one fixed-size slot per member, in an anonymous file.

The parent creates the file (not inheritable: a member gets its descriptor
through ``pass_fds``), and each process maps it; a member writes only its
own slot. The connection shares (:mod:`~pulse_trio.group.shares`) and the
heartbeats (:mod:`~pulse_trio.group.heartbeats`) are two such files.
"""

from __future__ import annotations

import mmap
import os
import struct


def create_slots(name: str, size: int, slot: struct.Struct) -> int:
    """A new anonymous shared memory file of ``size`` zeroed slots of ``slot``; its descriptor."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.ftruncate(fd, size * slot.size)
    return fd


def map_slots(fd: int, size: int, slot: struct.Struct) -> mmap.mmap:
    """This process's mapping of a file :func:`create_slots` made."""
    return mmap.mmap(fd, size * slot.size)
