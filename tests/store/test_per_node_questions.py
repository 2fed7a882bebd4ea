"""What the timers ask about a node's own sessions names the node, not the sessions.

A serve process asks every tick whether any of its opted-in sessions has a
cancel to be told, and every second how many leases its sessions hold. Both
questions name the node (``tx.node_id``); the statements sent are the same
whether the node holds one session or many, and they see only that node's
live sessions.
"""

from __future__ import annotations

import types

import pytest

from pulse_trio.dburl import connect
from pulse_trio.store import (
    NewInstance, Refusal, SubscribedQueue, nodes, notify_cancellations, register, request_cancel, set_capacity,
)
from pulse_trio.store.instance.instances import disconnect, live_lease_counts
from pulse_trio.store.views.queries import list_workers
from pulse_trio.store.views.timer_probe import due_work
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.engine.tx import Tx
from sql_support import index_reads

HERE, THERE = "nod_" + "H" * 26, "nod_" + "T" * 26


class RecordingCursor:
    """A real PyMySQL cursor that keeps the text of every statement it sends."""

    def __init__(self, cursor) -> None:
        self._cursor = cursor
        self.sent: list[str] = []

    def execute(self, sql, args=()):
        self.sent.append(self._cursor.mogrify(sql, args))
        return self._cursor.execute(sql, args)

    def __getattr__(self, name):
        return getattr(self._cursor, name)


@pytest.fixture
def on_node(world):
    """``run(node_id, fn, **kw)``: run a function as a serve process of that node (both nodes started)."""
    stores = {n: Store(world.db, pool_size=2, node_id=n) for n in (HERE, THERE)}
    for store in stores.values():
        store.run_sync(nodes.start, lapse_ms=15_000, host="test-host", pid=4242, now=world.now)

    def run(node_id, fn, **kwargs):
        if fn is not live_lease_counts:  # the one question here that needs no time
            kwargs.setdefault("now", world.now)
        return stores[node_id].run_sync(fn, **kwargs)

    yield run
    for store in stores.values():
        store.close()


def _session(world, on_node, node_id: str, *, notify: bool, capacity: int = 0) -> types.SimpleNamespace:
    reg = on_node(node_id, register, instance=NewInstance("w", (SubscribedQueue("q"),),
                                                          cancellation_notifications=notify))
    assert not isinstance(reg, Refusal), reg
    if capacity:
        world._sequence += 1
        world.run(set_capacity, session_id=reg.instance.session_id, sequence=world._sequence, capacity=capacity,
                  drain=False)
    return types.SimpleNamespace(session_id=reg.instance.session_id)


def _sent(world, node_id: str, fn, **kwargs) -> tuple[object, list[str]]:
    """Run ``fn`` in a transaction of ``node_id`` on a recording cursor: its answer and the statements sent."""
    conn = connect(world.db)
    try:
        cursor = RecordingCursor(conn.cursor())
        if fn is not live_lease_counts:
            kwargs.setdefault("now", world.now)
        result = fn(Tx(cursor, node_id=node_id), **kwargs)
        conn.rollback()
        return result, cursor.sent
    finally:
        conn.close()


def test_the_tick_probe_and_the_cancel_look_keep_their_size_however_many_sessions(world, on_node):
    _session(world, on_node, HERE, notify=True)
    _, probe_one = _sent(world, HERE, due_work, cancels=True)
    _, notify_one = _sent(world, HERE, notify_cancellations)
    _, counts_one = _sent(world, HERE, live_lease_counts)
    for _ in range(60):
        _session(world, on_node, HERE, notify=True)
    _, probe_many = _sent(world, HERE, due_work, cancels=True)
    _, notify_many = _sent(world, HERE, notify_cancellations)
    _, counts_many = _sent(world, HERE, live_lease_counts)
    assert probe_many == probe_one and len(probe_one) == 1
    assert notify_many == notify_one and len(notify_one) == 1
    assert counts_many == counts_one and len(counts_one) == 1
    assert len(probe_one[0]) < 2_000


def test_the_probe_and_notify_see_this_nodes_opted_in_live_sessions_only(world, on_node):
    here = _session(world, on_node, HERE, notify=True, capacity=1)
    silent = _session(world, on_node, HERE, notify=False, capacity=1)
    there = _session(world, on_node, THERE, notify=True, capacity=1)
    offers = {}
    for w in (silent, there, here):  # one running task each
        offers[w.session_id] = world.offer(w)
        assert not isinstance(world.start(w, offers[w.session_id]), Refusal)

    def cancel(w):
        world.run(request_cancel, task_id=offers[w.session_id].task.task_id, reason="operator")

    cancel(silent)  # not opted in: nothing to push
    cancel(there)  # another node's session: that node pushes it
    due, _ = _sent(world, HERE, due_work, cancels=True)
    assert not due.cancels
    assert on_node(HERE, notify_cancellations) == ()
    due, _ = _sent(world, THERE, due_work, cancels=True)
    assert due.cancels
    (told,) = on_node(THERE, notify_cancellations)
    assert told.session_id == there.session_id

    cancel(here)
    due, _ = _sent(world, HERE, due_work, cancels=True)
    assert due.cancels
    (told,) = on_node(HERE, notify_cancellations)
    assert told.session_id == here.session_id and told.lease_id == offers[here.session_id].lease.lease_id
    assert on_node(HERE, notify_cancellations) == (), "told once"
    world.run(disconnect, session_id=here.session_id)
    due, _ = _sent(world, HERE, due_work, cancels=True)
    assert not due.cancels, "a disconnected session is no longer this node's"


def test_lease_counts_by_node(world, on_node):
    a = _session(world, on_node, HERE, notify=False, capacity=3)
    b = _session(world, on_node, HERE, notify=False, capacity=3)
    idle = _session(world, on_node, HERE, notify=False, capacity=3)
    other = _session(world, on_node, THERE, notify=False, capacity=3)
    for w, n in ((a, 2), (b, 1), (other, 3)):
        for _ in range(n):
            world.offer(w)
    assert on_node(HERE, live_lease_counts) == {a.session_id: 2, b.session_id: 1}
    assert on_node(THERE, live_lease_counts) == {other.session_id: 3}
    assert idle.session_id not in on_node(HERE, live_lease_counts)
    world.run(disconnect, session_id=b.session_id)
    assert on_node(HERE, live_lease_counts) == {a.session_id: 2}


def _index_reads(world, node_id: str, fn, **kwargs) -> int:
    """How many index entries ``fn``'s statements read, run as ``node_id``."""
    if fn not in (live_lease_counts, list_workers):
        kwargs.setdefault("now", world.now)
    return index_reads(world.db, lambda tx: fn(tx, **kwargs), node_id=node_id)[1]

def test_the_node_questions_never_read_a_sessions_finished_leases(world, on_node):
    """A session connected for days has finished a lease per task it ran; the questions asked on
    every tick (and the workers listing's held count) read only its live ones, so their cost stays
    flat however long the session lives."""
    w = _session(world, on_node, HERE, notify=True, capacity=1)
    worker = types.SimpleNamespace(session_id=w.session_id)

    def finish_some(n: int) -> None:
        for _ in range(n):
            offer = world.offer(worker)
            assert not isinstance(world.start(worker, offer), Refusal)
            assert not isinstance(world.finish(worker, offer, 2), Refusal)

    questions = {"probe": (due_work, {"cancels": True}), "notify": (notify_cancellations, {}),
                 "counts": (live_lease_counts, {}), "workers": (list_workers, {})}
    finish_some(2)
    world.offer(worker)  # one live lease beside the finished ones
    few = {name: _index_reads(world, HERE, fn, **kw) for name, (fn, kw) in questions.items()}
    world.run(disconnect, session_id=w.session_id)
    w = _session(world, on_node, HERE, notify=True, capacity=1)
    worker = types.SimpleNamespace(session_id=w.session_id)
    finish_some(60)
    world.offer(worker)
    many = {name: _index_reads(world, HERE, fn, **kw) for name, (fn, kw) in questions.items()}
    # 58 more finished leases; the plan (and so the count) may differ by a few reads between the two
    assert all(many[name] < few[name] + 10 for name in questions), (few, many)


@pytest.mark.parametrize("started", [False, True], ids=["revoked offer", "running lease"])
def test_a_cancel_once_told_leaves_the_ticks_nothing_to_do(world, on_node, started):
    """Told is done: the ticks after the push find no cancel to push, for the rest of the session's life.

    A revoked offer stays revoked for good and a running lease may run out
    its grace: if the probe still saw them, every tick would run a notify
    transaction that finds nothing.
    """
    w = _session(world, on_node, HERE, notify=True, capacity=1)
    offer = world.offer(w)
    if started:
        assert not isinstance(world.start(w, offer), Refusal)
    world.run(request_cancel, task_id=offer.task.task_id, reason="operator")
    assert _sent(world, HERE, due_work, cancels=True)[0].cancels
    (told,) = on_node(HERE, notify_cancellations)
    assert told.lease_id == offer.lease.lease_id
    world.advance(1_000)
    due, _ = _sent(world, HERE, due_work, cancels=True)
    assert not due.cancels, "the next tick has no notice left to send"
    assert on_node(HERE, notify_cancellations) == ()


def test_the_node_questions_never_read_a_sessions_told_revoked_offers(world, on_node):
    """A revoked offer stays revoked for good; once its holder is told, the questions asked on every
    tick no longer read it, so a session whose offers are often cancelled does not slow its ticks
    for the rest of its life."""
    questions = {"probe": (due_work, {"cancels": True}), "notify": (notify_cancellations, {})}

    def revoke_and_tell(n: int) -> types.SimpleNamespace:
        w = _session(world, on_node, HERE, notify=True, capacity=1)
        for _ in range(n):
            offer = world.offer(w)
            world.run(request_cancel, task_id=offer.task.task_id, reason="operator")
            (told,) = on_node(HERE, notify_cancellations)
            assert told.lease_id == offer.lease.lease_id
        return w

    w = revoke_and_tell(2)
    few = {name: _index_reads(world, HERE, fn, **kw) for name, (fn, kw) in questions.items()}
    world.run(disconnect, session_id=w.session_id)
    revoke_and_tell(60)
    many = {name: _index_reads(world, HERE, fn, **kw) for name, (fn, kw) in questions.items()}
    # 58 more revoked offers; the plan (and so the count) may differ by a few reads between the two
    assert all(many[name] < few[name] + 10 for name in questions), (few, many)
