"""The pool of handler tasks: tasks reused between leases, never a wait for a free one, a context per handler, sized by capacity."""

from __future__ import annotations

import contextvars

import anyio
import pytest

from sdk_support import Gate, gated_registry, in_thread, url_of, wait_for, wait_state

from pulse_trio.sdk import Registry, TaskContext
from pulse_trio.sdk.pool import HandlerPool

BACKENDS = ["asyncio", "trio"]
SPAN: contextvars.ContextVar[str] = contextvars.ContextVar("span", default="none")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_busy_pool_starts_a_task_and_keeps_only_size_idle(backend):
    async def main() -> None:
        pool = HandlerPool(2)
        release = anyio.Event()
        ran: list[int] = []

        def job(n: int):
            async def run() -> None:
                await release.wait()
                ran.append(n)
            return run

        async with anyio.create_task_group() as tasks:
            pool.attach(tasks)
            for n in range(5):  # more jobs than kept tasks: none waits for a free one
                pool.run(job(n))
            await wait_until(lambda: pool.tasks == 5)
            release.set()
            await wait_until(lambda: len(ran) == 5 and pool.idle == 2)
            assert pool.tasks == 2 and pool.started == 5
            for n in range(5, 7):  # the kept tasks take the next jobs
                pool.run(job(n))
            await wait_until(lambda: len(ran) == 7 and pool.idle == 2)
            assert pool.started == 5 and pool.jobs == 7
            pool.resize(0)  # the idle ones end
            await wait_until(lambda: pool.tasks == 0)
            pool.run(job(7))  # and a job still runs
            await wait_until(lambda: len(ran) == 8)
            tasks.cancel_scope.cancel()

    anyio.run(main, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_job_has_a_context_of_its_own_and_cancellation_reaches_it(backend):
    async def main() -> None:
        pool = HandlerPool(1)
        seen: list[str] = []
        done = anyio.Event()

        async def sets() -> None:
            seen.append(SPAN.get())
            SPAN.set("first")
            await anyio.sleep(0)
            seen.append(SPAN.get())

        async def reads() -> None:
            seen.append(SPAN.get())
            done.set()

        async with anyio.create_task_group() as tasks:
            pool.attach(tasks)
            pool.run(sets)
            await wait_until(lambda: pool.idle == 1)
            pool.run(reads)
            await done.wait()
            assert seen == ["none", "first", "none"] and pool.started == 1

            async def sleeps() -> None:
                with anyio.CancelScope() as scope:
                    scopes.append(scope)
                    await anyio.sleep(60)
                seen.append("cancelled" if scope.cancelled_caught else "woke")

            scopes: list[anyio.CancelScope] = []
            pool.run(sleeps)
            await wait_until(lambda: scopes)
            scopes[0].cancel()
            await wait_until(lambda: seen[-1] == "cancelled" and pool.idle == 1)
            tasks.cancel_scope.cancel()  # idle tasks end with the group

    anyio.run(main, backend=backend)


async def wait_until(predicate, timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.001)


async def test_handlers_reuse_pool_tasks_without_sharing_context(start_service, run_worker, client):
    service = await start_service()
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext) -> dict:
        before = SPAN.get()
        SPAN.set(task.task_id)
        await anyio.sleep(0)
        return {"before": before}

    worker = await run_worker(url_of(service), registry, capacity=1)
    views = []
    for _ in range(3):
        task = await in_thread(client.submit, "billing", "invoice.send", {})
        views.append(await wait_state(client, task["task_id"], "SUCCEEDED"))
    assert [v["outcome"]["result"] for v in views] == [{"before": "none"}] * 3
    assert worker.pool.jobs == 3 and worker.pool.started == 1


async def test_the_pool_and_the_declared_capacity_follow_set_capacity(start_service, run_worker, client):
    service = await start_service()
    started, release, calls = Gate(), Gate(), []
    worker = await run_worker(url_of(service), gated_registry(started, release, calls), capacity=4)
    for _ in range(6):
        await in_thread(client.submit, "billing", "invoice.send", {})
    await wait_for(lambda: len(calls) == 4, what="four handlers running")
    assert worker.pool.tasks == 4
    worker.set_capacity(2)

    async def declared(n: int) -> None:
        with anyio.fail_after(15):
            while [r["capacity"] for r in await in_thread(client.workers)] != [n]:
                await anyio.sleep(0.02)

    await declared(2)
    release.set()
    await wait_for(lambda: worker.stats.succeeded == 6, what="every task done")
    assert len(calls) == 6
    await wait_for(lambda: worker.pool.idle == 2 and worker.pool.tasks == 2, what="two idle tasks kept")
    worker.set_capacity(0)
    await wait_for(lambda: worker.pool.tasks == 0, what="no idle task kept")
    await declared(0)


async def test_a_fractional_capacity_is_refused_and_the_worker_goes_on(start_service, run_worker, client):
    """set_capacity(2.5) (cores x 1.25, say) is refused by the call, leaving the worker as it was.

    Half applied, it was declared at the next turn of the serve loop and ended the worker (docs/worker.md §14.2).
    """
    service = await start_service()
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext) -> dict:
        return {"sent": True}

    worker = await run_worker(url_of(service), registry, capacity=2, drain_check=0.2)
    with pytest.raises(ValueError):
        worker.set_capacity(2.5)
    await anyio.sleep(1)  # a few drain checks: the serve loop declares any capacity that changed
    assert not worker.returned.is_set(), f"the worker's run() ended: {worker.error!r}"
    assert worker.capacity == 2 and worker.threads.limiter.total_tokens == 2
    task = await in_thread(client.submit, "billing", "invoice.send", {})
    assert (await wait_state(client, task["task_id"], {"SUCCEEDED", "FAILED"}))["state"] == "SUCCEEDED"


async def test_the_services_in_flight_limit_follows_the_declared_capacity(start_service, run_worker, client):
    """The service reads up to max(64, 2 × capacity) lease commands ahead of their answers (docs/worker.md §13)."""
    service = await start_service()
    started, release, calls = Gate(), Gate(), []
    worker = await run_worker(url_of(service), gated_registry(started, release, calls), capacity=200)

    async def limit_is(capacity: int, limit: int) -> None:
        with anyio.fail_after(15):
            while True:
                rows = await in_thread(client.workers)
                session = service.hub.get(rows[0]["session_id"]) if rows else None
                if session is not None and session.capacity == capacity and session.in_flight_limit == limit:
                    return
                await anyio.sleep(0.02)

    await limit_is(200, 400)
    worker.set_capacity(10)
    await limit_is(10, 64)
    release.set()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_job_handed_to_an_idle_task_as_it_is_cancelled_is_not_lost(backend):
    """The hand-off may reach an idle task whose wait was just cancelled: the job goes to another task."""

    async def main() -> None:
        pool = HandlerPool(1)
        started: list[str] = []

        def job(name: str):
            async def run() -> None:
                started.append(name)  # before any checkpoint: it ran, even in a cancelled group
            return run

        async with anyio.create_task_group() as tasks:
            pool.attach(tasks)
            pool.run(job("first"))
            await wait_until(lambda: pool.idle == 1)  # its task waits for the next job
            tasks.cancel_scope.cancel()  # the idle task's wait is cancelled ...
            pool.run(job("second"))  # ... and, before it runs again, it is handed a job
        assert started == ["first", "second"]

    anyio.run(main, backend=backend)
