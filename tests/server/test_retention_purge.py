"""Retention in serve: two instances purge a filled history in small batches while dispatch runs.

The history is inserted by ``bench fill-finished`` (old tasks, each with a
lease and a renew receipt); younger finished tasks and a live stream of
submitted tasks must come through untouched.
"""

from __future__ import annotations

import datetime as dt

import trio

from pulse_trio.bench.fill_finished import FillOptions, fill
from pulse_trio.server.retention_loop import PurgePace
from sql_support import rows

DAY_S = 86_400


def _count(db, sql: str, args=()) -> int:
    return rows(db, sql, args)[0][0]


async def test_two_instances_purge_exactly_what_is_due_in_batches_while_dispatch_runs(start_service, connect,
                                                                                     worker_token, client, db):
    now = dt.datetime.now(dt.timezone.utc)
    for tasks, queue, days in ((1_200, "billing", 8), (300, "billing", 6), (200, "mail", 3)):
        options = FillOptions(tasks=tasks, queue=queue, age_s=days * DAY_S)
        await trio.to_thread.run_sync(lambda o=options: fill(db, o, now=now))
    await trio.to_thread.run_sync(lambda: client.set_queue_retention("mail", 2 * DAY_S, updated_by="test"))
    old = "SELECT COUNT(*) FROM tasks WHERE queue = %s AND finished_at < %s"
    assert _count(db, old, ("billing", now - dt.timedelta(days=7))) == 1_200

    # Only the passes below purge: each instance's own loop (a pass every minute) would take a share
    # that neither of them counts when a loaded run takes that long.
    first, second = await start_service(purge_interval=DAY_S), await start_service(purge_interval=DAY_S)
    for service in (first, second):  # unpaced batches of 100: the rule here is what goes, not how fast
        service.retention.pace = PurgePace(idle_batch=100, busy_batch=100, idle_share=1, busy_share=1,
                                           min_pause=0.001)
    worker = await connect(first, worker_token)
    await worker.register(["billing"], capacity=4)
    stream: list[str] = []

    async def produce_and_run() -> None:
        for _ in range(40):
            stream.append((await trio.to_thread.run_sync(client.submit, "billing", "invoice.send"))["task_id"])
            held = await worker.expect_assign()
            await worker.ok(worker.start(held))
            await worker.ok(worker.finish(held))

    purged: list[int] = []

    async def purge(service) -> None:
        purged.append(await service.retention.purge_pass())

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce_and_run)
            nursery.start_soon(purge, first)
            nursery.start_soon(purge, second)

    # Exactly the due ones: billing's 1 200 over 7 days, mail's 200 over its own 2 days; nothing twice.
    assert sum(purged) == 1_400
    assert _count(db, "SELECT COUNT(*) FROM tasks WHERE queue = 'billing'") == 300 + len(stream)
    assert _count(db, "SELECT COUNT(*) FROM tasks WHERE queue = 'mail'") == 0
    assert _count(db, "SELECT COUNT(*) FROM leases") == 300 + len(stream)
    assert _count(db, "SELECT COUNT(*) FROM renew_receipts") == 300
    assert {(await trio.to_thread.run_sync(client.get, t))["state"] for t in stream} == {"SUCCEEDED"}
    # Counted in each instance's metrics, in batches of at most 100 tasks.
    tasks = [s.metrics.purged["tasks"] for s in (first, second)]
    batches = sum(s.metrics.purge_batches for s in (first, second))
    assert sum(tasks) == 1_400 and batches >= 14
    assert sum(s.metrics.purged["leases"] + s.metrics.purged["renew_receipts"] for s in (first, second)) == 2_800
    # A second pass finds nothing more.
    assert await first.retention.purge_pass() == 0
