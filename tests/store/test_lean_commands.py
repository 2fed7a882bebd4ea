"""The lean start/renew/finish path (one guarded UPDATE) against the locking path, on the real database.

Whenever something committed between the offer and the command (a lapse,
a revoke, a cancel, a resume, time running out) or the command is not the
known owner's, the guard does not match and the answer must be exactly the
locking path's: the same refusal code and message, the same writes.
Each case records which leases went through the locking path, so it is
known that the lean path was tried and did not decide.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from pulse_trio.store import FinishReport, Refusal, finish, lapse, request_cancel, resume, start
from pulse_trio.store.lease import leases
from pulse_trio.store.lease.known import BOOK
from pulse_trio.store.engine.trio_bridge import Store
from sql_support import index_reads

ROUNDS = 10


@pytest.fixture
def locked(monkeypatch):
    """The lease ids each call of the locking path screened (the real function still runs)."""
    seen: list[str] = []
    real = leases._screen

    def screen(tx, trigger, commands, reports, now):
        seen.extend(c.lease_id for c in commands)
        return real(tx, trigger, commands, reports, now)

    monkeypatch.setattr(leases, "_screen", screen)
    return seen


def _refused_the_same(world, run) -> Refusal:
    known = BOOK.get(run.lease_id)
    assert known is not None, "the lease is one this process offered: the lean path is tried"
    (lean,) = world.run(run.fn, **run.kwargs)
    BOOK.forget([run.lease_id])
    (locking,) = world.run(run.fn, **run.kwargs)
    BOOK.put([known])
    assert isinstance(lean, Refusal) and lean == locking
    return lean


class _Call:
    def __init__(self, fn, lease_id, **kwargs):
        self.fn, self.lease_id, self.kwargs = fn, lease_id, kwargs


def _start(world, w, offer, revision=1) -> _Call:
    return _Call(start, offer.lease.lease_id, commands=[world.command(w, offer, revision)])


def _finish(world, w, offer, revision, status="SUCCEEDED") -> _Call:
    report = FinishReport(status, '{"ok":1}', None if status == "SUCCEEDED" else "boom")
    return _Call(finish, offer.lease.lease_id, commands=[world.command(w, offer, revision, report=report)])


def test_a_known_offer_starts_and_finishes_without_the_locking_path(world, locked):
    w = world.worker("q")
    offer = world.offer(w)
    world.advance(10)
    started = world.start(w, offer)
    assert started.lease.revision == 2 and started.lease.state == "RUNNING"
    assert started.lease.expires_at == world.now + dt.timedelta(seconds=30)
    (expires,) = world.sql("SELECT expires_at FROM leases WHERE lease_id = %s", (offer.lease.lease_id,))[0]
    assert expires == started.lease.expires_at.replace(tzinfo=None), "the ack says what the database computed"
    world.advance(10)
    renewed = world.renew(w, offer, 2)
    assert (renewed.lease.revision, renewed.lease.expires_at) == (3, world.now + dt.timedelta(seconds=30))
    assert world.sql("SELECT revision, command FROM renew_receipts") == [(2, "task.renew")]
    finished = world.finish(w, offer, 3)
    assert finished.receipt.command == "task.finish" and finished.lease is None
    assert locked == [], "every command was decided by the guarded statement"
    assert world.task(offer.task.task_id).task.state == "SUCCEEDED"
    assert world.sql("SELECT state, revision, start_revision FROM leases") == [("FINISHED", 4, 1)]
    assert world.renew(w, offer, 2).receipt.duplicate, "a replay finds the lean path's receipt"
    assert BOOK.get(offer.lease.lease_id) is None, "a finished lease is forgotten"


def test_a_lean_start_reads_one_primary_key_entry_per_lease_and_a_finish_per_lease_and_task(world, locked):
    """The guarded moves name their key's index: left to itself, MariaDB found the leases through
    ``leases_owner`` (whose entries end in the lease id), reading every lease twice and buffering
    the UPDATE because that index holds the state being moved."""
    w = world.worker("q", capacity=8)
    for _ in range(8):
        world.submit()
    offers = world.assign(w, 8)
    starts = [world.command(w, o, 1) for o in offers]
    known = [BOOK.get(o.lease.lease_id) for o in offers]
    (_, start_reads) = index_reads(world.db, lambda tx: start(tx, now=world.now, commands=starts))
    assert start_reads == 8, "one PRIMARY entry per lease (guarded UPDATE); the task rows are not read or written"
    BOOK.put(known)  # what the rolled-back start taught the book is undone with it
    world.run(start, commands=starts)
    report = FinishReport("SUCCEEDED", "{}", None)
    finishes = [world.command(w, o, 2, report=report) for o in offers]
    (_, finish_reads) = index_reads(world.db, lambda tx: finish(tx, now=world.now, commands=finishes))
    assert finish_reads == 8 + 8
    assert locked == [], "the lean path decided every command"


def test_a_lapse_committed_after_the_offer_gets_the_locking_paths_refusal(world, locked):
    w = world.worker("q")
    offer = world.offer(w)
    world.advance(30_000)
    assert _refused_the_same(world, _start(world, w, offer)).code == "lease_expired"  # by time alone
    world.run(lapse)
    assert _refused_the_same(world, _start(world, w, offer)).code == "lease_expired"  # and by state
    assert offer.lease.lease_id in locked
    assert world.sql("SELECT state, revision FROM leases") == [("LAPSED", 1)]


def test_a_revoke_committed_after_the_offer_gets_the_locking_paths_refusal(world, locked):
    w = world.worker("q")
    offer = world.offer(w)
    world.run(request_cancel, task_id=offer.task.task_id, reason="operator", requested_by="alice")
    assert _refused_the_same(world, _start(world, w, offer)).code == "task_cancelled"
    assert world.sql("SELECT state, revision FROM leases") == [("REVOKED", 1)]


def test_a_resume_elsewhere_and_another_session_get_the_locking_paths_refusal(world, locked):
    old = world.worker("q")
    offer = world.offer(old)
    new = world.worker("q")
    world.run(resume, request=world.resume_request(new, old, offer), start_timeout_ms=30_000)
    assert _refused_the_same(world, _start(world, old, offer)).code == "lease_not_owned"  # book: old owner, rev 1
    assert _refused_the_same(world, _start(world, new, offer)).code == "revision_conflict"  # new owner, stale rev


def test_a_stale_revision_and_an_expired_run_get_the_locking_paths_refusal(world, locked):
    w = world.worker("q")
    offer = world.running(w)
    assert world.renew(w, offer, 2).lease.revision == 3
    # The book lags behind the database (as after a COMMIT that failed once the book was written).
    BOOK.put([dataclasses.replace(BOOK.get(offer.lease.lease_id), revision=2)])
    refusal = _refused_the_same(world, _finish(world, w, offer, 2))
    assert refusal.code == "revision_conflict"
    world.advance(31_000)
    assert _refused_the_same(world, _finish(world, w, offer, 3)).code == "lease_expired"
    assert world.sql("SELECT state, revision FROM leases") == [("RUNNING", 3)]


def test_a_cancel_committed_after_the_start_is_resolved_by_the_locking_path(world, locked):
    w = world.worker("q")
    offer = world.running(w)
    world.run(request_cancel, task_id=offer.task.task_id, reason="operator", requested_by="alice")
    result = world.finish(w, offer, 2)
    assert not isinstance(result, Refusal) and offer.lease.lease_id in locked
    assert world.sql("SELECT state FROM cancel_intents") != [("REQUESTED",)]
    assert world.task(offer.task.task_id).task.state == "SUCCEEDED"


def test_a_cancel_committed_before_a_renew_is_capped_by_the_locking_path(world, locked):
    w = world.worker("q")
    offer = world.running(w)
    world.run(request_cancel, task_id=offer.task.task_id, reason="operator", requested_by="alice")
    (deadline,) = world.sql("SELECT cancel_deadline FROM leases")[0]
    renewed = world.renew(w, offer, 2)
    assert offer.lease.lease_id in locked
    assert renewed.lease.cancel_requested_at is not None
    assert renewed.lease.expires_at.replace(tzinfo=None) == deadline, "the grace deadline caps the renewal"


def test_a_batch_the_guard_matches_only_in_part_is_undone_and_screened(world, locked):
    w = world.worker("q")
    for _ in range(3):
        world.submit()
    offers = world.assign(w, 3)
    world.run(request_cancel, task_id=offers[1].task.task_id, reason="operator", requested_by="alice")
    results = world.run(start, commands=[world.command(w, o, 1) for o in offers])
    assert [r.code if isinstance(r, Refusal) else r.lease.revision for r in results] == [2, "task_cancelled", 2]
    assert sorted(locked) == sorted(o.lease.lease_id for o in offers)
    states = dict((row[0], row[1:]) for row in world.sql("SELECT lease_id, state, revision FROM leases"))
    assert [states[o.lease.lease_id] for o in offers] == [("RUNNING", 2), ("REVOKED", 1), ("RUNNING", 2)]


def test_a_revoke_racing_a_start_never_lets_both_win(world, db):
    """Threads on two stores: a cancel request and the worker's start, released together."""
    stores = [Store(db, pool_size=2) for _ in range(2)]
    barrier = threading.Barrier(2)
    try:
        w = world.worker("q", capacity=100)
        for _ in range(ROUNDS):
            offer = world.offer(w)
            command = world.command(w, offer, 1)

            def go(i, offer=offer, command=command):
                barrier.wait()
                if i == 0:
                    return stores[0].run_sync(start, commands=[command], now=world.now)[0]
                return stores[1].run_sync(request_cancel, task_id=offer.task.task_id, reason="operator",
                                          requested_by="alice", now=world.now)

            with ThreadPoolExecutor(2) as pool:
                started, _ = pool.map(go, range(2))
            (state, cancel_requested), = world.sql(
                "SELECT state, cancel_requested_at IS NOT NULL FROM leases WHERE lease_id = %s",
                (offer.lease.lease_id,))
            if isinstance(started, Refusal):
                assert (started.code, state) == ("task_cancelled", "REVOKED")
            else:  # the start won: the cancel found a running lease and recorded its intent on it
                assert (state, cancel_requested) == ("RUNNING", 1)
    finally:
        for s in stores:
            s.close()


def test_the_book_is_bounded_and_drops_the_oldest_first():
    from pulse_trio.store.lease.known import KnownLease, LeaseBook

    def entry(n: int) -> KnownLease:
        return KnownLease(f"lse_{n}", f"tsk_{n}", b"\0" * 32, "ses_1", "OFFERED", 1, 1, 1, 30_000, None, "q",
                          dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))

    book = LeaseBook(limit=2)
    book.put([entry(1), entry(2)])
    book.put([entry(1)])  # written again: the newest now
    book.put([entry(3)])
    assert (book.get("lse_1"), book.get("lse_2"), len(book)) == (entry(1), None, 2)
    book.forget(["lse_1", "lse_9"])
    assert book.get("lse_1") is None and book.get("lse_3") == entry(3)


def test_a_moved_entry_is_the_old_one_a_revision_on():
    """``KnownLease.moved`` builds positionally: every field must land where ``replace`` would put it."""
    import datetime as dt_

    from pulse_trio.store.lease.known import KnownLease

    fields = [f.name for f in dataclasses.fields(KnownLease)]
    values = {name: f"<{name}>" for name in fields}
    values.update(revision=4, started_at=None)
    old = KnownLease(**values)
    at = dt_.datetime(2026, 12, 6, tzinfo=dt_.timezone.utc)
    assert old.moved("RUNNING", at) == dataclasses.replace(old, state="RUNNING", revision=5, started_at=at)
    assert old.moved(old.state, None) == dataclasses.replace(old, revision=5)
