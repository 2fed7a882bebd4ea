"""An operator's drain (``POST /v1/workers/{id}/drain``, ``Client.drain``) reaches the SDK worker.

The worker asks for its stored state with a ``worker.capacity`` that repeats
its last sequence; its ack shows ``drain: true`` once an operator drained the
instance. The worker then logs it, takes no new task, finishes the running
ones and returns from ``run()`` (``worker run`` exits 0). A reconnect does not
forget the drain: the session that resumes a drained instance's leases is
drained too.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import trio

from sdk_support import Gate, in_thread, url_of, wait_for, wait_state

from pulse_trio.sdk import Registry, TaskContext

ROOT = Path(__file__).resolve().parents[2]


def _gated(started: list[str], release: Gate) -> Registry:
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext) -> dict:
        started.append(task.task_id)
        await release.wait()
        return {"sent": task.task_id}

    return registry


async def test_an_operator_drain_is_reported_and_the_worker_exits_after_its_leases(
        start_service, run_worker, client, caplog):
    caplog.set_level(logging.INFO, logger="pulse_trio.sdk")
    service = await start_service()
    started, release = [], Gate()
    worker = await run_worker(url_of(service), _gated(started, release), capacity=2, drain_check=0.2)
    returned = worker.returned
    first = await in_thread(client.submit, "billing", "invoice.send", {})
    await wait_for(lambda: started, what="the first task to start")

    # Through the database, as another serve instance or the CLI would: not this instance's hub.
    await in_thread(client.drain, worker.credentials.instance_id)
    await wait_for(lambda: worker.draining, timeout=5, what="the worker to learn of the drain")
    assert worker.drained_by_operator
    assert any("drained by an operator" in r.getMessage() for r in caplog.records)

    second = await in_thread(client.submit, "billing", "invoice.send", {})
    await trio.sleep(0.5)
    assert started == [first["task_id"]], "a drained worker took a new task"
    assert not returned.is_set(), "the worker left before its running task finished"

    release.set()
    view = await wait_state(client, first["task_id"], "SUCCEEDED")
    assert view["outcome"]["result"] == {"sent": first["task_id"]}
    with trio.fail_after(10):
        await returned.wait()
    assert not worker.stopped and worker.stats.succeeded == 1 and worker.stats.lost == 0
    assert (await in_thread(client.get, second["task_id"]))["state"] == "READY"


async def test_a_drain_is_not_forgotten_when_the_worker_reconnects(start_service, proxy_for, run_worker, client,
                                                                   caplog):
    caplog.set_level(logging.INFO, logger="pulse_trio.sdk")
    service = await start_service(lease_ttl=3)
    proxy = await proxy_for(service)
    started, release = [], Gate()
    # The periodic check is far away: only the reconnect can tell the worker.
    worker = await run_worker(proxy.url, _gated(started, release), capacity=2, drain_check=600)
    returned = worker.returned
    first = await in_thread(client.submit, "billing", "invoice.send", {})
    await wait_for(lambda: started, what="the first task to start")
    drained = worker.credentials.instance_id
    await in_thread(client.drain, drained)
    assert not worker.draining

    proxy.sever()
    await wait_for(lambda: worker.stats.resumed == 1, what="the lease to be resumed")
    await wait_for(lambda: worker.draining, timeout=5, what="the reconnected worker to learn of the drain")
    assert worker.drained_by_operator and worker.credentials.instance_id != drained
    [new] = [w for w in await in_thread(client.workers) if w["instance_id"] == worker.credentials.instance_id]
    assert new["drain"] is True

    await in_thread(client.submit, "billing", "invoice.send", {})
    await trio.sleep(0.5)
    assert started == [first["task_id"]], "the reconnected worker took a new task"
    release.set()
    await wait_state(client, first["task_id"], "SUCCEEDED")
    with trio.fail_after(10):
        await returned.wait()
    assert worker.stats.succeeded == 1 and worker.stats.lost == 0
    assert any("drained by an operator" in r.getMessage() for r in caplog.records)


async def test_worker_run_exits_0_after_an_operator_drain(start_service, token_factory, client):
    service = await start_service()
    command = [sys.executable, "-m", "pulse_trio", "worker", "run", "examples.billing_worker:registry",
               "--url", url_of(service), "--drain-check", "0.2"]
    env = dict(os.environ, PULSE_WORKER_TOKEN=token_factory("worker", ["billing"]))
    async with trio.open_nursery() as nursery:
        process = await nursery.start(lambda task_status: trio.run_process(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False,
            task_status=task_status))
        try:
            with trio.fail_after(20):
                while not (workers := await in_thread(client.workers)):
                    await trio.sleep(0.05)
            await in_thread(client.drain, workers[0]["instance_id"])
            with trio.fail_after(20):
                rc = await process.wait()
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGKILL)
        stderr = await process.stderr.receive_some(1 << 20) if process.stderr else b""
    text = stderr.decode()
    assert rc == 0, text
    assert "drained by an operator" in text and "drained:" in text


async def test_a_busy_worker_learns_of_the_drain_too(start_service, run_worker, client):
    """Tasks finishing all the time keep the worker's loop busy; the check still comes on time."""
    service = await start_service()
    started: list[str] = []
    gates = [Gate() for _ in range(10)]
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext) -> dict:
        gate = gates[len(started)]
        started.append(task.task_id)
        await gate.wait()
        return {}

    worker = await run_worker(url_of(service), registry, capacity=10, drain_check=0.3)
    returned = worker.returned
    await in_thread(lambda: [client.submit("billing", "invoice.send", {"n": n}) for n in range(10)])
    await wait_for(lambda: len(started) == 10, what="ten running tasks")
    await in_thread(client.drain, worker.credentials.instance_id)
    released = 0
    for gate in gates:  # a task ends every 0.1 s: the worker is never idle for its check interval
        if worker.draining:
            break
        gate.set()
        released += 1
        await trio.sleep(0.1)
    assert worker.draining and released <= 6, released
    for gate in gates:
        gate.set()
    with trio.fail_after(10):
        await returned.wait()
    assert worker.drained_by_operator and worker.stats.succeeded == 10
