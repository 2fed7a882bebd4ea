"""The store's Trio bridge: awaited transactions, the hook that times them for the metrics, and its activity."""

from __future__ import annotations

import functools
import time

import trio

from pulse_trio.store.engine.registry import read_only
from pulse_trio.store.token.tokens import live_token
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.engine.tx import Tx
from pulse_trio.store.views.task import get_task


async def test_on_transaction_hears_of_every_awaited_transaction_and_only_those(db):
    heard: list[float] = []
    store = Store(db, pool_size=1, on_transaction=heard.append)
    try:
        assert await store.run(get_task, task_id="tsk_01ARZ3NDEKTSV4RRFFQ69G5FAV") is None
        assert await store.run_batch([(get_task, {"task_id": "tsk_01ARZ3NDEKTSV4RRFFQ69G5FAV"})]) == [None]
        assert store.run_sync(live_token, token="pt_unknown") is None  # a blocking run is not the bridge's
    finally:
        store.close()
    assert len(heard) == 2 and all(seconds >= 0 for seconds in heard)


async def test_without_a_hook_the_bridge_runs_all_the_same(db):
    store = Store(db, pool_size=1)
    try:
        assert await store.run(live_token, token="pt_unknown", roles=("worker",)) is None
        assert store.statistics().threads_busy == 0
    finally:
        store.close()


@read_only(takes_locks=False)
def _sleeping(tx: Tx, *, seconds: float) -> None:
    """A transaction that lasts ``seconds`` (the database sleeps), to be busy with."""
    tx.one("SELECT SLEEP(%s)", (seconds,))


async def _seen_running(store: Store, after: float, seen: list[int]) -> None:
    await trio.sleep(after)
    seen.append(store.activity.running)


async def test_activity_counts_foreground_work_but_not_work_run_aside(db):
    store = Store(db, pool_size=2)
    seen: list[int] = []
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_seen_running, store, 0.1, seen)
            await store.run(_sleeping, seconds=0.3)
        assert not store.activity.quiet_for(60)  # it just ended
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_seen_running, store, 0.1, seen)
            await store.run_aside(_sleeping, seconds=0.3)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_seen_running, store, 0.1, seen)
            await store.in_thread(lambda: time.sleep(0.3))  # the HTTP API's blocking calls count too
    finally:
        store.close()
    assert seen == [1, 0, 1]
    assert store.activity.quiet_for(0.0) and store.activity.running == 0


async def test_a_gap_comes_once_foreground_work_has_paused_for_the_quiet_asked_or_not_within_the_limit(db):
    store = Store(db, pool_size=3)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(store.run, _sleeping, seconds=0.3))
            await trio.sleep(0.05)
            began = trio.current_time()
            assert await store.activity.gap(0.1, limit=5)
            assert trio.current_time() - began >= 0.25 + 0.1 - 0.02  # the rest of the 0.3 s, then the 0.1 s
        assert await store.activity.gap(0.0, limit=0)  # quiet already: no wait at all
        # From a worker thread, as a purge batch waits between its statements.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(store.run, _sleeping, seconds=0.3))
            await trio.sleep(0.05)
            waited = await trio.to_thread.run_sync(store.activity.wait_quiet, 0.05, 5.0)
            assert 0.25 <= waited < 2
        # Work without a pause: the gap never comes, and the wait ends at the limit.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(store.run, _sleeping, seconds=0.6))
            await trio.sleep(0.05)
            began = trio.current_time()
            assert not await store.activity.gap(0.01, limit=0.2)
            assert 0.18 <= trio.current_time() - began < 0.5
            assert 0.18 <= await trio.to_thread.run_sync(store.activity.wait_quiet, 0.01, 0.2) < 0.35
    finally:
        store.close()
