"""What this process already knows about the leases it offered: the lean path's expectations.

A claim (``lease.assign``) writes each lease row from values it holds, and a
lease command accepted here moves it by a known step (revision + 1, a known
state). Remembering those values lets ``task.start``, ``task.renew`` and
``task.finish`` be written by one guarded UPDATE instead of a locking read,
a decision in Python and a write (docs/storage.md §11).

Nothing here is trusted for what may change under us. The book only says
what the row *should* be (state, revision, owner session); the guarded
statement makes the database check it, together with what only the
database knows (``expires_at`` against ``now``, a cancel intent). When the
statement does not match, the command takes the locking path, which gives
exactly the refusal it always gave. What the book is trusted for never
changes for a lease id: its task, its secret's digest, its attempt, its
ttl, its permit token, its epoch under one owner session, and the task's
queue and due time (metrics only).

An entry may be stale (a COMMIT that failed after the book was updated, a
lapse, a resume on another instance): the guard then does not match, and
the locking path answers. It is one process's memory, bounded; an entry
that is missing only costs the lean path.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pulse_trio.contract.frozen import frozen

if TYPE_CHECKING:
    from pulse_trio.store.engine.results import Offer

#: At most this many leases are remembered; the oldest entries go first.
LIMIT = 1 << 16


@frozen
class KnownLease:
    """One lease as this process last wrote it (see the module docstring for what is trusted)."""

    lease_id: str
    task_id: str
    secret_digest: bytes
    owner_session_id: str
    state: str  # what the row should be in: OFFERED or RUNNING
    revision: int  # what the row's revision should be
    attempt: int
    epoch: int
    ttl_ms: int
    concurrency_token: int | None
    queue: str
    waited_from: dt.datetime  # when the task became due (max of due_at and created_at)
    started_at: dt.datetime | None = None

    def moved(self, state: str, started_at: dt.datetime | None) -> KnownLease:
        """This lease one revision on, in ``state`` (a start or a renewal this process committed).

        Built positionally: ``dataclasses.replace`` reads every field by name and parses
        keywords, and each lean start and renewal makes one of these per lease.
        """
        return KnownLease(self.lease_id, self.task_id, self.secret_digest, self.owner_session_id, state,
                          self.revision + 1, self.attempt, self.epoch, self.ttl_ms, self.concurrency_token,
                          self.queue, self.waited_from, started_at)


class LeaseBook:
    """A bounded map lease_id -> :class:`KnownLease`, shared by the store's worker threads.

    Each entry is replaced whole (never mutated), so a reader sees one
    consistent entry; the lock only keeps eviction and insertion together.
    """

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._entries: dict[str, KnownLease] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, lease_id: str) -> KnownLease | None:
        return self._entries.get(lease_id)

    def put(self, entries: list[KnownLease]) -> None:
        with self._lock:
            book = self._entries
            for entry in entries:
                book.pop(entry.lease_id, None)  # re-inserted: it is the newest now
                book[entry.lease_id] = entry
            while len(book) > self.limit:
                del book[next(iter(book))]

    def forget(self, lease_ids: list[str]) -> None:
        with self._lock:
            for lease_id in lease_ids:
                self._entries.pop(lease_id, None)


#: The process's book: lease ids are unique, so every store of the process may share it.
BOOK = LeaseBook()


def offered(session_id: str, offers: Sequence[Offer], *, ttl_ms: Sequence[int], digests: Sequence[bytes]) -> None:
    """Remember the offers a claim is writing (OFFERED at revision 1, owned by ``session_id``)."""
    BOOK.put([KnownLease(o.lease.lease_id, o.task.task_id, digest, session_id, o.lease.state, o.lease.revision,
                         o.task.attempt, o.lease.epoch, ttl, o.task.concurrency_token, o.task.queue,
                         max(o.task.due_at, o.task.created_at))
              for o, ttl, digest in zip(offers, ttl_ms, digests, strict=True)])
