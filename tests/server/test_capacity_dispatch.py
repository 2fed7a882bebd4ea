"""worker.capacity (sequence, stale, drain, bounds) and what the dispatcher sends.

"Nothing was sent" is never inferred from silence: a second, eligible session
takes the work, and since every offer is one committed transaction, a task
that session holds is a task the first one was not offered. (The harness
also fails any assign beyond capacity, while drained, or outside the
subscriptions, whenever it arrives.)
"""

from __future__ import annotations

import json

import pytest
import trio

from pulse_trio.store.engine.writer import connect as connect_db


async def test_sequence_applies_in_order_and_a_stale_frame_gets_the_current_state(start_service, connect,
                                                                                 worker_token):
    service = await start_service()
    w = await connect(service, worker_token)
    await w.register(["billing"])
    ack = await w.capacity_ok(2, sequence=1)
    assert (ack["sequence"], ack["capacity"], ack["drain"]) == ("1", 2, False)
    ack = await w.capacity_ok(5, sequence=7)  # gaps are fine: it only has to increase
    assert (ack["sequence"], ack["capacity"]) == ("7", 5)
    for stale in (7, 3, 1):
        ack = await w.capacity_ok(9, drain=True, sequence=stale)
        assert (ack["sequence"], ack["capacity"], ack["drain"]) == ("7", 5, False), stale
    ack = await w.capacity_ok(0, sequence=8)
    assert (ack["sequence"], ack["capacity"]) == ("8", 0)
    top = 18446744073709551615
    ack = await w.capacity_ok(3, sequence=top)
    assert ack["sequence"] == str(top)
    ack = await w.capacity_ok(4, sequence=top)
    assert (ack["sequence"], ack["capacity"]) == (str(top), 3)


@pytest.mark.parametrize("body", [
    {"sequence": "1", "capacity": 10001, "drain": False},
    {"sequence": "1", "capacity": -1, "drain": False},
    {"sequence": "1", "capacity": 1.0, "drain": False},
    {"sequence": "1", "capacity": 1e0, "drain": False},
    {"sequence": "1", "capacity": True, "drain": False},
    {"sequence": "1", "capacity": "1", "drain": False},
    {"sequence": "0", "capacity": 1, "drain": False},
    {"sequence": "01", "capacity": 1, "drain": False},
    {"sequence": 1, "capacity": 1, "drain": False},
    {"sequence": "18446744073709551616", "capacity": 1, "drain": False},
    {"sequence": "1", "capacity": 1},
    {"sequence": "1", "drain": False},
    {"capacity": 1, "drain": False},
    {"sequence": "1", "capacity": 1, "drain": False, "extra": 1},
    {"sequence": "1", "capacity": 1, "drain": 0},
])
async def test_capacity_out_of_bounds_is_invalid_frame_and_changes_nothing(start_service, connect, worker_token,
                                                                           body):
    service = await start_service()
    w = await connect(service, worker_token)
    await w.register(["billing"])
    frame = {"protocol_version": "1", "type": "worker.capacity", "id": "bad", "session_id": w.session_id,
             "body": body}
    text = json.dumps(frame)
    if body.get("capacity") == 1e0 and isinstance(body.get("capacity"), float):
        text = text.replace("1.0", "1e0")
    await w.send_text(text)
    await w.expect_error("invalid_frame", fatal=False, reply_to="bad")
    ack = await w.capacity_ok(10000, sequence=1)
    assert (ack["sequence"], ack["capacity"]) == ("1", 10000)


async def test_response_only_fields_in_a_request_are_invalid(start_service, connect, worker_token):
    service = await start_service()
    w = await connect(service, worker_token)
    await w.register(["billing"])
    for i, extra in enumerate(({"reply_to": ""}, {"error": None}, {"reply_to": "h1"})):
        frame = {**w.frame("worker.capacity", {"sequence": "1", "capacity": 1, "drain": False}, id=f"x{i}"),
                 **extra}
        await w.send_text(json.dumps(frame))
        await w.expect_error("invalid_frame", fatal=False, reply_to=f"x{i}")


async def test_capacity_zero_and_a_new_session_get_nothing(start_service, connect, worker_token, client):
    service = await start_service()
    idle = await connect(service, worker_token, name="idle")
    zero = await connect(service, worker_token, name="zero")
    await idle.register(["billing"])  # never declares capacity: starts at 0
    await zero.register(["billing"])
    await zero.capacity_ok(3)
    await zero.capacity_ok(0)
    task = client.submit("billing", "invoice.send", {})
    taker = await connect(service, worker_token, name="taker")
    await taker.register(["billing"], capacity=1)
    held = await taker.expect_assign()
    assert held.task_id == task["task_id"]
    for w in (idle, zero):  # a round trip: anything sent before the ack would be read first
        ack = await w.capacity_ok(0)
        assert ack["active_leases"] == 0
        assert not w.assigns_buffered() and not w.live


async def test_drain_stops_new_offers_and_keeps_leases_working(start_service, connect, worker_token, client):
    service = await start_service()
    w = await connect(service, worker_token, name="drainer")
    await w.register(["billing"], capacity=2)
    first = client.submit("billing", "invoice.send", {"n": 1})
    held = await w.expect_assign()
    assert held.task_id == first["task_id"]
    await w.ok(w.start(held))
    ack = await w.capacity_ok(2, drain=True)
    assert ack["drain"] is True and ack["active_leases"] == 1
    # Work submitted now goes to someone else.
    second = client.submit("billing", "invoice.send", {"n": 2})
    other = await connect(service, worker_token, name="other")
    await other.register(["billing"], capacity=1)
    assert (await other.expect_assign()).task_id == second["task_id"]
    # The drained session's lease still renews and finishes.
    await w.ok(w.renew(held))
    await w.ok(w.finish(held))
    ack = await w.capacity_ok(2, drain=True)
    assert ack["active_leases"] == 0 and not w.assigns_buffered()
    # drain off: dispatch resumes.
    third = client.submit("billing", "invoice.send", {"n": 3})
    ack = await w.capacity_ok(2, drain=False)
    assert ack["drain"] is False
    assert (await w.expect_assign()).task_id == third["task_id"]


async def test_capacity_is_never_exceeded(start_service, connect, worker_token, client):
    service = await start_service()
    w = await connect(service, worker_token, name="small")
    await w.register(["billing"], capacity=3)
    tasks = [client.submit("billing", "invoice.send", {"n": i})["task_id"] for i in range(10)]
    held = [await w.expect_assign() for _ in range(3)]
    big = await connect(service, worker_token, name="big")
    await big.register(["billing"], capacity=7)
    rest = [await big.expect_assign() for _ in range(7)]
    assert {h.task_id for h in held + rest} == set(tasks)
    ack = await w.capacity_ok(3)
    assert ack["active_leases"] == 3 and not w.assigns_buffered()
    # A finish frees exactly one slot.
    await w.ok(w.start(held[0]))
    await w.ok(w.finish(held[0]))
    extra = client.submit("billing", "invoice.send", {"n": 10})
    got = await w.expect_assign()
    assert got.task_id == extra["task_id"]
    # Lowering capacity below the held count: nothing new until below it.
    ack = await w.capacity_ok(1)
    assert ack["active_leases"] == 3
    await w.ok(w.start(held[1]))
    await w.ok(w.finish(held[1]))
    late = client.submit("billing", "invoice.send", {"n": 11})
    await big.ok(big.start(rest[0]))
    await big.ok(big.finish(rest[0]))  # the only free slot now is big's
    assert (await big.expect_assign()).task_id == late["task_id"]
    ack = await w.capacity_ok(1)
    assert ack["active_leases"] == 2 and not w.assigns_buffered()


async def test_subscriptions_and_kinds_decide_who_gets_what(start_service, connect, worker_token, client):
    service = await start_service()
    invoices = await connect(service, worker_token, name="invoices")
    await invoices.register({"billing": ["invoice.send", "invoice.void"]}, capacity=10)
    mail = await connect(service, worker_token, name="mail")
    await mail.register({"mail": None}, capacity=10)
    refund = client.submit("billing", "invoice.refund", {})
    report = client.submit("reports", "daily", {})
    letters = [client.submit("mail", kind, {})["task_id"] for kind in ("welcome", "reset", "digest")]
    send = client.submit("billing", "invoice.send", {})
    void = client.submit("billing", "invoice.void", {})
    got = {(await invoices.expect_assign()).task_id for _ in range(2)}
    assert got == {send["task_id"], void["task_id"]}
    assert {(await mail.expect_assign()).task_id for _ in range(3)} == set(letters)
    # The refund and the report match nobody: still READY. A worker that wants them gets them.
    for w in (invoices, mail):
        await w.capacity_ok(10)
        assert not w.assigns_buffered()
    assert client.get(refund["task_id"])["state"] == "READY"
    assert client.get(report["task_id"])["state"] == "READY"
    everything = await connect(service, worker_token, name="everything")
    await everything.register({"billing": None, "reports": None}, capacity=10)
    assert {(await everything.expect_assign()).task_id for _ in range(2)} == {refund["task_id"],
                                                                              report["task_id"]}


async def test_keyed_tasks_go_only_to_sessions_that_declared_concurrency_keys(start_service, connect,
                                                                              worker_token, client):
    service = await start_service()
    plain = await connect(service, worker_token, name="plain")
    await plain.register(["billing"], capacity=5, concurrency_keys=False)
    keyed = client.submit("billing", "invoice.send", {}, concurrency_key="customer:42", concurrency_limit=2)
    unkeyed = client.submit("billing", "invoice.send", {})
    assert (await plain.expect_assign()).task_id == unkeyed["task_id"]
    aware = await connect(service, worker_token, name="aware")
    await aware.register(["billing"], capacity=5, concurrency_keys=True)
    held = await aware.expect_assign()
    assert held.task_id == keyed["task_id"]
    assert held.task["concurrency_key"] == "customer:42" and int(held.task["concurrency_token"]) >= 1
    await plain.capacity_ok(5)
    assert not plain.assigns_buffered()


async def _settled(service) -> None:
    """Until the dispatcher has no pass running or asked for (within 10 s)."""
    with trio.fail_after(10):
        while not service.dispatcher.settled:
            await trio.sleep(0.005)


async def _holding_a_keyed_task(service, connect, worker_token, client):
    """A session of capacity 1 holding the first task of key ``customer:7`` (limit 1): (its task, session, offer)."""
    first = client.submit("billing", "invoice.send", {"n": 1}, concurrency_key="customer:7", concurrency_limit=1)
    holder = await connect(service, worker_token, name="holder")
    await holder.register(["billing"], capacity=1, concurrency_keys=True)
    held = await holder.expect_assign()
    assert held.task_id == first["task_id"]
    return first, holder, held


async def _offers_once_pushed(total: int, workers: tuple, *, capacity: int) -> tuple[int, ...]:
    """How many offers each worker holds once ``total`` have been pushed to them all.

    A capacity frame is a round trip: whatever was pushed before its ack is buffered by then.
    """
    with trio.fail_after(10):
        while sum(len(w.assigns_buffered()) for w in workers) < total:
            for w in workers:
                await w.capacity_ok(capacity)
    return tuple(len(w.assigns_buffered()) for w in workers)


async def test_the_dispatcher_fills_free_slots_fairly_across_sessions(start_service, connect, worker_token,
                                                                     client):
    service = await start_service()
    a = await connect(service, worker_token, name="a")
    b = await connect(service, worker_token, name="b")
    await a.register(["billing"], capacity=10)
    await b.register(["billing"], capacity=10)
    # A pass begun while only a was registered would have a claim alone, and all it can:
    # a submit that committed before that claim read the queue would all go to a.
    await _settled(service)
    new = [client.new_task("billing", "invoice.send", {"n": i}) for i in range(10)]
    client.submit_many(new)  # one commit: a single pass sees all ten
    counts = await _offers_once_pushed(10, (a, b), capacity=10)
    assert min(counts) >= 3, counts  # neither session took (nearly) everything


async def test_priority_orders_dispatch_within_a_queue(start_service, connect, worker_token, client):
    service = await start_service()
    low = client.submit("billing", "invoice.send", {"p": 0})
    high = client.submit("billing", "invoice.send", {"p": 9}, priority=9)
    w = await connect(service, worker_token)
    await w.register(["billing"], capacity=1)
    first = await w.expect_assign()
    assert first.task_id == high["task_id"] and first.task["priority"] == 9
    await w.ok(w.start(first))
    await w.ok(w.finish(first))
    second = await w.expect_assign()
    assert second.task_id == low["task_id"] and "priority" not in second.task


async def test_a_concurrency_limit_holds_back_the_second_task_of_a_key(start_service, connect, worker_token,
                                                                       client):
    service = await start_service()
    first = client.submit("billing", "invoice.send", {"n": 1}, concurrency_key="customer:7", concurrency_limit=1)
    second = client.submit("billing", "invoice.send", {"n": 2}, concurrency_key="customer:7", concurrency_limit=1)
    w = await connect(service, worker_token)
    await w.register(["billing"], capacity=5, concurrency_keys=True)
    held = await w.expect_assign()
    assert held.task_id == first["task_id"]
    await w.ok(w.start(held))
    ack = await w.capacity_ok(5)
    assert ack["active_leases"] == 1 and not w.assigns_buffered()
    assert client.get(second["task_id"])["state"] == "READY"
    await w.ok(w.finish(held))
    after = await w.expect_assign()
    assert after.task_id == second["task_id"]
    assert int(after.task["concurrency_token"]) != int(held.task["concurrency_token"])


async def test_a_finish_that_frees_a_keys_waiting_task_offers_it_here_at_once(start_service, connect,
                                                                                worker_token, client):
    """The task set aside behind its key competes again once the key's permit is released: that is new
    work, as a submit is, so the free slot of a session here below its refill mark takes it at once,
    not at the next poll (20 s here)."""
    service = await start_service(poll_interval=20)
    first, holder, held = await _holding_a_keyed_task(service, connect, worker_token, client)
    second = client.submit("billing", "invoice.send", {"n": 2}, concurrency_key="customer:7", concurrency_limit=1)
    client.submit_many([client.new_task("billing", "invoice.send", {"n": i}) for i in range(7)])
    busy = await connect(service, worker_token, name="busy")
    await busy.register(["billing"], capacity=8, concurrency_keys=True)  # meets the key at its limit, takes 7
    taken = [await busy.expect_assign() for _ in range(7)]
    assert second["task_id"] not in {h.task_id for h in taken}
    await holder.capacity_ok(0)  # the holder takes nothing more: only busy's last slot (below its mark) can
    await _settled(service)
    assert client.get(second["task_id"])["state"] == "READY"
    await holder.ok(holder.start(held))
    await holder.ok(holder.finish(held))
    after = await busy.expect_assign(timeout=3)  # well within the 20 s poll
    assert after.task_id == second["task_id"]


async def test_a_finish_whose_connection_closed_meanwhile_still_offers_the_keys_freed_task(
        start_service, connect, worker_token, client, db):
    """The wake for the key's freed task comes from the finish's batch, not from its connection: the holder
    sends its finish and goes, the finish commits after the connection closed (its ack is dropped), and
    the idle session still gets the task at once, not at the next poll (20 s here)."""
    service = await start_service(poll_interval=20)
    first, holder, held = await _holding_a_keyed_task(service, connect, worker_token, client)
    await holder.ok(holder.start(held))
    second = client.submit("billing", "invoice.send", {"n": 2}, concurrency_key="customer:7", concurrency_limit=1)
    idle = await connect(service, worker_token, name="idle")
    await idle.register(["billing"], capacity=1, concurrency_keys=True)  # meets the key at its limit
    await _settled(service)
    assert client.get(second["task_id"])["state"] == "READY" and not idle.assigns_buffered()
    session = holder.session_id
    blocker = connect_db(db)  # the finish waits on its lease until the connection is gone
    try:
        with blocker.cursor() as cur:
            cur.execute("SELECT lease_id FROM leases WHERE lease_id = %s FOR UPDATE", (held.lease_id,))
        await holder.send(holder.frame("task.finish", held.body(status="SUCCEEDED", result={})))
        await holder.drop()
        with trio.fail_after(10):
            while service.hub.get(session) is not None:
                await trio.sleep(0.005)
    finally:
        blocker.rollback()
        blocker.close()
    after = await idle.expect_assign(timeout=3)  # well within the 20 s poll
    assert after.task_id == second["task_id"]
    assert client.get(first["task_id"])["state"] == "SUCCEEDED"


async def test_many_idle_sessions_on_an_empty_queue_cost_one_probe_per_pass_not_a_claim_each(
        start_service, connect, worker_token, client):
    service = await start_service(poll_interval=60)  # only the explicit passes below run
    dispatcher = service.dispatcher
    workers = [await connect(service, worker_token, name=f"idle-{i}") for i in range(6)]
    for w in workers:
        await w.register(["billing"], capacity=2)
    await trio.sleep(0.5)  # the passes the capacity frames started are over
    before = dispatcher.statistics()
    assert await dispatcher.dispatch_pass() == 0
    after = dispatcher.statistics()
    assert (after["probes"] - before["probes"], after["claims"] - before["claims"]) == (1, 0)

    task = client.submit("billing", "invoice.send", {"n": 1})
    assert await dispatcher.dispatch_pass() == 1
    got = []
    with trio.fail_after(10):
        while not got:
            for w in workers:
                await w.capacity_ok(2)  # round trip: whatever was pushed before is now buffered
            got = [a for w in workers for a in w.assigns_buffered()]
    assert [a["body"]["task"]["task_id"] for a in got] == [task["task_id"]]


async def test_a_deep_queue_refills_a_busy_session_in_one_claim(start_service, connect, worker_token, client):
    """After a pass that filled every session with work left over, the next top-up is one claim of all free slots.

    (Slots that finishes free are refilled inside the finishes' own transactions then,
    tests/server/test_ride_along.py; new capacity goes through the dispatcher.)
    """
    service = await start_service(poll_interval=60)  # no poll passes: only what wakes the dispatcher runs
    dispatcher = service.dispatcher
    client.submit_many([client.new_task("billing", "invoice.send", {"n": i}) for i in range(60)])
    a = await connect(service, worker_token, name="a")
    b = await connect(service, worker_token, name="b")
    await a.register(["billing"], capacity=8)
    await b.register(["billing"], capacity=8)
    held = [await a.expect_assign() for _ in range(8)] + [await b.expect_assign() for _ in range(8)]
    with trio.fail_after(10):
        while not dispatcher.backlogged:
            await trio.sleep(0.01)
    before = dispatcher.statistics()["claims"]
    await a.capacity_ok(24)  # 16 free slots: rounds of a quarter would take several claims
    refilled = [await a.expect_assign() for _ in range(16)]
    assert len({h.task_id for h in refilled + held}) == 32
    assert dispatcher.statistics()["claims"] - before == 1


async def test_a_session_alone_in_a_pass_claims_all_its_free_slots_at_once(start_service, connect, worker_token,
                                                                           client):
    """Rounds share scarce work between sessions; a lone hungry session has nobody to share with."""
    service = await start_service(poll_interval=60)  # no poll passes: only what wakes the dispatcher runs
    dispatcher = service.dispatcher
    client.submit_many([client.new_task("billing", "invoice.send", {"n": i}) for i in range(40)])
    before = dispatcher.statistics()["claims"]
    w = await connect(service, worker_token)
    await w.register(["billing"], capacity=16)  # before: proportional rounds of 4, 3, 3, 2, ...
    held = [await w.expect_assign() for _ in range(16)]
    assert len({h.task_id for h in held}) == 16
    assert dispatcher.statistics()["claims"] - before == 1


@pytest.mark.parametrize("subscriptions", [
    (["billing"], ["billing"]),
    ({"billing": ["invoice.send"]}, {"billing": ["invoice.send", "invoice.void"]}),
    (["billing"], {"billing": ["invoice.send"]}),
], ids=["whole-queue", "by-kind", "mixed"])
async def test_work_enough_for_every_hungry_session_is_claimed_in_one_round(start_service, connect, worker_token,
                                                                           client, subscriptions, monkeypatch):
    """Rounds share scarce work; with more READY than all hungry sessions could take, each claims its slots at once.

    Slots filled together stay together: a session's slots cut into rounds of a quarter cycle as
    separate cohorts for the rest of a run (docs/performance.md). Scarce work still goes in rounds
    (test_the_dispatcher_fills_free_slots_fairly_across_sessions, and the next test).
    """
    service = await start_service(poll_interval=60)  # no poll passes: only what wakes the dispatcher runs
    dispatcher = service.dispatcher
    a = await connect(service, worker_token, name="a")
    b = await connect(service, worker_token, name="b")
    await a.register(subscriptions[0], capacity=8)
    await b.register(subscriptions[1], capacity=8)
    await trio.sleep(0.3)  # the passes the registrations started found nothing
    before = dispatcher.statistics()
    asked_apart: list[str] = []  # the question is asked in the first round's own transaction, not in one of its own
    run = dispatcher.store.run

    async def recording_run(fn, **kwargs):
        asked_apart.append(fn.__name__)
        return await run(fn, **kwargs)

    monkeypatch.setattr(dispatcher.store, "run", recording_run)
    client.submit_many([client.new_task("billing", "invoice.send", {"n": i}) for i in range(40)])  # one commit
    await a.capacity_ok(8)  # news: a pass with both sessions hungry
    held = [await a.expect_assign() for _ in range(8)] + [await b.expect_assign() for _ in range(8)]
    assert len({h.task_id for h in held}) == 16
    after = dispatcher.statistics()
    # One claim each (rounds of a quarter would take four each), after one question about depth.
    assert after["claims"] - before["claims"] == 2
    assert after["depth_probes"] - before["depth_probes"] == 1
    assert "sources_ready_at_least" not in asked_apart


async def test_a_queue_deep_only_in_kinds_nobody_takes_is_still_shared_in_rounds(start_service, connect,
                                                                                worker_token, client):
    """Forty READY tasks, but only twelve of the kind both sessions name: scarce for them, so rounds."""
    service = await start_service(poll_interval=60)
    dispatcher = service.dispatcher
    a = await connect(service, worker_token, name="a")
    b = await connect(service, worker_token, name="b")
    await a.register({"billing": ["invoice.send"]}, capacity=8)
    await b.register({"billing": ["invoice.send"]}, capacity=8)
    await trio.sleep(0.3)
    before = dispatcher.statistics()["claims"]
    client.submit_many([client.new_task("billing", "invoice.void", {"n": i}) for i in range(28)]
                       + [client.new_task("billing", "invoice.send", {"n": i}) for i in range(12)])
    await a.capacity_ok(8)
    counts = await _offers_once_pushed(12, (a, b), capacity=8)
    assert min(counts) >= 4, counts  # shared, not 8 and 4 by whoever claimed first
    assert dispatcher.statistics()["claims"] - before > 2


async def test_a_finish_that_frees_its_own_slot_below_the_refill_mark_takes_the_keys_task(start_service, connect,
                                                                                           worker_token, client):
    """The finishing session's own freed slot is the key's freed task's only taker, one slot below its refill
    mark: the wake for the freed work must come once that slot is counted free, not only from the batch
    (whose pass may run first and find no room), or the task waits for the next poll (20 s here)."""
    service = await start_service(poll_interval=20)
    first = client.submit("billing", "invoice.send", {"n": 1}, concurrency_key="customer:7", concurrency_limit=1)
    second = client.submit("billing", "invoice.send", {"n": 2}, concurrency_key="customer:7", concurrency_limit=1)
    client.submit_many([client.new_task("billing", "invoice.send", {"n": i}) for i in range(7)])
    holder = await connect(service, worker_token, name="holder")
    await holder.register(["billing"], capacity=12, concurrency_keys=True)  # comes up short: not backlogged
    got = [await holder.expect_assign() for _ in range(8)]
    assert second["task_id"] not in {h.task_id for h in got}
    (held,) = [h for h in got if h.task_id == first["task_id"]]
    await holder.capacity_ok(8)  # full; its refill mark is 2
    await _settled(service)
    assert not service.dispatcher.backlogged
    assert client.get(second["task_id"])["state"] == "READY"
    await holder.ok(holder.start(held))
    await holder.ok(holder.finish(held))
    after = await holder.expect_assign(timeout=3)  # well within the 20 s poll
    assert after.task_id == second["task_id"]
