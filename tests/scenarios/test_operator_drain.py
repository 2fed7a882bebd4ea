"""An operator's drain on the wire: what a worker can ask, and what follows it to a reconnect (docs/worker.md §9.2).

The drain is made through the database (``Client.drain``), as another serve
instance or the CLI would, so nothing in this instance's memory tells the
session: only the stored state does.
"""

from __future__ import annotations

import trio

from scenario_support import running


async def _drain(db_client, instance_id: str) -> dict:
    return await trio.to_thread.run_sync(lambda: db_client.drain(instance_id))


async def test_a_repeated_sequence_shows_an_operators_drain(virtual_clock, scenario_service, connect_worker, submit,
                                                            client):
    service = await scenario_service()
    async with connect_worker(service) as worker:
        ack = await worker.capacity(2)
        assert ack["body"]["drain"] is False and ack["body"]["sequence"] == "1"
        await _drain(client, worker.welcome["instance_id"])
        again = await worker.answer(await worker.send("worker.capacity",
                                                      {"sequence": "1", "capacity": 2, "drain": False}))
        assert again["type"] == "ack", again
        assert (again["body"]["sequence"], again["body"]["capacity"], again["body"]["drain"]) == ("1", 2, True)
        await submit(service)
        await worker.listen(5)
        assert worker.pushed("task.assign") == []


async def test_the_drain_follows_a_lease_to_the_session_that_resumes_it(virtual_clock, scenario_service,
                                                                         connect_worker, submit, client):
    service = await scenario_service()
    await submit(service)
    async with connect_worker(service) as first:
        await first.capacity(1)
        held = await running(first)
        await _drain(client, first.welcome["instance_id"])
        async with connect_worker(service) as second:
            assert (await held.resume_on(second))["type"] == "ack"
            ack = await second.capacity(2)
            assert ack["body"]["drain"] is True, ack  # a drain=false frame cannot lift it
            await submit(service)
            await second.listen(5)
            assert second.pushed("task.assign") == []
            assert (await held.finish())["type"] == "ack"  # its leases go on
            workers = await trio.to_thread.run_sync(client.workers)
            [view] = [w for w in workers if w["instance_id"] == second.welcome["instance_id"]]
            assert view["drain"] is True


async def test_a_session_that_resumes_nothing_from_a_drained_instance_is_not_drained(
        virtual_clock, scenario_service, connect_worker, submit, client):
    service = await scenario_service()
    async with connect_worker(service) as first:
        await first.capacity(1)
        await _drain(client, first.welcome["instance_id"])
    async with connect_worker(service) as second:
        ack = await second.capacity(1)
        assert ack["body"]["drain"] is False
        task = await submit(service)
        assign = await second.push("task.assign")
        assert assign["body"]["task"]["task_id"] == task["task_id"]
