"""Server-process liveness with real processes: SIGKILL leaves no ghost session, nor does a graceful stop,
and processes paused together judge nobody when they wake.

Two `pulse-trio serve` processes on one database with a fast heartbeat
(0.2 s) and lapse (1 s), so the whole story takes seconds.
"""

from __future__ import annotations

import signal

import trio

import harness
import serve_process
from sql_support import rows as sql_rows

HEARTBEAT = 0.2
LAPSE = 1.0
FAST = ("--node-heartbeat", str(HEARTBEAT), "--node-lapse", str(LAPSE), "--poll-interval", "0.05")
SLACK = 1.0  # a timers tick (0.1 s) and a loaded 2-core machine
PAUSES = 4  # which of a waking process's timers tick and its overdue heartbeat runs first is a race


async def _query(db, query, args=()):
    return await trio.to_thread.run_sync(sql_rows, db, query, args)


async def _session_row(db, session_id):
    (row,) = await _query(db, "SELECT state, disconnected_at, node_id FROM worker_instances WHERE session_id = %s",
                          (session_id,))
    return row


def _worker(client, session_id):
    return next(w for w in client.workers(include_disconnected=True) if w["session_id"] == session_id)


async def test_sigkill_of_a_serve_process_the_other_disconnects_its_session_within_the_lapse(
        db, connect, worker_token, client):
    (survivor, survivor_port, _), (victim, victim_port, _) = await serve_process.start_together(db, 2, *FAST)
    try:
        w = await connect(victim_port, worker_token, name="victim")
        await w.register(["billing"], capacity=1)
        client.submit("billing", "invoice.send", {})
        held = await w.expect_assign()
        await w.ok(w.start(held))
        _, _, victim_node = await _session_row(db, w.session_id)
        assert victim_node is not None
        # Alive and heartbeating: never declared lost, however many lapses go by.
        await trio.sleep(LAPSE * 3)
        assert _worker(client, w.session_id)["state"] == "ACTIVE"
        leases = await _query(db, "SELECT lease_id, state, expires_at, owner_session_id, revision FROM leases")
        victim.send_signal(signal.SIGKILL)
        with trio.fail_after(10):
            await victim.wait()
        killed = trio.current_time()
        await w.expect_close(timeout=10)
        with trio.fail_after(LAPSE + SLACK + 5):  # fails slow enough to report the elapsed time below
            while _worker(client, w.session_id)["state"] != "DISCONNECTED":
                await trio.sleep(0.02)
        elapsed = trio.current_time() - killed
        assert elapsed <= LAPSE + SLACK, elapsed
        shown = _worker(client, w.session_id)
        assert shown["disconnected_at"] is not None and shown["node_id"] == victim_node
        assert _worker(client, w.session_id) not in client.workers()  # gone from the default listing
        (state, lost_by), = await _query(db, "SELECT state, lost_by FROM server_nodes WHERE node_id = %s",
                                         (victim_node,))
        (survivor_node,), = await _query(db, "SELECT node_id FROM server_nodes WHERE node_id <> %s", (victim_node,))
        assert (state, lost_by) == ("LOST", survivor_node)
        # Leases are untouched: the running one waits for its ttl, or for a resume.
        assert await _query(db, "SELECT lease_id, state, expires_at, owner_session_id, revision FROM leases") == leases
        new = await connect(survivor_port, worker_token, name="new")
        await new.register(["billing"], capacity=1)
        assert (await new.ok(new.resume(w, held)))["state"] == "RUNNING"
        await new.ok(new.finish(new.live[held.lease_id]))
    finally:
        for process in (victim, survivor):
            if process.poll() is None:
                process.kill()


async def test_a_graceful_stop_leaves_no_ghost_and_is_never_declared_lost(db, connect, worker_token, client):
    (staying, _, _), (stopping, port, _) = await serve_process.start_together(db, 2, *FAST)
    try:
        w = await connect(port, worker_token)
        await w.register(["billing"], capacity=1)
        _, _, node = await _session_row(db, w.session_id)
        stopping.send_signal(signal.SIGTERM)
        await w.expect_error("server_shutting_down", fatal=True, reply_to=harness.ABSENT)
        await w.expect_close(1001)
        with trio.fail_after(20):
            assert await stopping.wait() == 0
        (state, stopped_at, expires_at), = await _query(
            db, "SELECT state, stopped_at, expires_at FROM server_nodes WHERE node_id = %s", (node,))
        assert state == "STOPPED" and stopped_at is not None and expires_at is None
        assert (await _session_row(db, w.session_id))[0] == "DISCONNECTED"
        assert await _query(db, "SELECT session_id FROM worker_instances WHERE node_id = %s"
                                " AND state <> 'DISCONNECTED'", (node,)) == []
        await trio.sleep(LAPSE * 3)  # the other instance's sweeps pass a stopped node by
        (state, lost_by), = await _query(db, "SELECT state, lost_by FROM server_nodes WHERE node_id = %s", (node,))
        assert (state, lost_by) == ("STOPPED", None)
    finally:
        for process in (stopping, staying):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        with trio.move_on_after(20):
            await staying.wait()
        if staying.poll() is None:
            staying.kill()


async def test_processes_paused_together_declare_nobody_lost_when_they_wake(db):
    """A VM pause or a debugger stops every serve process at once; none was on time, so none may judge.

    Each pause lasts two lapses, so every row lapses; both wake together, and
    the first through must give the other a lapse to beat (docs/operations.md §4).
    """
    processes = [process for process, _, _ in await serve_process.start_together(db, 2, *FAST)]
    try:
        await trio.sleep(LAPSE * 2)  # both steady for over a lapse: both sweep
        for pause in range(PAUSES):
            for process in processes:
                process.send_signal(signal.SIGSTOP)
            await trio.sleep(LAPSE * 2)
            for process in processes:
                process.send_signal(signal.SIGCONT)
            await trio.sleep(LAPSE * 1.5)  # a lapse of steady beats again: both sweep before the next pause
            rows = await _query(db, "SELECT state, lost_by FROM server_nodes")
            assert rows == [("ALIVE", None)] * 2, (pause, rows)
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.kill()


async def test_a_hello_on_a_node_declared_lost_is_refused_on_the_wire(db, start_service, connect, worker_token):
    """While its node is LOST an instance registers nobody: server_shutting_down, fatal, no session, then the close.

    The SDK reads that answer as "reconnect", not as a refusal for good, so a worker goes elsewhere.
    """
    import json

    import pytest

    from pulse_trio.contract import messages as m
    from pulse_trio.sdk.errors import CommandRefused
    from pulse_trio.sdk.protocol import read_welcome

    service = await start_service(node_heartbeat=60, node_lapse=120)  # no heartbeat during the test
    await _query(db, "UPDATE server_nodes SET state = 'LOST' WHERE node_id = %s", (service.store.node_id,))
    worker = await connect(service, worker_token, name="late")
    reply = await worker.hello(["billing"])
    assert reply["type"] == "error" and reply["reply_to"] == "h1" and "session_id" not in reply, reply
    assert (reply["error"]["code"], reply["error"]["fatal"]) == ("server_shutting_down", True)
    await worker.expect_close()
    assert await _query(db, "SELECT COUNT(*) FROM worker_instances") == [(0,)]
    hello = m.WorkerHello(id="h1", worker_name="late", subscriptions=(m.Subscription("billing"),))
    with pytest.raises(CommandRefused) as refused:  # WorkerRefused would stop the worker
        read_welcome(hello, json.dumps(reply), strict=True)
    assert refused.value.code == "server_shutting_down" and refused.value.fatal
