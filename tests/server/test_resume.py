"""worker.resume: a reconnected worker takes its leases to a new session."""

from __future__ import annotations

import trio

from sql_support import INNODB_TRX_READ_GAP_S, LOCK_WAITS, rows

OTHER_SECRET = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE"
UNKNOWN_INSTANCE = "ins_01KBFEY3G08GKV6GQS8WWD954X"


async def _lock_waits(db) -> int:
    """Transactions of the test database's server waiting for a row lock now (after the view's read gap, so
    that a caller's loop of reads lets it refresh)."""
    await trio.sleep(INNODB_TRX_READ_GAP_S)
    (count,) = await trio.to_thread.run_sync(lambda: rows(db, LOCK_WAITS))
    return int(count[0])


async def running(service, connect, token, client, *, name="old", start=True, queues=("billing",), **submit):
    w = await connect(service, token, name=name)
    await w.register(list(queues), capacity=1, concurrency_keys=bool(submit.get("concurrency_key")))
    client.submit(queues[0], "invoice.send", {}, **submit)
    held = await w.expect_assign()
    if start:
        await w.ok(w.start(held))
    return w, held


async def test_resume_after_a_dropped_connection_moves_the_lease(start_service, connect, worker_token, client):
    service = await start_service()
    old, held = await running(service, connect, worker_token, client)
    before = held.revision
    await old.drop()
    new = await connect(service, worker_token, name="new")
    await new.register(["billing"], capacity=1)
    assert new.epoch > old.epoch
    lease = await new.ok(new.resume(old, held))
    assert lease["state"] == "RUNNING" and int(lease["revision"]) == before + 1
    assert lease["epoch"] == str(new.epoch) and "lease_secret" not in lease
    moved = new.live[held.lease_id]
    ack = await new.capacity_ok(1)
    assert ack["active_leases"] == 1  # it counts against the new session's capacity
    renewed = await new.ok(new.renew(moved))
    assert renewed["lease"]["epoch"] == str(new.epoch)
    await new.ok(new.finish(moved))
    shown = client.get(held.task_id)
    assert shown["state"] == "SUCCEEDED" and shown["attempt"] == 1


async def test_an_unstarted_offer_can_be_resumed_and_then_started(start_service, connect, worker_token, client):
    service = await start_service()
    old, held = await running(service, connect, worker_token, client, start=False)
    await old.drop()
    new = await connect(service, worker_token, name="new")
    await new.register(["billing"], capacity=1)
    lease = await new.ok(new.resume(old, held))
    assert lease["state"] == "OFFERED"
    moved = new.live[held.lease_id]
    started = await new.ok(new.start(moved))
    assert started["lease"]["state"] == "RUNNING"


async def test_the_old_session_is_refused_with_lease_not_owned(start_service, connect, worker_token, client):
    service = await start_service()
    old, held = await running(service, connect, worker_token, client)
    stale = held.revision
    new = await connect(service, worker_token, name="new")  # the old connection is still open (half-dead)
    await new.register(["billing"], capacity=1)
    await new.ok(new.resume(old, held))
    old.assert_error(await old.renew(held, revision=stale), "lease_not_owned")
    old.assert_error(await old.finish(held, revision=stale), "lease_not_owned")
    moved = new.live[held.lease_id]
    old.assert_error(await old.renew(held, revision=moved.revision), "lease_not_owned")
    # Taking it back from the newer session is refused: the owner's epoch is not older.
    old.assert_error(await old.resume(new, moved), "lease_not_owned")
    # The new session cannot resume what it already holds either.
    new.assert_error(await new.resume(new, moved), "lease_not_owned")
    # And the old session's count went down: it gets new work again.
    task = client.submit("billing", "invoice.send", {})
    old.forget(held)
    assert (await old.expect_assign()).task_id == task["task_id"]
    await new.ok(new.finish(moved))


async def test_a_resume_waits_for_a_claim_that_took_the_session_count_without_it(
        start_service, connect, worker_token, client):
    """A claim counts its session's leases when it is built (``assign(held=...)``). A resume
    committed before that claim runs would not be in the count, and the claim could offer
    the slot the resume took (seen as a capacity-1 session holding two leases): the resume
    waits until the claim has settled."""
    service = await start_service()
    old, held = await running(service, connect, worker_token, client)
    await old.drop()
    new = await connect(service, worker_token, name="new")
    await new.register(["billing"], capacity=1)
    session = service.hub.get(new.session_id)
    claim = session.inbox.claim_begun()  # what the dispatcher does when it builds a claim with the count
    replies = []

    async def resume_now():
        replies.append(await new.resume(old, held))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(resume_now)
        with trio.fail_after(10):
            while claim.statistics().tasks_waiting == 0:
                await trio.sleep(0.01)
        # Waiting: counted already (a claim built now leaves the slot alone), not yet run.
        assert not replies and session.active_leases == 1 and not session.held_leases()
        assert session.free_slots == 0
        session.inbox.claim_settled(claim)
    assert replies[0]["type"] == "ack", replies[0]
    lease = replies[0]["body"]
    assert lease["state"] == "RUNNING" and session.held_leases() == {held.lease_id}


async def test_wrong_secrets_are_lease_not_found(start_service, connect, worker_token, client):
    service = await start_service()
    old, held = await running(service, connect, worker_token, client)
    await old.drop()
    new = await connect(service, worker_token, name="new")
    await new.register(["billing"], capacity=1)
    refusals = [
        await new.resume(old, held, instance_secret=OTHER_SECRET),
        await new.resume(old, held, lease_secret=OTHER_SECRET),
        await new.resume(old, held, instance_secret=new.instance_secret),  # someone else's secret
        await new.resume({"instance_id": UNKNOWN_INSTANCE, "instance_secret": old.instance_secret}, held),
    ]
    for reply in refusals:
        error = new.assert_error(reply, "lease_not_found")
        assert "secret" not in error["message"].split("does not match")[-1]  # no oracle beyond the code
    # Someone else's identity with the right lease secret: that instance never owned it.
    new.assert_error(await new.resume(new, held), "lease_not_owned")
    await new.ok(new.resume(old, held))


async def test_resume_needs_the_queue_and_the_key_declaration(start_service, connect, worker_token, client):
    service = await start_service()
    old, held = await running(service, connect, worker_token, client)
    keyed_old, keyed = await running(service, connect, worker_token, client, name="keyed", queues=("mail",),
                                     concurrency_key="customer:1")
    await old.drop()
    await keyed_old.drop()
    other_queue = await connect(service, worker_token, name="mail-only")
    await other_queue.register(["mail"], capacity=5)
    reply = await other_queue.resume(old, held)
    other_queue.assert_error(reply, "permission_denied", fatal=False)
    other_queue.assert_error(await other_queue.resume(keyed_old, keyed), "concurrency_keys_not_declared")
    assert (await other_queue.capacity_ok(5))["capacity"] == 5  # non-fatal: the session goes on
    kinds = await connect(service, worker_token, name="other-kind")
    await kinds.register({"billing": ["invoice.void"]}, capacity=1)
    kinds.assert_error(await kinds.resume(old, held), "permission_denied", fatal=False)
    right = await connect(service, worker_token, name="right")
    await right.register(["billing", "mail"], capacity=5, concurrency_keys=True)
    await right.ok(right.resume(old, held))
    await right.ok(right.resume(keyed_old, keyed))


async def test_resume_of_an_expired_or_finished_lease_is_refused(start_service, connect, worker_token, client):
    service = await start_service(lease_ttl=0.5)
    old, held = await running(service, connect, worker_token, client)
    await old.drop()
    with trio.fail_after(10):
        while client.get(held.task_id)["state"] == "RUNNING":
            await trio.sleep(0.05)
    new = await connect(service, worker_token, name="new")
    await new.register(["billing"], capacity=1)
    new.assert_error(await new.resume(old, held), "lease_expired")


async def test_resume_of_a_finished_lease_is_refused(start_service, connect, worker_token, client):
    service = await start_service()
    old, held = await running(service, connect, worker_token, client)
    await old.ok(old.finish(held))
    new = await connect(service, worker_token, name="new")
    await new.register(["billing"], capacity=1)
    reply = await new.resume(old, held)
    # Not lapsed, not revoked: the lease is past the only states resume leaves (docs: start twice).
    new.assert_error(reply, "invalid_transition")


async def test_resume_of_a_cancelled_offer_is_task_cancelled(start_service, connect, worker_token, client):
    service = await start_service()
    old, held = await running(service, connect, worker_token, client, start=False)
    client.cancel(held.task_id, reason="operator")
    await old.drop()
    new = await connect(service, worker_token, name="new")
    await new.register(["billing"], capacity=1)
    new.assert_error(await new.resume(old, held), "task_cancelled")


async def test_a_resumed_lease_fills_the_new_sessions_capacity(start_service, connect, worker_token, client):
    service = await start_service()
    old, held = await running(service, connect, worker_token, client)
    await old.drop()
    new = await connect(service, worker_token, name="new")
    await new.register(["billing"], capacity=1)
    await new.ok(new.resume(old, held))
    task = client.submit("billing", "invoice.send", {})
    spare = await connect(service, worker_token, name="spare")
    await spare.register(["billing"], capacity=1)
    assert (await spare.expect_assign()).task_id == task["task_id"]
    assert (await new.capacity_ok(1))["active_leases"] == 1 and not new.assigns_buffered()


async def test_a_cancel_saved_while_disconnected_is_pushed_to_the_resuming_session(start_service, connect,
                                                                                  worker_token, client):
    service = await start_service()
    old = await connect(service, worker_token, name="old")
    await old.register(["billing"], capacity=1, cancellation_notifications=True)
    client.submit("billing", "invoice.send", {})
    held = await old.expect_assign()
    await old.ok(old.start(held))
    await old.drop()
    client.cancel(held.task_id, reason="operator")
    new = await connect(service, worker_token, name="new")
    await new.register(["billing"], capacity=1, cancellation_notifications=True)
    lease = await new.ok(new.resume(old, held))
    assert "cancel_requested_at" in lease
    notice = await new.expect_cancel()
    assert (notice["task_id"], notice["lease_id"]) == (held.task_id, held.lease_id)
    await new.ok(new.finish(new.live[held.lease_id], "CANCELLED", error_code="cancelled"))
    assert client.get(held.task_id)["state"] == "CANCELLED"


async def test_replays_after_a_reconnect_get_receipts_never_execution_rights(start_service, connect, worker_token,
                                                                            client):
    """docs/protocol.md §4.5: the ack was lost with the connection; the same command again gets the stored receipt."""
    service = await start_service()
    old, held = await running(service, connect, worker_token, client, start=False)
    first_start = await old.ok(old.start(held, revision=1))
    await old.drop()
    new = await connect(service, worker_token, name="new")
    await new.register(["billing"], capacity=1)
    await new.ok(new.resume(old, held))
    moved = new.live[held.lease_id]
    # The start, replayed from the new session that now holds the lease: receipt, plus the current lease.
    replay = await new.ok(new.start(moved, revision=1))
    assert replay["receipt"] == {**first_start["receipt"], "duplicate": True}
    assert replay["lease"]["revision"] == str(moved.revision) and replay["lease"]["epoch"] == str(new.epoch)
    final = moved.revision
    done = await new.ok(new.finish(moved, result={"v": 1}))
    await new.drop()
    # A third connection replays the finish: the receipt again, and no lease (the right has ended).
    third = await connect(service, worker_token, name="third")
    await third.register(["billing"], capacity=1)
    again = await third.ok(third.request("task.finish", moved.body(final, status="SUCCEEDED", result={"v": 1})))
    assert again["receipt"] == {**done["receipt"], "duplicate": True} and "lease" not in again
    third.assert_error(await third.request("task.finish", moved.body(final, status="SUCCEEDED",
                                                                        result={"v": 2})), "revision_conflict")


async def test_the_old_session_replaying_after_the_move_gets_the_receipt_without_a_lease(start_service, connect,
                                                                                         worker_token, client):
    service = await start_service()
    old, held = await running(service, connect, worker_token, client, start=False)
    first = await old.ok(old.start(held, revision=1))
    new = await connect(service, worker_token, name="new")
    await new.register(["billing"], capacity=1)
    await new.ok(new.resume(old, held))
    replay = await old.ok(old.start(held, revision=1))
    assert replay["receipt"] == {**first["receipt"], "duplicate": True} and "lease" not in replay


async def test_a_drain_committed_while_a_resume_waits_for_the_lease_still_follows_the_worker(
        start_service, connect, worker_token, client, db):
    """The drain and the resume meet on the previous instance's row: whichever commits first, the outcome is
    a serial one. Drain first: the resuming session inherits it. Resume first: the drain finds the lease
    gone from the drained instance. Another connection holds the lease row meanwhile."""
    from pulse_trio.store.engine.writer import connect as db_connect

    service = await start_service()
    old, held = await running(service, connect, worker_token, client)
    new = await connect(service, worker_token, name="new")
    await new.register(["billing"], capacity=1)

    holder = await trio.to_thread.run_sync(db_connect, db)
    replies: list = []
    drains: list = []
    try:
        await trio.to_thread.run_sync(holder.cursor().execute,
                                      "SELECT lease_id FROM leases WHERE lease_id = %s FOR UPDATE", (held.lease_id,))
        async with trio.open_nursery() as nursery:

            async def resume():
                replies.append(await new.resume(old, held))

            async def drain():
                drains.append(await trio.to_thread.run_sync(client.drain, old.instance_id))

            nursery.start_soon(resume)
            with trio.fail_after(10):  # the resume waits for the lease
                while not await _lock_waits(db):
                    await trio.sleep(0.01)
            nursery.start_soon(drain)
            with trio.move_on_after(2):  # the drain commits, or waits on the resume
                while not drains and await _lock_waits(db) < 2:
                    await trio.sleep(0.01)
            await trio.to_thread.run_sync(holder.rollback)
    finally:
        await trio.to_thread.run_sync(holder.close)
    assert replies[0]["type"] == "ack", replies[0]
    ack = await new.capacity_ok(1)
    assert ack["drain"] is True or drains[0]["active_leases"] == 0, (drains[0], ack)


async def test_a_refused_resume_gives_its_slot_back_to_a_pass_at_once(start_service, connect, worker_token, client,
                                                                      token_factory, db):
    """A resume counts its lease in its session before it commits, so a pass that runs while it waits
    leaves that slot alone. Refused, the resume gives the slot back: the READY work that pass skipped is
    offered then, not at the next poll (a long one here)."""
    from http_support import Http
    from pulse_trio.store.engine.writer import connect as db_connect

    service = await start_service(poll_interval=5)
    http, producer = Http(service.http_port), token_factory("producer", ["billing"])
    old = await connect(service, worker_token, name="old")
    await old.register(["billing"], capacity=1)
    first = await http.post("/v1/tasks", token=producer, json_body={"queue": "billing", "kind": "invoice.send"})
    assert first.status == 201, first.body
    held = await old.expect_assign()
    new = await connect(service, worker_token, name="new")
    await new.register(["billing"], capacity=1)

    holder = await trio.to_thread.run_sync(db_connect, db)
    replies: list = []
    try:
        await trio.to_thread.run_sync(holder.cursor().execute,
                                      "SELECT lease_id FROM leases WHERE lease_id = %s FOR UPDATE", (held.lease_id,))
        async with trio.open_nursery() as nursery:

            async def resume():  # a wrong lease secret: refused once it has the lease row
                replies.append(await new.resume(old, held, lease_secret=OTHER_SECRET))

            nursery.start_soon(resume)
            with trio.fail_after(10):
                while not await _lock_waits(db):
                    await trio.sleep(0.01)
            # Work arrives while the resume holds the session's only slot: the pass it wakes skips the session.
            second = await http.post("/v1/tasks", token=producer, json_body={"queue": "billing", "kind": "x"})
            assert second.status == 201, second.body
            with trio.fail_after(10):
                while not service.dispatcher.settled:
                    await trio.sleep(0.01)
            assert not new.assigns_buffered()
            await trio.to_thread.run_sync(holder.rollback)
    finally:
        await trio.to_thread.run_sync(holder.close)
    new.assert_error(replies[0], "lease_not_found")
    offered = await new.expect_assign(timeout=2)  # well before the 5 s poll
    assert offered.task_id == second.json()["task_id"]


async def test_a_lease_moved_away_frees_its_slot_there_as_a_finish_does(start_service, connect, worker_token, client,
                                                                        token_factory):
    """A resume that moves a lease away from a session here frees its slot there as a finish does, not as
    news: the previous connection is most likely the one its worker just left, so a pass tops that session
    up once it reaches its refill mark (docs/priority-and-fairness.md §3-§4), and the poll (long here) does
    the rest."""
    from http_support import Http

    service = await start_service(poll_interval=30)
    http, producer = Http(service.http_port), token_factory("producer", ["billing"])
    old = await connect(service, worker_token, name="old")
    await old.register(["billing"], capacity=8)  # its refill mark: 2 free slots
    for n in range(8):
        reply = await http.post("/v1/tasks", token=producer, json_body={"queue": "billing", "kind": "invoice.send",
                                                                        "payload": n})
        assert reply.status == 201, reply.body
    leases = [await old.expect_assign() for _ in range(8)]
    waiting = client.submit("billing", "report.build", {})  # READY; the new session does not take its kind
    new = await connect(service, worker_token, name="new")
    await new.register({"billing": ["invoice.send"]}, capacity=2)

    async def settled() -> None:
        with trio.fail_after(10):
            while not service.dispatcher.settled:
                await trio.sleep(0.01)

    await new.ok(new.resume(old, leases[0]))
    old.forget(leases[0])
    await settled()
    assert client.get(waiting["task_id"])["state"] == "READY"  # one free slot, below the mark: not news
    await new.ok(new.resume(old, leases[1]))
    old.forget(leases[1])
    assert (await old.expect_assign(timeout=5)).task_id == waiting["task_id"]  # at the mark: topped up


async def test_a_resume_that_inherits_an_operators_drain_drains_the_live_session_at_once(
        start_service, connect, worker_token, client):
    """The drain the resume copies into the database holds the live session too, as soon as it is acked:
    no free slot for the dispatcher or the hub's statistics until the worker's next capacity frame."""
    service = await start_service()
    old, held = await running(service, connect, worker_token, client)
    await trio.to_thread.run_sync(client.drain, old.instance_id)  # through the database, as elsewhere
    await old.drop()
    new = await connect(service, worker_token, name="new")
    await new.register(["billing"], capacity=4)  # declared before its resumes: four free slots
    await new.ok(new.resume(old, held))
    session = service.hub.get(new.session_id)
    assert session.drain and session.free_slots == 0
    assert service.hub.statistics()["free_slots"] == 0
