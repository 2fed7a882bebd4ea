"""The purge's pacing in serve: it sleeps in proportion to each batch's time, and less of it goes while dispatch is busy.

The batch's duration comes from an injected timer and the sleeps are
recorded instead of slept, so the rule is checked exactly; the batches
themselves are real transactions on a real instance's store.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest
import trio

from pulse_trio.bench.fill_finished import FillOptions, fill
from pulse_trio.server.retention_loop import DispatchActivity, PurgePace
from pulse_trio.store.engine.registry import read_only
from pulse_trio.store.engine.tx import Tx
from sql_support import rows

DAY_S = 86_400


class _Ticks:
    """A timer under which every batch takes exactly ``took`` seconds (two reads per batch)."""

    def __init__(self, took: float) -> None:
        self.took, self.reads = took, 0

    def __call__(self) -> float:
        self.reads += 1
        return ((self.reads - 1) // 2) * 10.0 + (self.took if self.reads % 2 == 0 else 0.0)


def test_the_pause_is_the_batch_time_scaled_by_the_share_within_bounds():
    pace = PurgePace(idle_share=0.5, busy_share=0.05, idle_batch=500, busy_batch=100, min_pause=0.01, max_pause=5)
    assert pace.pause(0.1, busy=False) == pytest.approx(0.1)  # half the wall time in transactions
    assert pace.pause(0.02, busy=True) == pytest.approx(0.38)  # a twentieth
    assert pace.pause(0.0, busy=False) == 0.01 and pace.pause(1.0, busy=True) == 5  # clamped
    assert (pace.batch(False), pace.batch(True)) == (500, 100)
    for bad in ({"busy_share": 0}, {"idle_share": 1.5}, {"busy_batch": 0}, {"min_pause": 6}, {"busy_chunk": 0},
                {"gap_wait": -1}, {"quiet": -0.1}, {"yield_budget": -1}):
        with pytest.raises(ValueError):
            PurgePace(**bad)


async def test_a_pass_sleeps_after_each_batch_by_the_pace_and_shrinks_its_batches_while_busy(start_service, db):
    now = dt.datetime.now(dt.timezone.utc)
    for tasks, queue in ((700, "billing"), (50, "mail")):
        options = FillOptions(tasks=tasks, queue=queue, age_s=8 * DAY_S)
        await trio.to_thread.run_sync(lambda o=options: fill(db, o, now=now))
    service = await start_service()
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        await trio.sleep(0)

    # billing: idle 300, busy 100, 100, idle 200 (the rest); then mail: busy 50 (all of it)
    flags = iter([False, True, True, False, True, False])
    seen: list[bool] = []

    def busy() -> bool:
        seen.append(next(flags))
        return seen[-1]

    retention = service.retention
    # Without waits for gaps in dispatch (tested below), so the pauses are the rule's alone.
    retention.pace = PurgePace(idle_share=0.5, busy_share=0.1, idle_batch=300, busy_batch=100, min_pause=0.001,
                               gap_wait=0, yield_budget=0)
    retention.busy, retention.timer, retention.sleep = busy, _Ticks(0.02), sleep
    with trio.fail_after(30):
        assert await retention.purge_pass() == 750
    # One look before the first batch and one after each pause; a pause after every batch that
    # found something, slept before the next batch, also when that is the next queue's first.
    assert seen == [False, True, True, False, True]
    assert slept == pytest.approx([0.02, 0.18, 0.18, 0.02])  # 0.02 s at 1/2, then at 1/10, twice; 1/2
    assert retention.metrics.purge_batches == 5
    assert rows(db, "SELECT COUNT(*) FROM tasks WHERE queue IN ('billing', 'mail')")[0][0] == 0


async def test_dispatch_activity_is_busy_while_this_process_assigns_and_acks(start_service, connect, worker_token,
                                                                           client):
    service = await start_service()
    clock = [0.0]
    activity = DispatchActivity(service.metrics, hold=2.0, clock=lambda: clock[0])
    assert not activity()
    worker = await connect(service, worker_token)
    await worker.register(["billing"], capacity=1)
    await trio.to_thread.run_sync(client.submit, "billing", "invoice.send")
    held = await worker.expect_assign()
    await worker.ok(worker.start(held))
    await worker.ok(worker.finish(held))
    while sum(service.metrics.commands.values()) < 2:  # counted once its reply is on its way
        await trio.sleep(0.01)
    assert activity()  # an assignment and two acked commands since the last look
    clock[0] = 1.9
    assert activity()  # nothing since, but a light stream's next task may be a moment away
    clock[0] = 2.0
    assert not activity()  # nothing for the whole hold: the purge may take its idle share


async def test_serve_paces_its_purge_with_the_busy_share_it_was_given(start_service):
    service = await start_service(purge_busy_share=0.2)
    assert (service.retention.pace.busy_share, service.retention.pace.idle_share) == (0.2, PurgePace().idle_share)
    assert isinstance(service.retention.busy, DispatchActivity)


@read_only(takes_locks=False)
def _sleeping(tx: Tx, *, seconds: float) -> None:
    """Foreground work that lasts ``seconds`` (the database sleeps): dispatch, as far as the purge can tell."""
    tx.one("SELECT SLEEP(%s)", (seconds,))


async def _fill(db, tasks: int) -> None:
    options = FillOptions(tasks=tasks, queue="billing", age_s=8 * DAY_S)
    await trio.to_thread.run_sync(lambda: fill(db, options, now=dt.datetime.now(dt.timezone.utc)))


async def test_a_batch_waits_for_a_gap_in_this_process_s_foreground_work(start_service, db):
    await _fill(db, 150)
    service = await start_service()
    retention = service.retention
    retention.pace = PurgePace(idle_batch=100, busy_batch=100, min_pause=0.001, quiet=0.05, gap_wait=5)
    batches_at: list[float] = []

    def timer() -> float:  # read just before each batch and just after it
        batches_at.append(trio.current_time())
        return time.perf_counter()

    retention.timer = timer
    ended: list[float] = []

    async def foreground() -> None:
        await service.store.run(_sleeping, seconds=0.4)
        ended.append(trio.current_time())

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(foreground)
            await trio.sleep(0.05)
            assert service.store.activity.running >= 1  # the transaction (and whatever else the service runs)
            assert await retention.purge_pass() == 150
    # The first batch began once the 0.4 s transaction had ended and 0.05 s had been quiet. (The second looks
    # for a gap no longer than the short pause before it, and may not find one among the service's own polls.)
    assert batches_at[0] - ended[0] >= 0.05 - 0.005


async def test_without_gaps_a_batch_goes_after_the_gap_wait_which_comes_off_its_pause(start_service, db):
    await _fill(db, 200)
    service = await start_service()
    retention = service.retention
    retention.pace = PurgePace(idle_share=0.5, idle_batch=100, busy_batch=100, min_pause=0.001, quiet=0.05,
                               gap_wait=0.1, yield_budget=0.05)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        await trio.sleep(0)

    retention.busy, retention.timer, retention.sleep = (lambda: False), _Ticks(0.3), sleep
    busy = trio.Event()

    async def never_quiet(offset: float) -> None:  # two overlapping streams: never a moment without one
        await trio.sleep(offset)
        busy.set()
        while True:
            await service.store.run(_sleeping, seconds=0.04)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(never_quiet, 0)
            nursery.start_soon(never_quiet, 0.02)
            await busy.wait()
            await trio.sleep(0.05)
            assert await retention.purge_pass() == 200
            nursery.cancel_scope.cancel()
    # Every batch went anyway, each after the full gap wait: two full ones, one from the position on that
    # finds nothing, one from the start that finds nothing; having found no gap, none waited between its
    # statements. Each pause after a full batch is its 0.3 s at 1/2, less the 0.1 s it waited for a gap.
    assert retention.gaps_missed == 4
    assert slept == [pytest.approx(0.3 - 0.1, abs=0.03), pytest.approx(0.3 - 0.1, abs=0.03)]
