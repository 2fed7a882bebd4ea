"""Composite transactions: which chart transitions run together in one MySQL transaction.

The chart files declare them (each trigger's ``functions`` entry and its
``steps``, docs/statecharts/README.md); each test runs a real transaction,
records which transitions ran and how deep (the entry at 0, its steps at 1,
their own steps at 2), and compares that with what the charts declare for
the conditions the run met. So the chart is the one list: a step added in
the code but not in the chart (or the other way round) fails here.
"""

from __future__ import annotations

import pytest

from pulse_trio.charts import CHARTS
from pulse_trio.dburl import connect
from pulse_trio.store import (
    FinishReport, NewTask, assign, expire, finish, lapse, new_credentials, promote, release_after_quarantine,
    request_cancel, retry, start, submit,
)
from pulse_trio.store.engine.tx import Tx

FUNCTIONS = {f"{c.name}.{trigger}": fn for c in CHARTS.values() for trigger, fn in c.spec.functions.items()}


class DepthTx(Tx):
    """A Tx that also notes how deep each transition ran: (0, the entry), (1, its steps), ..."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[int, str]] = []

    def enter(self, name: str) -> None:
        self.calls.append((len(self._stack), name))
        super().enter(name)


def declared(entry: str, *met: str) -> list[tuple[int, str]]:
    """What the chart files say ``entry`` runs when the conditions ``met`` hold (each a step's ``when``).

    A condition no step on the way names is a mistake of the test, not a pass.
    """
    out: list[tuple[int, str]] = []
    used: set[str] = set()

    def walk(name: str, depth: int) -> None:
        out.append((depth, name))
        for step in FUNCTIONS[name].steps:
            if step.when:
                used.add(step.when)
            if not step.when or step.when in met:
                walk(step.name, depth + 1)

    walk(entry, 0)
    assert not set(met) - used, f"{entry} runs no step when {sorted(set(met) - used)}"
    return out


def trail(world, fn, *, node_id=None, **kwargs):
    """Run ``fn`` as one transaction; the transitions that ran, with their depth."""
    conn = connect(world.db)
    try:
        with conn.cursor() as cur:
            tx = DepthTx(cur, node_id=node_id)
            kwargs.setdefault("now", world.now)
            fn(tx, **kwargs)
        conn.commit()
        assert tx.trail == [name for _, name in tx.calls]
        return tx.calls
    finally:
        conn.close()


def test_the_walk_of_the_declarations_is_strict():
    assert declared("lease.renew") == [(0, "lease.renew")]
    assert declared("lease.revoke", "keyed", "tasks of the key wait") == [
        (0, "lease.revoke"), (1, "key_permit.release"), (2, "task.key_freed")]
    with pytest.raises(AssertionError, match="runs no step when"):
        declared("lease.finish", "no such condition")


@pytest.fixture
def keyed(world):
    return world.worker("q", keys=True)


def test_assign(world, keyed):
    world.submit(concurrency_key="a")
    assert trail(world, assign, session_id=keyed.session_id, credentials=new_credentials(1),
                 start_timeout_ms=1000, default_lease_ttl_ms=1000) == declared(
        "lease.assign", "a keyed task", "tasks are offered")


def test_start(world, keyed):
    offer = world.offer(keyed)
    assert trail(world, start, commands=[world.command(keyed, offer, 1)]) == declared("lease.start")


def test_finish(world, keyed):
    offer = world.running(keyed, concurrency_key="a")
    world.run(request_cancel, task_id=offer.task.task_id)
    assert trail(world, finish, commands=[world.command(keyed, offer, 2,
                                                           report=FinishReport("CANCELLED", "{}", "stopped"))]) == declared(
        "lease.finish", "keyed", "a cancel intent is open")


def test_lapse(world, keyed):
    world.offer(keyed, concurrency_key="a")
    world.advance(30_000)
    assert trail(world, lapse) == declared("lease.lapse")


def test_expire_with_escalation(world, keyed):
    offer = world.running(keyed, concurrency_key="a")
    world.run(request_cancel, task_id=offer.task.task_id)
    world.advance(30_000)
    assert trail(world, expire) == declared("lease.expire", "keyed", "a cancel intent is open")


def test_cancel_request_of_an_offer_and_of_a_running_task(world, keyed):
    offered = world.offer(keyed, concurrency_key="a")
    assert trail(world, request_cancel, task_id=offered.task.task_id) == declared(
        "cancellation.request", "OFFERED", "keyed", "SCHEDULED, READY or OFFERED")
    running = world.running(keyed)
    assert trail(world, request_cancel, task_id=running.task.task_id) == declared("cancellation.request", "RUNNING")
    ready = world.submit()
    assert trail(world, request_cancel, task_id=ready) == declared("cancellation.request",
                                                                  "SCHEDULED, READY or OFFERED")


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

        assert trail(world, nodes.lose, node_id="nod_" + "B" * 26) == declared("node.lose", "a node lapsed")
        assert trail(world, nodes.stop, node_id="nod_" + "C" * 26) == declared("node.stop")
    finally:
        for store in (lost, sweeper, stopping):
            store.close()


def test_schedule_fire_submits_each_ticks_task_on_its_own_transaction(world):
    from pulse_trio.client.schedules import build_schedule
    from pulse_trio.store.schedule.schedules import create, fire

    world.run(create, schedule=build_schedule(name="s", queue="q", kind="k", interval=1), created_by="t")
    world.advance(1000)
    assert trail(world, fire) == declared("schedule.fire")


def test_assign_meeting_a_key_at_its_limit_sets_its_tasks_aside(world, keyed):
    world.offer(keyed, concurrency_key="a")
    world.submit(concurrency_key="a")
    assert trail(world, assign, session_id=keyed.session_id, credentials=new_credentials(1),
                 start_timeout_ms=1000, default_lease_ttl_ms=1000) == declared(
        "lease.assign", "a keyed task", "a key at its limit")


def test_finish_with_tasks_of_the_key_waiting_brings_one_back(world, keyed):
    offer = world.running(keyed, concurrency_key="a")
    world.submit(concurrency_key="a")
    world.assign(keyed, 1)  # sets it aside
    done = FinishReport("SUCCEEDED", "{}")
    assert trail(world, finish, commands=[world.command(keyed, offer, 2, report=done)]) == declared(
        "lease.finish", "keyed", "tasks of the key wait")


def test_revoking_a_keyed_offer_brings_back_a_waiting_task_of_its_key(world, keyed):
    offered = world.offer(keyed, concurrency_key="a")
    world.submit(concurrency_key="a")
    world.assign(keyed, 1)  # sets it aside
    assert trail(world, request_cancel, task_id=offered.task.task_id) == declared(
        "cancellation.request", "OFFERED", "keyed", "tasks of the key wait", "SCHEDULED, READY or OFFERED")


def test_cancelling_a_ready_keyed_task_brings_back_another_of_its_key(world, keyed):
    running = world.running(keyed, concurrency_key="a")
    brought_back = world.submit(concurrency_key="a")
    world.submit(concurrency_key="a")
    world.assign(keyed, 1)  # the key is at its limit: both are set aside
    world.finish(keyed, running, 2)  # one permit freed: the first is brought back, the second still waits
    assert trail(world, request_cancel, task_id=brought_back) == declared(
        "cancellation.request", "SCHEDULED, READY or OFFERED",
        "a READY keyed task, and tasks of the key wait in its queue and kind")


def test_a_quarantine_running_out_brings_back_a_waiting_task_of_its_key(world, keyed):
    world.running(keyed, concurrency_key="a", lease_ttl_ms=10_000)
    world.submit(concurrency_key="a")
    world.advance(10_000)
    world.run(expire)
    assert world.assign(keyed, 1) == ()  # the quarantined permit still counts: the task is set aside
    world.advance(10_000)
    assert trail(world, release_after_quarantine) == declared("key_permit.release_after_quarantine",
                                                              "tasks of the key wait")


def test_submits_place_a_fairness_key_on_its_clock(world):
    first = [NewTask("q", "k", fairness_key="f")]
    assert trail(world, submit, tasks=first) == declared("task.submit", "a fairness key new to the queue")
    assert trail(world, submit, tasks=[NewTask("q", "k", fairness_key="f")]) == declared(
        "task.submit", "a fairness key the queue has placed before")


def test_resume_carries_an_operators_drain_to_the_new_session(world):
    from pulse_trio.store import disconnect, resume
    from pulse_trio.store.instance.instances import operator_drain

    old = world.worker("q")
    offer = world.running(old)
    world.run(operator_drain, instance_id=old.instance_id)
    world.run(disconnect, session_id=old.session_id)
    new = world.worker("q")
    assert trail(world, resume, request=world.resume_request(new, old, offer), start_timeout_ms=30_000) == declared(
        "lease.resume", "an operator drained the old instance")


def test_a_promoted_task_and_a_retry_are_placed_on_their_keys_clock(world):
    import datetime as dt

    w = world.worker("q")
    world.submit("elsewhere", fairness_key="later", due_at=world.now + dt.timedelta(seconds=1))
    world.advance(1000)
    assert trail(world, promote) == declared("task.promote", "a fairness key new to the queue")
    failed = world.running(w, fairness_key="f")
    world.finish(w, failed, 2, status="FAILED")
    assert trail(world, retry, source_task_id=failed.task.task_id) == declared(
        "task.retry", "a fairness key the queue has placed before")
