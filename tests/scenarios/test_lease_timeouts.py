"""Offer lapse and lease expiry, on the virtual clock."""

from __future__ import annotations

import trio


async def test_offer_lapses_without_costing_an_attempt(virtual_clock, scenario_service, connect_worker, submit):
    service = await scenario_service(start_timeout=30, lease_ttl=30)
    task = await submit(service)
    async with connect_worker(service) as worker:
        await worker.capacity(1)
        first = await worker.push("task.assign")
        assert first["body"]["task"]["attempt"] == 1
        await trio.sleep(31)  # virtual: the offer was never started
        second = await worker.push("task.assign")
    assert second["body"]["task"]["task_id"] == task["task_id"]
    assert second["body"]["task"]["attempt"] == 1 and "effect_uncertain" not in second["body"]["task"]
    assert second["body"]["lease"]["lease_id"] != first["body"]["lease"]["lease_id"]
