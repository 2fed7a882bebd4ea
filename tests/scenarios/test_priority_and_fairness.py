"""Priority, aging, fairness across sessions, and scheduled promotion (docs/priority-and-fairness.md §2-§4)."""

from __future__ import annotations

import trio

from pulse_trio.contract.grammar import parse_time
from scenario_support import Held, offered

SETTINGS = dict(start_timeout=30, lease_ttl=30, priority_step=2)


async def _serve_in_order(worker, count: int) -> list[str]:
    """Capacity 1: take, start and finish ``count`` tasks one by one; their keys in order of dispatch."""
    order = []
    for _ in range(count):
        held = await offered(worker)
        order.append(held.task["idempotency_key"])
        await held.start()
        await held.finish()
    return order


async def test_higher_priority_first_then_by_task_id(virtual_clock, scenario_service, connect_worker, submit):
    service = await scenario_service(**SETTINGS)
    specs = [dict(priority=p, idempotency_key=f"p{p}-{i}") for i, p in enumerate([0, 5, 9, 0, 5, 1])]
    done = await submit.many(service, specs)
    async with connect_worker(service) as worker:
        await worker.capacity(1)
        order = await _serve_in_order(worker, len(specs))
    assert [k.split("-")[0] for k in order] == ["p9", "p5", "p5", "p1", "p0", "p0"]
    ids = {spec["idempotency_key"]: d["task_id"] for spec, d in zip(specs, done)}
    fives = [k for k in order if k.startswith("p5")]
    assert [ids[k] for k in fives] == sorted(ids[k] for k in fives)  # equal rank: task id decides


async def test_only_due_tasks_compete(virtual_clock, scenario_service, connect_worker, submit, operator):
    """A scheduled priority-9 task ranks far ahead on paper but is not offered before its due time."""
    service = await scenario_service(**dict(SETTINGS, priority_step=30))
    ops = operator(service)
    later = await submit(service, priority=9, delay=10, idempotency_key="later")
    now = await submit(service, priority=0, idempotency_key="now")
    assert later["state"] == "SCHEDULED"
    async with connect_worker(service) as worker:
        await worker.capacity(1)
        first = await offered(worker)
        assert first.task["idempotency_key"] == "now"
        await first.start()
        await first.finish()
        second = await offered(worker)
        assert second.task["idempotency_key"] == "later"
        assert service.clock.now() >= parse_time(second.task["due_at"])
    assert (await ops.state(now["task_id"])) == "SUCCEEDED"


async def test_aging_a_low_priority_task_overtakes_newer_high_priority_ones(
        virtual_clock, scenario_service, connect_worker, submit):
    """step 2 s: priority 9 is worth 18 s of waiting; a priority-0 task that waited 25 s goes first."""
    service = await scenario_service(**SETTINGS)
    await submit(service, priority=0, idempotency_key="old-low")
    await trio.sleep(10)
    await submit(service, priority=9, idempotency_key="early-high")  # ranks at -8 s: still ahead of old-low
    await trio.sleep(15)
    await submit.many(service, [dict(priority=9, idempotency_key=f"new-high-{i}") for i in range(3)])  # +7 s
    async with connect_worker(service) as worker:
        await worker.capacity(1)
        order = await _serve_in_order(worker, 5)
    assert order[:2] == ["early-high", "old-low"]
    assert sorted(order[2:]) == ["new-high-0", "new-high-1", "new-high-2"]


async def test_no_starvation_under_a_stream_of_high_priority_work(virtual_clock, scenario_service,
                                                                  connect_worker, submit):
    """High-priority tasks keep arriving faster than one worker drains them; the low one still runs.

    Priority 9 at a 2 s step is an 18 s head start: the low task runs after everything
    submitted up to 18 s after it, and before everything submitted later.
    """
    service = await scenario_service(**SETTINGS)
    await submit.many(service, [dict(priority=9, idempotency_key=f"backlog-{i}") for i in range(5)])
    low_at = service.clock.now()
    await submit(service, priority=0, idempotency_key="low")
    submitted: dict[str, float] = {}
    order: list[str] = []
    async with connect_worker(service) as worker:
        await worker.capacity(1)
        async with trio.open_nursery() as nursery:
            async def produce():
                for i in range(200):
                    submitted[f"stream-{i}"] = (service.clock.now() - low_at).total_seconds()
                    await submit(service, priority=9, idempotency_key=f"stream-{i}")
                    await trio.sleep(0.5)
            nursery.start_soon(produce)
            while "low" not in order:
                held = await offered(worker)
                order.append(held.task["idempotency_key"])
                await held.start()
                await trio.sleep(1)  # each task takes 1 s: the backlog only grows
                await held.finish()
            waiting = [k for k in submitted if k not in order]
            nursery.cancel_scope.cancel()
    before = [k for k in order[:-1] if k.startswith("stream-")]
    assert all(submitted[k] <= 18 for k in before)
    # newer high-priority tasks were waiting when the low one was chosen: it overtook them
    assert any(submitted[k] > 18 for k in waiting)


async def _split(service, connect_worker, submit, capacities: tuple[int, int], tasks: int) -> tuple[int, int]:
    """Two sessions with free capacity, then ``tasks`` arrive at once: how many offers each got."""
    async with connect_worker(service) as a, connect_worker(service) as b:
        await a.capacity(capacities[0])
        await b.capacity(capacities[1])
        await trio.sleep(1)  # the passes the capacity frames started are over: both sessions are idle
        await submit.many(service, [dict(idempotency_key=f"t{i}") for i in range(tasks)])
        await a.listen(1)
        await b.listen(0.5)
        return len(a.pushed("task.assign")), len(b.pushed("task.assign"))


async def test_equal_sessions_get_equal_shares(virtual_clock, scenario_service, connect_worker, submit):
    """The burst lands as a poll pass runs: a session that claimed just before the commit still gets its share."""
    service = await scenario_service(**SETTINGS)
    a, b = await _split(service, connect_worker, submit, (8, 8), 8)
    assert a + b == 8 and abs(a - b) <= 2  # at most one round's share (2) apart


async def test_a_scarce_burst_is_still_shared(virtual_clock, scenario_service, connect_worker, submit):
    """3 tasks, two sessions wanting 2 each: one claim must not lock rows it will not offer."""
    service = await scenario_service(**SETTINGS)
    a, b = await _split(service, connect_worker, submit, (8, 8), 3)
    assert sorted((a, b)) == [1, 2]


async def test_free_capacity_is_filled_in_proportion_to_free_slots(virtual_clock, scenario_service,
                                                                   connect_worker, submit):
    """30 and 10 free slots, 20 tasks: about 15 and 5, not 20 and 0 for whoever asked first."""
    service = await scenario_service(**SETTINGS)
    big, small = await _split(service, connect_worker, submit, (30, 10), 20)
    assert big + small == 20
    assert 3 <= small <= 8 and big >= 12


async def test_scheduled_task_promotion(virtual_clock, scenario_service, connect_worker, submit, operator):
    service = await scenario_service(**SETTINGS)
    ops = operator(service)
    task = await submit(service, delay=12, idempotency_key="delayed")
    assert task["state"] == "SCHEDULED"
    due = parse_time((await ops.get(task["task_id"]))["due_at"])
    async with connect_worker(service) as worker:
        await worker.capacity(1)
        await worker.listen(10)
        assert not worker.pushed("task.assign")
        assert (await ops.state(task["task_id"])) == "SCHEDULED"
        held = await offered(worker)
        assert held.task_id == task["task_id"]
        assert service.clock.now() >= due
        # promoted within a couple of timer ticks of its due time
        assert (service.clock.now() - due).total_seconds() < 3


async def _every_slot_running(worker, capacity: int) -> list[Held]:
    """Declare ``capacity``, take that many offers and start them all."""
    await worker.capacity(capacity)
    held = [await offered(worker) for _ in range(capacity)]
    for h in held:
        await h.start()
    return held


async def test_a_busy_session_is_topped_up_at_its_refill_mark_or_at_the_poll(
        virtual_clock, scenario_service, connect_worker, submit):
    """Capacity 8 (refill mark 2): one finish alone waits for the poll, two together are refilled at once.

    New work and the poll fill every free slot; a finish only tops a session
    up once a quarter of its capacity is free, so a busy worker costs one
    claim per few tasks instead of one per task. (The queues are not deep
    here: an idle session finds nothing on its queue, so no finish claims for
    its own slot, as the next test's do.)
    """
    service = await scenario_service(**dict(SETTINGS, poll_interval=5))
    await submit.many(service, [dict(idempotency_key=f"t{i}") for i in range(12)])
    async with connect_worker(service, queues=("idle",)) as idle, connect_worker(service) as worker:
        await idle.capacity(4)
        held = await _every_slot_running(worker, 8)
        await worker.listen(6)  # a poll pass has run since: nothing is offered while every slot is busy
        assert not worker.pushed("task.assign")
        assert not service.dispatcher.backlogged

        await held[0].finish()
        finished_at = trio.current_time()
        topped_up = await offered(worker)  # one free slot of eight: the next poll serves it, not the finish
        assert trio.current_time() - finished_at >= 1.0
        await topped_up.start()

        await held[1].finish()
        await held[2].finish()  # two free: the refill mark, served at once in one claim
        started = trio.current_time()
        pair = [await offered(worker), await offered(worker)]
        assert trio.current_time() - started < 1.0
        assert len({h.task_id for h in pair} | {h.task_id for h in held} | {topped_up.task_id}) == 11
        assert service.batcher.statistics()["ride_along_claims"] == 0


async def test_deep_queues_refill_each_finished_slot_at_once_in_the_finish_transaction(
        virtual_clock, scenario_service, connect_worker, submit):
    """Every session full and none short of work: a finish claims for its own slot, below the refill mark too."""
    service = await scenario_service(**dict(SETTINGS, poll_interval=5))
    await submit.many(service, [dict(idempotency_key=f"t{i}") for i in range(12)])
    async with connect_worker(service) as worker:
        held = await _every_slot_running(worker, 8)
        await worker.listen(6)
        assert service.dispatcher.backlogged
        claims = service.dispatcher.statistics()["claims"]
        refilled = []
        for h in held[:4]:  # one slot at a time, each refilled by its own finish, without waiting for the poll
            await h.finish()
            finished_at = trio.current_time()
            refilled.append(await offered(worker))
            assert trio.current_time() - finished_at < 1.0
        assert len({h.task_id for h in refilled} | {h.task_id for h in held}) == 12
        assert service.dispatcher.statistics()["claims"] == claims  # no claim transaction of its own
        assert service.batcher.statistics()["ride_along_offers"] == 4


async def test_new_work_fills_a_busy_session_at_once(virtual_clock, scenario_service, connect_worker, submit):
    """The refill mark only applies to finishes: a submit through this instance serves a single free slot."""
    service = await scenario_service(**dict(SETTINGS, poll_interval=5))
    await submit.many(service, [dict(idempotency_key=f"t{i}") for i in range(8)])
    async with connect_worker(service) as worker:
        held = await _every_slot_running(worker, 8)
        await held[0].finish()
        await worker.listen(6)  # the poll fills the slot... with nothing: the queue is empty
        await submit(service, idempotency_key="new")  # wakes the dispatcher with news
        started = trio.current_time()
        fresh = await offered(worker)
        assert fresh.task["idempotency_key"] == "new"
        assert trio.current_time() - started < 1.0


async def test_a_fast_poll_still_keeps_the_refill_mark(virtual_clock, scenario_service, connect_worker, submit):
    """--poll-interval 0.01: single free slots are served by fill-all passes, and those come every 0.1 s at most.

    (The queues are not deep: an idle session finds nothing on its queue.)
    """
    service = await scenario_service(**dict(SETTINGS, poll_interval=0.01))
    await submit.many(service, [dict(idempotency_key=f"t{i}") for i in range(12)])
    async with connect_worker(service, queues=("idle",)) as idle, connect_worker(service) as worker:
        await idle.capacity(4)
        held = await _every_slot_running(worker, 8)
        served = []
        for h in held[:4]:  # one slot at a time: below the refill mark (2) each time
            await h.finish()
            await (await offered(worker)).start()
            served.append(trio.current_time())
    gaps = [b - a for a, b in zip(served, served[1:])]
    assert min(gaps) >= 0.09, gaps
    assert service.batcher.statistics()["ride_along_claims"] == 0


async def test_a_flood_and_a_trickle_share_the_queue_by_weight(virtual_clock, scenario_service, connect_worker,
                                                               submit, operator, db):
    """Weights 1 and 3 (docs/priority-and-fairness.md §5): shares of the offers measured from the lease rows."""
    from sql_support import rows

    service = await scenario_service(start_timeout=30, lease_ttl=30)
    ops = operator(service)
    await trio.to_thread.run_sync(lambda: ops.client.set_fairness_weight("trickle", 3, updated_by="scenario"))
    await submit.many(service, [dict(fairness_key="flood", idempotency_key=f"f{i}") for i in range(150)])
    trickled = 45

    async def trickle() -> None:  # 5 a second: more than its share, so it stays backlogged
        for i in range(trickled):
            await submit(service, fairness_key="trickle", idempotency_key=f"t{i}")
            await trio.sleep(0.2)

    async def serve(worker) -> None:  # about 4 tasks a second
        done = 0
        while done < trickled:
            held = await offered(worker)
            await held.start()
            await trio.sleep(0.25)
            await held.finish()
            done += held.task["idempotency_key"].startswith("t")

    async with connect_worker(service) as worker:
        await worker.capacity(1)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trickle)
            await serve(worker)
    offers = await trio.to_thread.run_sync(lambda: rows(
        db, "SELECT t.fairness_key FROM leases l JOIN tasks t ON t.task_id = l.task_id"
            " ORDER BY l.offered_at, l.lease_id"))
    keys = [k for (k,) in offers]
    first, last = keys.index("trickle"), len(keys) - 1 - keys[::-1].index("trickle")
    window = keys[first:last + 1]  # while both had work waiting
    n_flood, n_trickle = window.count("flood"), window.count("trickle")
    assert n_trickle == trickled
    # the stated bound |n_flood/1 - n_trickle/3| <= 1/1 + 1/3, times 3: |3 n_flood - n_trickle| <= 4,
    # over the window and over every stretch of it that starts where it does
    assert abs(3 * n_flood - n_trickle) <= 4, (n_flood, n_trickle)
    worst = max(abs(3 * window[:i].count("flood") - window[:i].count("trickle")) for i in range(len(window) + 1))
    assert worst <= 4, window
