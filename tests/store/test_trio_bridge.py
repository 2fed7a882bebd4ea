"""The store's Trio bridge: awaited transactions, and the hook that times them for the metrics."""

from __future__ import annotations

from pulse_trio.store.tokens import live_token
from pulse_trio.store.trio_bridge import Store
from pulse_trio.store.views import get_task


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
