"""Composite transactions: which chart transitions run together in one MySQL transaction.

docs/statecharts/README.md lists these; the test keeps the list true.
"""

from __future__ import annotations

import pytest

from pulse_trio.dburl import connect
from pulse_trio.store import (
    FinishReport, expire, finish, lapse, new_credentials, assign, request_cancel, start,
)
from pulse_trio.store.engine.tx import Tx


def trail(world, fn, **kwargs):
    conn = connect(world.db)
    try:
        with conn.cursor() as cur:
            tx = Tx(cur)
            kwargs.setdefault("now", world.now)
            fn(tx, **kwargs)
        conn.commit()
        return tx.trail
    finally:
        conn.close()


@pytest.fixture
def keyed(world):
    return world.worker("q", keys=True)


def test_assign(world, keyed):
    world.submit(concurrency_key="a")
    assert trail(world, assign, session_id=keyed.session_id, credentials=new_credentials(1),
                 start_timeout_ms=1000, default_lease_ttl_ms=1000) == [
        "lease.assign", "key_permit.acquire", "task.offer"]


def test_start(world, keyed):
    offer = world.offer(keyed)
    assert trail(world, start, commands=[world.command(keyed, offer, 1)]) == ["lease.start", "task.start"]


def test_finish(world, keyed):
    offer = world.running(keyed, concurrency_key="a")
    world.run(request_cancel, task_id=offer.task.task_id)
    assert trail(world, finish, commands=[world.command(keyed, offer, 2,
                                                           report=FinishReport("CANCELLED", "{}", "stopped"))]) == [
        "lease.finish", "task.finish", "key_permit.release", "cancellation.resolve"]


def test_lapse(world, keyed):
    world.offer(keyed, concurrency_key="a")
    world.advance(30_000)
    assert trail(world, lapse) == ["lease.lapse", "task.lapse", "key_permit.release"]


def test_expire_with_escalation(world, keyed):
    offer = world.running(keyed, concurrency_key="a")
    world.run(request_cancel, task_id=offer.task.task_id)
    world.advance(30_000)
    assert trail(world, expire) == ["lease.expire", "task.expire", "key_permit.quarantine", "cancellation.escalate"]


def test_cancel_request_of_an_offer_and_of_a_running_task(world, keyed):
    offered = world.offer(keyed, concurrency_key="a")
    assert trail(world, request_cancel, task_id=offered.task.task_id) == [
        "cancellation.request", "lease.revoke", "key_permit.release", "task.cancel"]
    running = world.running(keyed)
    assert trail(world, request_cancel, task_id=running.task.task_id) == ["cancellation.request", "lease.cancel"]
    ready = world.submit()
    assert trail(world, request_cancel, task_id=ready) == ["cancellation.request", "task.cancel"]


def test_node_lose_and_stop_end_the_nodes_sessions_in_their_own_transaction(world):
    from pulse_trio.store import NewInstance, SubscribedQueue, register
    from pulse_trio.store.instance import nodes
    from pulse_trio.store.engine.trio_bridge import Store

    def on(node_id: str):
        store = Store(world.db, pool_size=1, node_id=node_id)
        store.run_sync(nodes.start, now=world.now, lapse_ms=1000, host="h", pid=1)
        store.run_sync(register, instance=NewInstance("w", (SubscribedQueue("q"),)), now=world.now)
        return store

    lost, sweeper, stopping = (on(f"nod_{c * 26}") for c in "ABC")
    try:
        world.advance(1000)
        sweeper.run_sync(nodes.heartbeat, now=world.now)
        stopping.run_sync(nodes.heartbeat, now=world.now)

        def as_node(node_id, fn):
            conn = connect(world.db)
            try:
                with conn.cursor() as cur:
                    tx = Tx(cur, node_id=node_id)
                    fn(tx, now=world.now)
                conn.commit()
                return tx.trail
            finally:
                conn.close()

        assert as_node("nod_" + "B" * 26, nodes.lose) == ["node.lose", "instance.node_gone"]
        assert as_node("nod_" + "C" * 26, nodes.stop) == ["node.stop", "instance.node_gone"]
    finally:
        for store in (lost, sweeper, stopping):
            store.close()


def test_schedule_fire_submits_each_ticks_task_on_its_own_transaction(world):
    from pulse_trio.client.schedules import build_schedule
    from pulse_trio.store.schedule.schedules import create, fire

    world.run(create, schedule=build_schedule(name="s", queue="q", kind="k", interval=1), created_by="t")
    world.advance(1000)
    assert trail(world, fire) == ["schedule.fire", "task.submit"]


def test_assign_meeting_a_key_at_its_limit_sets_its_tasks_aside(world, keyed):
    world.offer(keyed, concurrency_key="a")
    world.submit(concurrency_key="a")
    assert trail(world, assign, session_id=keyed.session_id, credentials=new_credentials(1),
                 start_timeout_ms=1000, default_lease_ttl_ms=1000) == [
        "lease.assign", "key_permit.acquire", "task.wait_for_key"]


def test_finish_with_tasks_of_the_key_waiting_brings_one_back(world, keyed):
    offer = world.running(keyed, concurrency_key="a")
    world.submit(concurrency_key="a")
    world.assign(keyed, 1)  # sets it aside
    done = FinishReport("SUCCEEDED", "{}")
    assert trail(world, finish, commands=[world.command(keyed, offer, 2, report=done)]) == [
        "lease.finish", "task.finish", "key_permit.release", "task.key_freed"]
