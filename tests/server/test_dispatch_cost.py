"""What a dispatch pass costs follows the sessions that can take work, not the sessions connected.

The hub files each session as hungry (a free slot), per queue, as its
numbers change; a pass visits only those. The claim takes the session's
lease count from this process (``assign(held=...)``), which keeps it at
or above the database's: leases that end elsewhere are forgotten by the
timers' reconciliation, and only then is the slot offered again.
"""

from __future__ import annotations

import trio


def _ids(sessions) -> set[str]:
    return {s.session_id for s in sessions}


async def test_a_pass_visits_only_the_hungry_sessions(start_service, connect, worker_token, client):
    service = await start_service(poll_interval=60)  # only the explicit passes below run
    hub, dispatcher = service.hub, service.dispatcher
    full = [await connect(service, worker_token, name=f"full-{i}") for i in range(8)]
    for w in full:
        await w.register(["billing"])  # capacity 0: never hungry
    idle = [await connect(service, worker_token, name=f"idle-{i}") for i in range(3)]
    for w in idle:
        await w.register(["reports"], capacity=2)  # hungry, but nothing is ever submitted to reports
    mail = await connect(service, worker_token, name="mail")
    await mail.register(["mail"], capacity=2)
    billing = await connect(service, worker_token, name="billing")
    await billing.register(["billing"], capacity=2)
    await trio.sleep(0.5)  # the passes the capacity frames started are over
    assert len(hub) == 13
    assert _ids(hub.hungry()) == {mail.session_id, billing.session_id} | _ids(idle)
    assert _ids(hub.hungry(queues=["billing"])) == {billing.session_id}
    assert hub.hungry_queues() == ["billing", "mail", "reports"]

    before = dispatcher.statistics()
    task = client.submit("billing", "invoice.send", {"n": 1})
    assert await dispatcher.dispatch_pass() == 1
    after = dispatcher.statistics()
    # One probe, then one claim by the one hungry session on the queue with work:
    # neither the full sessions nor the hungry ones on empty queues are visited.
    assert (after["probes"] - before["probes"], after["claims"] - before["claims"]) == (1, 1)
    assert after["visited"] - before["visited"] == 1
    first = await billing.expect_assign()
    assert first.task_id == task["task_id"]

    client.submit("billing", "invoice.send", {"n": 2})
    assert await dispatcher.dispatch_pass() == 1
    second = await billing.expect_assign()
    assert billing.session_id not in _ids(hub.hungry()), "a full session leaves the hungry set"
    await billing.ok(billing.start(second))
    await billing.ok(billing.finish(second))
    assert _ids(hub.hungry(queues=["billing"])) == {billing.session_id}, "a finish brings it back"
    assert billing.session_id in _ids(hub.busy())


async def test_a_lease_ended_elsewhere_frees_its_slot_once_reconciled(start_service, connect, worker_token, client):
    """An operator's cancel revokes an offer in another process: the session here learns it from the database."""
    service = await start_service()
    w = await connect(service, worker_token)
    await w.register(["billing"], capacity=1)
    first = client.submit("billing", "invoice.send", {"n": 1})
    held = await w.expect_assign()
    assert held.task_id == first["task_id"]
    session = service.hub.get(w.session_id)
    assert session.held_leases() == {held.lease_id}
    second = client.submit("billing", "invoice.send", {"n": 2})
    client.cancel(first["task_id"], reason="operator")  # through the database: this process is not told
    w.forget(held)  # the revoked offer no longer counts (the worker would learn it from task.start)
    with trio.fail_after(10):
        got = await w.expect_assign()
    assert got.task_id == second["task_id"]
    assert session.held_leases() == {got.lease_id}
