"""Ride-along claims: while the queues are deep, a finish batch offers the next work for the slots it freed.

Each test runs on the real database through real sockets; the dispatcher's
and the batcher's counters say which path made an offer (a claim
transaction of the dispatcher's, or a claim inside the finish's batch).
The harness fails any offer beyond capacity, after a drain, or outside the
subscriptions, whenever it arrives.
"""

from __future__ import annotations

import trio

from sql_support import rows


def _pickup_order(db) -> list[str]:
    """The READY tasks of queue billing in pick-up order, as the database keeps them."""
    return [r[0] for r in rows(db, "SELECT task_id FROM tasks WHERE queue = 'billing' AND pick_state = 'READY'"
                                   " ORDER BY effective_at, task_id")]


async def _backlogged(service) -> None:
    with trio.fail_after(10):
        while not service.dispatcher.backlogged:
            await trio.sleep(0.01)


def _submit(client, first: int, end: int) -> list[dict]:
    """Tasks n = first .. end - 1 of queue billing, in one submit."""
    return client.submit_many([client.new_task("billing", "invoice.send", {"n": i}) for i in range(first, end)])


async def _full(service, connect, worker_token, client, *, tasks: int, capacity: int):
    """``tasks`` submitted, a worker holding ``capacity`` of them, the queue deep: (worker, its offers)."""
    _submit(client, 0, tasks)
    w = await connect(service, worker_token)
    await w.register(["billing"], capacity=capacity)
    held = [await w.expect_assign() for _ in range(capacity)]
    await _backlogged(service)
    return w, held


async def test_deep_queues_offers_ride_with_the_finish_and_cost_no_claim_transaction(
        start_service, connect, worker_token, client, db):
    service = await start_service(poll_interval=60)  # no poll passes: only what wakes the dispatcher runs
    dispatcher, batcher = service.dispatcher, service.batcher
    w, held = await _full(service, connect, worker_token, client, tasks=40, capacity=16)
    claims, riding = dispatcher.statistics()["claims"], batcher.statistics()
    expected = _pickup_order(db)[:6]
    refilled = []
    for h in held[:6]:
        await w.ok(w.start(h))
        await w.ok(w.finish(h))
        # The offer left right behind the finish's ack: it is the very next frame.
        frame = await w.recv()
        assert frame["type"] == "task.assign", frame
        refilled.append(frame["body"]["task"]["task_id"])
    after = batcher.statistics()
    assert dispatcher.statistics()["claims"] == claims  # no claim transaction of its own
    assert after["ride_along_claims"] - riding["ride_along_claims"] == 6
    assert after["ride_along_offers"] - riding["ride_along_offers"] == 6
    assert refilled == expected  # pick-up order holds

    assert len(w.live) == 16
    ack = await w.capacity_ok(16)
    assert ack["active_leases"] == 16 and not w.assigns_buffered()
    # Each ride-along claim settled: one left in flight would hold up every resume into the session.
    assert service.hub.get(w.session_id).inbox.claims() == []


async def test_scarce_work_goes_through_the_dispatcher_not_the_finish(start_service, connect, worker_token, client):
    service = await start_service(poll_interval=60)
    dispatcher, batcher = service.dispatcher, service.batcher
    _submit(client, 0, 8)
    w = await connect(service, worker_token)
    await w.register(["billing"], capacity=16)
    held = [await w.expect_assign() for _ in range(8)]  # the claim came back short: the queue is dry
    assert not dispatcher.backlogged
    later = _submit(client, 8, 12)
    claims, riding = dispatcher.statistics()["claims"], batcher.statistics()["ride_along_claims"]
    await w.ok(w.start(held[0]))
    await w.ok(w.finish(held[0]))  # the freed slot wakes a pass: it serves the ripe session
    got = [await w.expect_assign() for _ in range(4)]
    assert {h.task_id for h in got} == {t["task_id"] for t in later}
    assert batcher.statistics()["ride_along_claims"] == riding
    assert dispatcher.statistics()["claims"] > claims


async def test_two_sessions_share_scarce_work_in_rounds_after_a_deep_spell(start_service, connect, worker_token,
                                                                          client):
    """Once a ride-along claim comes back short, the deep spell is over and the fair rounds are back."""
    service = await start_service(poll_interval=60)
    dispatcher, batcher = service.dispatcher, service.batcher
    _submit(client, 0, 10)
    a = await connect(service, worker_token, name="a")
    await a.register(["billing"], capacity=8)
    held = [await a.expect_assign() for _ in range(8)]
    await _backlogged(service)
    riding = batcher.statistics()
    for h in held[:3]:  # two ride along; the third finds the queue dry
        await a.ok(a.start(h))
        await a.ok(a.finish(h))
    with trio.fail_after(10):
        while dispatcher.backlogged:
            await trio.sleep(0.01)
    after = batcher.statistics()
    assert after["ride_along_offers"] - riding["ride_along_offers"] == 2
    assert after["ride_along_claims"] - riding["ride_along_claims"] == 3
    # Scarce now: a burst is split between the two sessions by the dispatcher's rounds.
    b = await connect(service, worker_token, name="b")
    await b.register(["billing"], capacity=8)
    burst = _submit(client, 20, 28)
    ids = {t["task_id"] for t in burst}
    service.hub.wake()
    with trio.fail_after(10):
        while True:
            for w in (a, b):
                await w.capacity_ok(8)  # a round trip: what was pushed before is buffered now
            got = {f["body"]["task"]["task_id"]: w.name for w in (a, b) for f in w.assigns_buffered()}
            got = {task_id: name for task_id, name in got.items() if task_id in ids}
            if len(got) == len(ids):
                break
            await trio.sleep(0.01)
    per = {name: sum(1 for n in got.values() if n == name) for name in ("a", "b")}
    assert per == {"a": 1, "b": 7}, per  # a had 1 free slot and b 8: each got what it had room for
    assert batcher.statistics()["ride_along_claims"] == after["ride_along_claims"]


async def test_a_draining_session_gets_no_ride_along_offer(start_service, connect, worker_token, client):
    service = await start_service(poll_interval=60)
    batcher = service.batcher
    w, held = await _full(service, connect, worker_token, client, tasks=20, capacity=4)
    await w.capacity_ok(4, drain=True)
    riding = batcher.statistics()["ride_along_claims"]
    for h in held:
        await w.ok(w.start(h))
        await w.ok(w.finish(h))
    ack = await w.capacity_ok(4, drain=True)
    assert ack["active_leases"] == 0 and not w.assigns_buffered()
    assert batcher.statistics()["ride_along_claims"] == riding


async def test_a_keyed_permit_freed_by_the_finish_is_taken_in_the_same_transaction(start_service, connect,
                                                                                   worker_token, client):
    """The finish releases the key's permit; the ride-along claim, after it, takes the key's next task."""
    service = await start_service(poll_interval=60)
    batcher = service.batcher
    first = client.submit("billing", "invoice.send", {"n": 1}, concurrency_key="customer:7", concurrency_limit=1)
    second = client.submit("billing", "invoice.send", {"n": 2}, concurrency_key="customer:7", concurrency_limit=1)
    _submit(client, 10, 30)
    w = await connect(service, worker_token)
    await w.register(["billing"], capacity=2, concurrency_keys=True)
    held = [await w.expect_assign() for _ in range(2)]
    assert held[0].task_id == first["task_id"]  # the key's second task was set aside: the permit is taken
    assert held[1].task_id != second["task_id"]
    await _backlogged(service)
    riding = batcher.statistics()["ride_along_offers"]
    await w.ok(w.start(held[0]))
    await w.ok(w.finish(held[0]))
    frame = await w.recv()
    assert frame["type"] == "task.assign"
    assert frame["body"]["task"]["task_id"] == second["task_id"]  # older than the unkeyed work left
    assert int(frame["body"]["task"]["concurrency_token"]) != int(held[0].task["concurrency_token"])
    assert batcher.statistics()["ride_along_offers"] - riding == 1


async def test_a_lowered_capacity_is_not_refilled_and_does_not_end_the_deep_spell(start_service, connect,
                                                                                 worker_token, client):
    """Finishes refill only below the capacity the session declares now; room, not work, was short."""
    service = await start_service(poll_interval=60)
    dispatcher, batcher = service.dispatcher, service.batcher
    w, held = await _full(service, connect, worker_token, client, tasks=30, capacity=8)
    await w.capacity_ok(4)  # 8 held: no room until four have finished
    riding = batcher.statistics()["ride_along_offers"]
    for h in held[:5]:
        await w.ok(w.start(h))
        await w.ok(w.finish(h))
    assert (await w.expect_assign()).task_id not in {h.task_id for h in held}  # the fifth finish made room for one
    ack = await w.capacity_ok(4)
    assert ack["active_leases"] == 4 and not w.assigns_buffered()
    assert batcher.statistics()["ride_along_offers"] - riding == 1
    assert dispatcher.backlogged  # the claims that found no room said nothing about the queues
