"""Only a connection's own tasks change its session; everyone else posts to its inbox.

On the real database through real sockets. The ``session_owners`` fixture
(``ownership_support.py``, autouse in this folder and in tests/scenarios)
records the Trio task behind every state-changing call on a live session
and fails a test in which any of them ran elsewhere. The first test shows
that it does; the others take each path by which another task has news
for a session (the dispatcher's offers, a timer's lapse, reconciliation, a
cancel notice, an operator's drain, a resume on another connection, the
shutdown, a revoked token) and check that the news arrived and was applied by the
connection's results task.
"""

from __future__ import annotations

import trio

import harness
from http_support import Http
from sql_support import rows


async def _until(predicate, what: str, timeout: float = 10) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)


async def _registered(service, connect, worker_token, *, capacity: int, name: str = "worker", **hello):
    w = await connect(service, worker_token, name=name)
    await w.register(["billing"], capacity=capacity, **hello)
    return w, service.hub.get(w.session_id)


async def test_the_check_catches_a_task_that_is_not_the_connections_own(start_service, connect, worker_token,
                                                                        session_owners):
    service = await start_service()
    _, session = await _registered(service, connect, worker_token, capacity=1)
    assert not session_owners.violations
    session._drain_hinted()  # the test's task is not the connection's
    session.protocol.operator_drained()
    session.capacity = 5
    names = [v.split(" of session", 1)[0] for v in session_owners.violations]
    assert names == ["_drain_hinted", "protocol.operator_drained", "protocol.operator_drained", "set capacity"], names
    # Reads are free for all, and the calls above are recorded with their task.
    assert session.free_slots == 0 and session.held_leases() == frozenset()
    assert session_owners.roles("_drain_hinted", session) == ["other: " + trio.lowlevel.current_task().name]
    session_owners.violations.clear()  # seen: the rest of the test is held to the rule again


async def test_the_dispatchers_offers_count_at_once_and_the_connection_pushes_them(
        start_service, connect, worker_token, client, session_owners):
    service = await start_service(poll_interval=60)  # only the explicit pass below offers
    w, session = await _registered(service, connect, worker_token, capacity=2)
    await trio.sleep(0.3)  # the pass the capacity frame started found nothing
    client.submit_many([client.new_task("billing", "invoice.send", {"n": i}) for i in range(2)])
    assert await service.dispatcher.dispatch_pass() == 2  # run by this test's task: it may only post
    # Posted, not yet applied: they count already, so no claim built now over-offers.
    assert session.held_leases() == frozenset()
    assert (session.active_leases, session.free_slots, session.inbox.leases_posted) == (2, 0, 2)
    assert session not in service.hub.hungry()
    offers = [await w.expect_assign() for _ in range(2)]
    assert session.held_leases() == {o.lease_id for o in offers} and session.inbox.leases_posted == 0
    assert session_owners.roles("_offers_arrived", session) == ["results"]
    assert session_owners.roles("protocol.assign", session) == ["results", "results"]


async def test_a_dispatcher_offer_for_a_connection_gone_meanwhile_lapses_in_the_database(
        start_service, connect, worker_token, client, db, monkeypatch):
    """The claim commits while the connection lives; it has gone when the offers are posted: the closed
    inbox drops them, and the offer lapses after the start timeout, costing no attempt."""
    service = await start_service(start_timeout=0.3, poll_interval=60)
    w, session = await _registered(service, connect, worker_token, capacity=1)
    await trio.sleep(0.3)
    dispatcher = service.dispatcher
    committed, go_on = trio.Event(), trio.Event()
    run_claims = dispatcher._run_claims

    async def held_back(calls, hungry, first=None):
        results = await run_claims(calls, hungry, first)
        committed.set()
        await go_on.wait()
        return results

    monkeypatch.setattr(dispatcher, "_run_claims", held_back)
    task = client.submit("billing", "invoice.send", {"n": 1})
    async with trio.open_nursery() as nursery:
        passed = []

        async def pass_():
            passed.append(await dispatcher.dispatch_pass())

        nursery.start_soon(pass_)
        with trio.fail_after(10):
            await committed.wait()
        [(lease_id, owner, state)] = rows(db, "SELECT lease_id, owner_session_id, state FROM leases"
                                              " WHERE task_id = %s", (task["task_id"],))
        assert (owner, state) == (session.session_id, "OFFERED")
        await w.drop()
        await _until(lambda: session.inbox.closed, "the session released")
        go_on.set()
    assert passed == [1]
    assert session.inbox.leases_posted == 0 and session.held_leases() == frozenset()  # dropped, not counted
    monkeypatch.undo()
    await _until(lambda: rows(db, "SELECT state FROM leases WHERE lease_id = %s", (lease_id,)) != [("OFFERED",)],
                 "the offer lapsed")
    other, _ = await _registered(service, connect, worker_token, capacity=1, name="other")
    again = await other.expect_assign()
    assert again.task_id == task["task_id"] and again.lease_id != lease_id
    assert again.task["attempt"] == 1  # the lapsed offer cost no attempt


async def test_a_lapsed_offer_leaves_the_sessions_count_through_its_own_task(
        start_service, connect, worker_token, client, session_owners):
    service = await start_service(start_timeout=0.3)
    w, session = await _registered(service, connect, worker_token, capacity=1)
    task = client.submit("billing", "invoice.send", {"n": 1})
    held = await w.expect_assign()
    assert session.held_leases() == {held.lease_id}
    w.forget(held)  # never started: a timer lapses it
    again = await w.expect_assign()  # the slot came free, so the task came back
    assert again.task_id == task["task_id"] and session.held_leases() == {again.lease_id}
    assert session_owners.roles("_ended_elsewhere", session)[:1] == ["results"]
    assert set(session_owners.roles("_ended_elsewhere", session)) == {"results"}


async def test_reconciliation_is_applied_by_the_connections_own_task(
        start_service, connect, worker_token, client, session_owners):
    """An offer revoked through the database (no process told): the timers' reconciliation frees the slot."""
    service = await start_service()
    w, session = await _registered(service, connect, worker_token, capacity=1)
    first = client.submit("billing", "invoice.send", {"n": 1})
    held = await w.expect_assign()
    second = client.submit("billing", "invoice.send", {"n": 2})
    client.cancel(first["task_id"], reason="operator")
    w.forget(held)
    got = await w.expect_assign()
    assert got.task_id == second["task_id"] and session.held_leases() == {got.lease_id}
    roles = session_owners.roles("_reconcile", session)
    assert roles and set(roles) == {"results"}, roles


async def test_a_cancel_notice_reaches_the_worker_through_the_connections_own_task(
        start_service, connect, worker_token, client, session_owners):
    service = await start_service()
    w, session = await _registered(service, connect, worker_token, capacity=1, cancellation_notifications=True)
    task = client.submit("billing", "invoice.send", {"n": 1})
    held = await w.expect_assign()
    await w.ok(w.start(held))
    client.cancel(task["task_id"], reason="operator")
    notice = await w.expect_cancel()
    assert (notice["task_id"], notice["lease_id"]) == (held.task_id, held.lease_id)
    assert session_owners.roles("_notify_cancel", session) == ["results"]
    assert session_owners.roles("protocol.cancel", session) == ["results"]


async def test_an_operators_drain_closes_the_slots_at_once_and_the_connection_applies_it(
        start_service, connect, worker_token, client, token_factory, session_owners):
    service = await start_service()
    w, session = await _registered(service, connect, worker_token, capacity=2)
    # The HTTP side's hint, posted by this test's task: the free slots close before it is applied.
    service.instance.drain_hint(session.session_id)
    assert session.inbox.drain_posted and not session.drain
    assert session.free_slots == 0 and session not in service.hub.hungry()
    await _until(lambda: session.drain, "the drain applied")
    assert not session.inbox.drain_posted and session.free_slots == 0
    assert session_owners.roles("_drain_hinted", session) == ["results"]

    # Through the HTTP API, as an operator does it: the worker gets no more offers.
    other, drained = await _registered(service, connect, worker_token, capacity=2, name="other")
    reply = await Http(service.http_port).post(f"/v1/workers/{other.instance_id}/drain",
                                               token=token_factory("operator"))
    assert reply.status == 200 and reply.json()["drain"] is True
    await _until(lambda: drained.drain, "the drain applied")
    assert session_owners.roles("_drain_hinted", drained) == ["results"]
    client.submit("billing", "invoice.send", {"n": 1})
    with trio.move_on_after(0.5):
        frame = await other.recv()
        raise AssertionError(f"a drained session was offered work: {frame}")


async def test_a_resume_on_another_connection_frees_the_previous_sessions_slot_through_its_own_task(
        start_service, connect, worker_token, client, session_owners):
    service = await start_service()
    old, previous = await _registered(service, connect, worker_token, capacity=1, name="old")
    client.submit("billing", "invoice.send", {"n": 1})
    held = await old.expect_assign()
    await old.ok(old.start(held))
    new, session = await _registered(service, connect, worker_token, capacity=1, name="new")
    await new.ok(new.resume(old, held))  # the old connection is still open here
    assert session.held_leases() == {held.lease_id}
    old.forget(held)
    task = client.submit("billing", "invoice.send", {"n": 2})
    assert (await old.expect_assign()).task_id == task["task_id"]  # its count went down
    assert session_owners.roles("_ended_elsewhere", previous) == ["results"]
    await new.ok(new.finish(new.live[held.lease_id]))


async def test_the_shutdown_is_sent_by_the_connections_own_task(start_service, connect, worker_token,
                                                               session_owners):
    service = await start_service()
    w, session = await _registered(service, connect, worker_token, capacity=1)
    service.stop()
    await w.expect_error("server_shutting_down", fatal=True, reply_to=harness.ABSENT)
    assert session_owners.roles("_shutdown", session) == ["results"]
    assert session_owners.roles("protocol.shutdown", session) == ["results"]


async def test_the_end_of_a_revoked_tokens_session_is_sent_by_the_connections_own_task(
        start_service, connect, worker_token, session_owners, revoke):
    service = await start_service()
    w, session = await _registered(service, connect, worker_token, capacity=1)
    revoke(worker_token)  # the timers find it at their next re-check and post it to the inbox
    await w.expect_error("permission_denied", fatal=True, reply_to=harness.ABSENT)
    assert session_owners.roles("_token_revoked", session) == ["results"]
    assert session_owners.roles("protocol.fail", session) == ["results"]
