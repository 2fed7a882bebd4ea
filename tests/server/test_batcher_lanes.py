"""Command lanes: several batches in flight, and still one command per lease at a time."""

from __future__ import annotations

import collections
import contextlib
import json

import trio
import trio.testing

from pulse_trio.server import batcher
from pulse_trio.server.batcher import LANES, MAX_BATCH, LeaseCommandBatcher, _Pending, _take_batch
from pulse_trio.server.clock import ServiceClock
from pulse_trio.server.hub import SessionHub
from pulse_trio.contract.limits import MAX_COUNTER, MAX_RESULT_BYTES
from pulse_trio.dburl import connect
from pulse_trio.store import (
    NewInstance, NewTask, SubscribedQueue, assign, new_credentials, register, set_capacity, start, submit,
)
from pulse_trio.store.engine.inputs import FinishCommand, FinishReport, RenewCommand, StartCommand
from pulse_trio.store.engine.results import CommandAck, Refusal
from pulse_trio.store.engine.trio_bridge import Store


class _Posted:
    """A connection's inbox as the batcher sees it: outcomes are posted to it, never applied by the lane."""

    def __init__(self) -> None:
        self.outcomes: list = []
        self.posted = trio.Event()

    def command_done(self, request, outcome) -> None:
        self.outcomes.append((request, outcome))
        self.posted.set()


def _pending(lease: str, kind: str = "start") -> _Pending:
    fields = ("ses_x", "tsk_" + lease, "lse_" + lease, "secret", 1)
    command = (FinishCommand(*fields, FinishReport("SUCCEEDED", "{}")) if kind == "finish"
               else RenewCommand(*fields) if kind == "renew" else StartCommand(*fields))
    return _Pending(command, _Posted(), None)


def _leases(items) -> list[str]:
    return [p.command.lease_id for p in items]


def test_a_lease_another_lane_holds_stays_queued_in_order():
    queue = collections.deque([_pending("a"), _pending("b"), _pending("b", "finish"), _pending("c")])
    held = {"lse_b"}
    batch = _take_batch(queue, held)
    assert _leases(batch) == ["lse_a", "lse_c"]
    assert held == {"lse_a", "lse_b", "lse_c"}  # what it took is held until its lane releases it
    assert [(p.command.lease_id, type(p.command)) for p in queue] == [("lse_b", StartCommand), ("lse_b", FinishCommand)]


def test_a_repeat_waits_for_the_next_batch_behind_its_first_command():
    queue = collections.deque([_pending("a"), _pending("a", "renew"), _pending("a", "finish"), _pending("b")])
    assert _leases(_take_batch(queue, held=set())) == ["lse_a", "lse_b"]
    assert [type(p.command) for p in queue] == [RenewCommand, FinishCommand]


def test_a_batch_is_bounded_and_the_rest_keeps_its_order():
    queue = collections.deque(_pending(f"{i:04d}") for i in range(MAX_BATCH + 5))
    batch = _take_batch(queue, held=set())
    assert len(batch) == MAX_BATCH
    assert _leases(queue) == [f"lse_{i:04d}" for i in range(MAX_BATCH, MAX_BATCH + 5)]


async def test_pipelined_commands_of_many_leases_commit_in_each_leases_order(start_service, connect, worker_token,
                                                                            client):
    """start, renew and finish of each lease sent back to back, unanswered: every one is accepted."""
    assert batcher.LANES > 1  # otherwise this would not exercise lanes at all
    service = await start_service()
    w = await connect(service, worker_token, name="pipelined")
    count = 24
    await w.register(["billing"], capacity=count)
    for n in range(count):
        client.submit("billing", "invoice.send", {"invoice": n})
    held = [await w.expect_assign() for _ in range(count)]
    sent: list[str] = []
    for h in held:  # revisions: start is sent at the offer's, each accepted command moves it on by one
        sent.append(await w.send(w.frame("task.start", h.body(h.revision))))
        sent.append(await w.send(w.frame("task.renew", h.body(h.revision + 1))))
        sent.append(await w.send(w.frame("task.finish", h.body(h.revision + 2, status="SUCCEEDED",
                                                               result={"ok": True}))))
    with trio.fail_after(30):
        replies = [await w.reply(id_) for id_ in sent]
    assert [r["type"] for r in replies] == ["ack"] * len(sent), [r for r in replies if r["type"] != "ack"]
    assert {client.get(h.task_id)["state"] for h in held} == {"SUCCEEDED"}


@contextlib.asynccontextmanager
async def _running_lanes(store: Store):
    """A batcher's lanes running on ``store``, every one parked, for the block (the store is closed after)."""
    try:
        lanes = LeaseCommandBatcher(store, ServiceClock(), SessionHub())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lanes.run)
            await trio.testing.wait_all_tasks_blocked()
            yield lanes
            nursery.cancel_scope.cancel()
    finally:
        store.close()


def _submit(lanes: LeaseCommandBatcher, n: int, inbox: _Posted) -> None:
    lanes.submit(_pending(f"{n:026d}"[-26:]).command, inbox, f"request {n}")


async def _all_posted(inboxes: list[_Posted]) -> None:
    with trio.fail_after(10):
        for inbox in inboxes:
            await inbox.posted.wait()


async def test_every_lane_is_idle_and_wakeable_again_after_each_batch(db):
    """A wake-up that one lane answers leaves the others parked where the next submit finds them."""
    async with _running_lanes(Store(db, pool_size=LANES)) as lanes:
        for n in range(3):
            inbox = _Posted()
            _submit(lanes, n, inbox)
            await _all_posted([inbox])
            await trio.testing.wait_all_tasks_blocked()
            [(request, outcome)] = inbox.outcomes
            assert request == f"request {n}" and isinstance(outcome, Refusal)  # no such lease: refused, and answered
            assert lanes._idle_lanes.statistics().tasks_waiting == LANES


async def test_a_burst_of_submits_wakes_one_lane_and_is_its_batch(db):
    """Commands submitted before the woken lane looks (a cohort read in one chunk) wake no other lane."""
    async with _running_lanes(Store(db, pool_size=LANES)) as lanes:
        inboxes = [_Posted() for _ in range(5)]
        for n, inbox in enumerate(inboxes):
            _submit(lanes, n, inbox)
        assert lanes._idle_lanes.statistics().tasks_waiting == LANES - 1
        await _all_posted(inboxes)
        assert (lanes.batches, lanes.commands) == (1, 5)
        await trio.testing.wait_all_tasks_blocked()
        assert lanes._idle_lanes.statistics().tasks_waiting == LANES


class _GatedStore(Store):
    """The real store, whose batches wait for a gate first: every lane can be held busy at once."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gate = trio.Event()

    async def run_batch(self, *args, **kwargs):
        await self.gate.wait()
        return await super().run_batch(*args, **kwargs)


async def test_commands_submitted_while_every_lane_is_busy_are_taken_when_one_frees(db):
    """No lane to wake: the submit leaves the command queued, and a lane that ends its batch takes it."""
    store = _GatedStore(db, pool_size=LANES)
    async with _running_lanes(store) as lanes:
        inboxes = [_Posted() for _ in range(LANES + 2)]
        for n in range(LANES):  # one batch per lane, each waiting at the gate
            _submit(lanes, n, inboxes[n])
            await trio.testing.wait_all_tasks_blocked()
        assert lanes._idle_lanes.statistics().tasks_waiting == 0
        for n in range(LANES, LANES + 2):
            _submit(lanes, n, inboxes[n])
        store.gate.set()
        await _all_posted(inboxes)
        assert lanes.commands == LANES + 2
        await trio.testing.wait_all_tasks_blocked()
        assert lanes._idle_lanes.statistics().tasks_waiting == LANES and not lanes._queue


async def test_a_burst_past_one_batch_is_shared_by_two_lanes(db):
    """The woken lane takes MAX_BATCH commands and wakes another lane for the rest, at once."""
    store = _GatedStore(db, pool_size=LANES)
    async with _running_lanes(store) as lanes:
        inboxes = [_Posted() for _ in range(MAX_BATCH + 3)]
        for n, inbox in enumerate(inboxes):
            _submit(lanes, n, inbox)
        await trio.testing.wait_all_tasks_blocked()
        assert lanes._idle_lanes.statistics().tasks_waiting == LANES - 2 and not lanes._queue
        store.gate.set()
        await _all_posted(inboxes)
        assert (lanes.batches, lanes.commands) == (2, MAX_BATCH + 3)


async def test_finishes_whose_results_would_overflow_one_statement_share_several_batches(db):
    """A burst of finishes with results at the contract's limit: their outcomes share one UPDATE per batch,
    which must fit the database's packet limit, so the burst is cut into batches and every finish commits."""
    store = Store(db, pool_size=LANES)
    now = ServiceClock().now()
    registered = store.run_sync(register, now=now, instance=NewInstance("w", (SubscribedQueue("q"),)))
    session = registered.instance.session_id
    count = 36  # in one statement, past MariaDB's default packet limit
    store.run_sync(set_capacity, now=now, session_id=session, sequence=1, capacity=count, drain=False)
    store.run_sync(submit, now=now, tasks=[NewTask("q", "k") for _ in range(count)])
    offers = store.run_sync(assign, now=now, session_id=session, credentials=new_credentials(count),
                            start_timeout_ms=30_000, default_lease_ttl_ms=30_000).offers
    assert len(offers) == count
    leases = [(o.task.task_id, o.lease.lease_id, o.lease_secret) for o in offers]
    started = store.run_sync(start, now=now, commands=[StartCommand(session, *lease, 1) for lease in leases])
    assert not [r for r in started if isinstance(r, Refusal)]
    # Quotes: the JSON text escapes them, and so does the statement, each result at the limit.
    quotes = (MAX_RESULT_BYTES - 4) // 2
    async with _running_lanes(store) as lanes:
        inboxes = [_Posted() for _ in leases]
        for n, (lease, inbox) in enumerate(zip(leases, inboxes)):
            result = json.dumps('"' * quotes + f"{n:02d}", separators=(",", ":"))
            assert len(result.encode()) <= MAX_RESULT_BYTES
            lanes.submit(FinishCommand(session, *lease, 2, FinishReport("SUCCEEDED", result)), inbox, n)
        await _all_posted(inboxes)
        outcomes = [inbox.outcomes[0][1] for inbox in inboxes]
        assert [type(o) for o in outcomes] == [CommandAck] * count, outcomes[0]
        # Cut before the statement was sent, not after it failed: the per-command fallback would also ack them all,
        # after ten attempts of an UPDATE the server drops.
        assert lanes.batches >= count // 4 and store.statistics().retries == 0, (lanes.batches, store.statistics())


async def test_one_finish_the_database_refuses_costs_the_other_finishes_of_its_batch_nothing(db):
    """A batch's finishes are one call: the fallback runs each alone, so only the refused one is answered with
    the error (``internal``); the others, from other connections, are acked and committed."""
    store = Store(db, pool_size=LANES)
    now = ServiceClock().now()
    registered = store.run_sync(register, now=now, instance=NewInstance("w", (SubscribedQueue("q"),)))
    session = registered.instance.session_id
    store.run_sync(set_capacity, now=now, session_id=session, sequence=1, capacity=3, drain=False)
    store.run_sync(submit, now=now, tasks=[NewTask("q", "k") for _ in range(3)])
    offers = store.run_sync(assign, now=now, session_id=session, credentials=new_credentials(3),
                            start_timeout_ms=30_000, default_lease_ttl_ms=30_000).offers
    leases = [(o.task.task_id, o.lease.lease_id, o.lease_secret) for o in offers]
    store.run_sync(start, now=now, commands=[StartCommand(session, *lease, 1) for lease in leases])
    # The middle lease's revision at the counter's limit: its finish's revision + 1 is out of the column's range.
    with contextlib.closing(connect(db)) as conn, conn.cursor() as cur:
        cur.execute("UPDATE leases SET revision = %s WHERE lease_id = %s", (MAX_COUNTER, leases[1][1]))
        conn.commit()
    async with _running_lanes(store) as lanes:
        inboxes = [_Posted() for _ in leases]
        for n, (lease, inbox) in enumerate(zip(leases, inboxes)):
            lanes.submit(FinishCommand(session, *lease, MAX_COUNTER if n == 1 else 2,
                                       FinishReport("SUCCEEDED", "{}")), inbox, n)
        await _all_posted(inboxes)
        outcomes = [inbox.outcomes[0][1] for inbox in inboxes]
        assert lanes.batches == 1
    assert [type(o) for o in (outcomes[0], outcomes[2])] == [CommandAck, CommandAck], outcomes
    assert isinstance(outcomes[1], Exception), outcomes[1]
