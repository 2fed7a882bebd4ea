"""Outcomes return through the connection: the lanes post them, the connection's own task applies them.

On the real database through real sockets. The first test records which
Trio task applies each outcome to the session; the second holds a batch
in the database (a row lock taken by another connection) while its
connection goes away, and checks that the commands still commit.
"""

from __future__ import annotations

import trio

from pulse_trio.server import batcher
from pulse_trio.server.live_session import LiveSession
from pulse_trio.server.session_inbox import SessionInbox
from sql_support import connect as connect_db, rows


async def _backlogged(service) -> None:
    with trio.fail_after(10):
        while not service.dispatcher.backlogged:
            await trio.sleep(0.01)


def _connection_of(service, session_id: str):
    [connection] = [c for c in service.connections if c.session is not None and c.session.session_id == session_id]
    return connection


async def _until(predicate, what: str, timeout: float = 10) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)


async def test_outcomes_and_ride_along_offers_are_applied_by_the_connections_own_task(
        start_service, connect, worker_token, client, monkeypatch):
    service = await start_service(poll_interval=60)  # offers after the first come only with the finishes
    client.submit_many([client.new_task("billing", "invoice.send", {"n": i}) for i in range(24)])
    w = await connect(service, worker_token)
    await w.register(["billing"], capacity=8)
    held = [await w.expect_assign() for _ in range(8)]
    await _backlogged(service)
    session = service.hub.get(w.session_id)
    connection = _connection_of(service, w.session_id)
    appliers: list[tuple[str, trio.lowlevel.Task]] = []
    posted: list[object] = []

    def recording(name, method):
        def record(*args):
            appliers.append((name, trio.lowlevel.current_task()))
            return method(*args)
        return record

    monkeypatch.setattr(session, "_command_done", recording("command", session._command_done))
    monkeypatch.setattr(session, "_offers_arrived", recording("offers", session._offers_arrived))
    submit = service.batcher.submit

    def submit_recording(command, results, request):
        posted.append(results)
        submit(command, results, request)

    # The session bound the batcher's submit when it was built: rebind it to see what it hands the lanes.
    monkeypatch.setattr(session, "_submit_command", submit_recording)

    sent = [await w.send(w.frame("task.start", h.body(h.revision))) for h in held]
    for id_ in sent:
        await w.ok(w.reply(id_))
    for h in held:
        await w.ok(w.finish(h))
    for _ in range(8):  # the finishes' ride-along offers (or the dispatcher's, should the queue run dry)
        await w.expect_assign()

    kinds = [name for name, _ in appliers]
    assert kinds.count("command") == 16 and kinds.count("offers") >= 1, kinds
    assert service.batcher.statistics()["ride_along_offers"] >= 1
    # The lanes were handed the session's inbox, never the session: they post, they do not apply.
    assert posted and all(type(results) is SessionInbox and results is session.inbox for results in posted)
    # Every outcome was applied by one task: the session's results task, in the connection's own nursery.
    tasks = {task for _, task in appliers}
    assert len(tasks) == 1, tasks
    [task] = tasks
    assert task.coro.cr_code is LiveSession.apply_results.__code__
    assert task.parent_nursery.cancel_scope is connection._scope
    lanes = [t for n in trio.lowlevel.current_root_task().child_nurseries for t in _walk(n)
             if t.name.endswith("LeaseCommandBatcher._lane")]
    assert len(lanes) == batcher.LANES and task not in lanes


def _walk(nursery: trio.Nursery):
    for task in nursery.child_tasks:
        yield task
        for child in task.child_nurseries:
            yield from _walk(child)


async def test_a_connection_gone_while_its_commands_are_in_a_batch_loses_nothing(
        start_service, connect, worker_token, client, db):
    """A command that was queued always runs: it commits after its connection closed, the closed
    inbox drops its outcome, the metrics still count it, and a new connection resumes what it left."""
    service = await start_service()
    client.submit_many([client.new_task("billing", "invoice.send", {"n": i}) for i in range(2)])
    old = await connect(service, worker_token, name="old")
    await old.register(["billing"], capacity=2)
    offered, running = [await old.expect_assign() for _ in range(2)]
    await old.ok(old.start(running))
    session = service.hub.get(old.session_id)
    finishes = service.metrics.commands["TaskFinish"]

    # Another database connection holds both lease rows: the batch with their commands waits on them.
    blocker = connect_db(db)
    try:
        with blocker.cursor() as cur:
            cur.execute("SELECT lease_id FROM leases WHERE lease_id IN (%s, %s) FOR UPDATE",
                        (offered.lease_id, running.lease_id))
        await old.send(old.frame("task.start", offered.body(offered.revision)))
        await old.send(old.frame("task.finish", running.body(running.revision, status="SUCCEEDED",
                                                             result={"ok": True})))
        lanes = service.batcher
        await _until(lambda: {offered.lease_id, running.lease_id} <= lanes._held and not lanes._queue,
                     "both commands in a running batch")
        await old.drop()
        await _until(lambda: session.inbox.closed and service.hub.get(old.session_id) is None,
                     "the session released")
        assert session._in_flight == 2  # nothing came back yet
    finally:
        blocker.rollback()
        blocker.close()

    await _until(lambda: not lanes._held, "the batch committed")
    assert client.get(running.task_id)["state"] == "SUCCEEDED"
    assert rows(db, "SELECT state FROM leases WHERE lease_id = %s", (offered.lease_id,)) == [("RUNNING",)]
    assert service.metrics.commands["TaskFinish"] == finishes + 1  # the lane counted it at the door
    assert session._in_flight == 2 and session.inbox.leases_posted == 0  # dropped, not applied
    assert session.inbox._items == []

    new = await connect(service, worker_token, name="new")
    await new.register(["billing"], capacity=2)
    lease = await new.ok(new.resume(old, offered))
    assert lease["state"] == "RUNNING"  # the start committed after its connection had gone
    await new.ok(new.finish(new.live[offered.lease_id]))
    assert client.get(offered.task_id)["state"] == "SUCCEEDED"
