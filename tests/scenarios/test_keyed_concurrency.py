"""Keyed concurrency end to end (docs/keyed-concurrency.md §3): the `key_permit` chart through the wire."""

from __future__ import annotations

import trio

from pulse_trio.contract.grammar import parse_time
from scenario_support import Held, error_code, offered, running

TTL = 6
START_TIMEOUT = 4
SETTINGS = dict(start_timeout=START_TIMEOUT, lease_ttl=TTL, cancel_grace=5)


def token(held) -> int:
    return int(held.task["concurrency_token"])


async def test_per_key_limit_and_strictly_increasing_tokens(virtual_clock, scenario_service, connect_worker, submit,
                                                            operator):
    service = await scenario_service(**dict(SETTINGS, start_timeout=60))
    ops = operator(service)
    await submit.many(service, [dict(concurrency_key="customer:42", idempotency_key=f"a{i}") for i in range(3)]
                      + [dict(concurrency_key="customer:7", concurrency_limit=2, idempotency_key=f"b{i}")
                         for i in range(3)])
    async with connect_worker(service, concurrency_keys=True) as worker:
        await worker.capacity(10)
        first = [await offered(worker) for _ in range(3)]  # one of customer:42, two of customer:7
        await worker.listen(3)
        assert not worker.pushed("task.assign")  # every other one waits for a permit
        by_key = {}
        for h in first:
            by_key.setdefault(h.task["concurrency_key"], []).append(h)
        assert len(by_key["customer:42"]) == 1 and len(by_key["customer:7"]) == 2
        assert sorted(token(h) for h in by_key["customer:7"]) == [1, 2] and token(by_key["customer:42"][0]) == 1
        tokens = {"customer:42": [1], "customer:7": [1, 2]}
        held = list(first)
        while held:
            h = held.pop(0)
            await h.start()
            assert (await h.finish())["type"] == "ack"  # release: the next of that key is offered
            await worker.listen(1.5)
            for frame in list(worker.pushed("task.assign")):
                worker.pushes.remove(frame)
                nxt = Held(worker, frame)
                tokens[nxt.task["concurrency_key"]].append(token(nxt))
                held.append(nxt)
    assert tokens["customer:42"] == [1, 2, 3] and tokens["customer:7"] == sorted(tokens["customer:7"])
    assert len(set(tokens["customer:7"])) == 3
    listing = await trio.to_thread.run_sync(lambda: ops.client.list(state="SUCCEEDED"))
    assert len(listing["tasks"]) == 6


async def test_permit_released_on_lapse_and_on_revoke(virtual_clock, scenario_service, connect_worker, submit,
                                                      operator):
    service = await scenario_service(**SETTINGS)
    ops = operator(service)
    a = await submit(service, concurrency_key="k", idempotency_key="a")
    b = await submit(service, concurrency_key="k", idempotency_key="b")
    async with connect_worker(service, concurrency_keys=True, cancellation_notifications=True) as worker:
        await worker.capacity(5)
        one = await offered(worker)
        assert one.task_id == a["task_id"] and token(one) == 1
        # never started: the offer lapses, its permit is released, the key's next grant is token 2
        two = await offered(worker)
        assert two.task_id == a["task_id"] and token(two) == 2
        assert error_code(await one.start()) == "lease_expired"
        # cancelled before start: revoked, permit released, b gets the key with token 3
        await ops.cancel(a["task_id"])
        three = await offered(worker)
        assert three.task_id == b["task_id"] and token(three) == 3
        assert error_code(await two.start()) == "task_cancelled"
        await three.start()
        await three.finish()
    view = await ops.get(b["task_id"])
    assert view["attempts"][0]["concurrency_token"] == "3"


async def test_lost_started_lease_quarantines_the_permit_for_the_lease_ttl(
        virtual_clock, scenario_service, connect_worker, submit, operator):
    service = await scenario_service(**SETTINGS)  # permit_quarantine: default, the task's lease ttl
    ops = operator(service)
    a = await submit(service, concurrency_key="k", idempotency_key="a", lease_ttl=8)
    b = await submit(service, concurrency_key="k", idempotency_key="b")
    async with connect_worker(service, concurrency_keys=True) as worker:
        await worker.capacity(5)
        lost = await running(worker)
        assert lost.task_id == a["task_id"]
        expires = lost.lease["expires_at"]
        await ops.wait_state(a["task_id"], "UNKNOWN")
        expired_at = service.clock.now()
        # the lost worker may still run: the key stays taken for 8 s more
        nxt = await offered(worker)
        waited = (service.clock.now() - expired_at).total_seconds()
        assert nxt.task_id == b["task_id"] and token(nxt) == 2
        assert (service.clock.now() - parse_time(expires)).total_seconds() >= 8
        assert waited > 0
        await nxt.start()
        await nxt.finish()


async def test_permit_quarantine_setting_and_release_after_it(virtual_clock, scenario_service, connect_worker,
                                                              submit, operator):
    service = await scenario_service(**SETTINGS, permit_quarantine=20)
    ops = operator(service)
    a = await submit(service, concurrency_key="k", idempotency_key="a", retry_uncertain=True)
    async with connect_worker(service, concurrency_keys=True) as worker:
        await worker.capacity(5)
        lost = await running(worker)
        expires = parse_time(lost.lease["expires_at"])
        # retry_uncertain: the task is READY again at once, but its own key is quarantined
        again = await offered(worker)
        assert again.task_id == a["task_id"] and again.task["effect_uncertain"] is True
        assert token(again) == 2 and again.task["attempt"] == 2
        assert (service.clock.now() - expires).total_seconds() >= 20
        await again.start()
        await again.finish()
    assert (await ops.state(a["task_id"])) == "SUCCEEDED"


async def test_keyed_tasks_go_only_to_sessions_that_declared_keys(virtual_clock, scenario_service, connect_worker,
                                                                  submit, operator):
    service = await scenario_service(**SETTINGS)
    ops = operator(service)
    keyed = await submit(service, concurrency_key="k")
    plain = await submit(service)
    async with connect_worker(service) as undeclared:
        await undeclared.capacity(5)
        got = await offered(undeclared)
        assert got.task_id == plain["task_id"] and "concurrency_key" not in got.task
        await undeclared.listen(START_TIMEOUT + 3)
        # the plain offer lapsed and came back; the keyed task never came
        assert all("concurrency_key" not in f["body"]["task"] for f in undeclared.pushed("task.assign"))
        assert (await ops.state(keyed["task_id"])) == "READY"
        async with connect_worker(service, concurrency_keys=True) as declared:
            await declared.capacity(5)
            mine = await offered(declared)
            assert mine.task_id == keyed["task_id"] and mine.task["concurrency_token"] == "1"
            await mine.start()
            # a (newer) session without the declaration cannot take the keyed lease over
            async with connect_worker(service) as newer_undeclared:
                refused = await newer_undeclared.resume(declared, mine.credentials)
                assert error_code(refused) == "concurrency_keys_not_declared"
            assert (await mine.finish())["type"] == "ack"


async def test_a_blocked_key_does_not_block_other_keys_or_unkeyed_tasks(
        virtual_clock, scenario_service, connect_worker, submit):
    service = await scenario_service(**SETTINGS)
    # 40 "hot" tasks first (ahead in pick-up order, more than one scan page), then the others
    hot_specs = [dict(concurrency_key="hot", idempotency_key=f"hot{i}") for i in range(40)]
    hot_done = await submit.many(service, hot_specs)
    await trio.sleep(1)
    specs = [dict(concurrency_key="cold", idempotency_key="cold")] + [dict(idempotency_key=f"plain{i}")
                                                                       for i in range(3)]
    done = await submit.many(service, specs)
    ids = {spec["idempotency_key"]: d["task_id"] for spec, d in zip(hot_specs + specs, hot_done + done)}
    async with connect_worker(service, concurrency_keys=True) as worker:
        await worker.capacity(10)
        got = [await offered(worker) for _ in range(5)]
        await worker.listen(2)
        assert not worker.pushed("task.assign")
    hot = {ids[f"hot{i}"] for i in range(40)}
    got_ids = {h.task_id for h in got}
    assert len(got_ids & hot) == 1  # one permit of "hot"; the other 39 are skipped, not waited on
    assert got_ids - hot == {ids["cold"], ids["plain0"], ids["plain1"], ids["plain2"]}


async def test_a_deep_backlog_of_a_blocked_key_blocks_nothing_behind_it(
        virtual_clock, scenario_service, connect_worker, holding, submit):
    """The issue's case: far more blocked tasks ahead, at a higher priority, than any claim page or scan bound."""
    service = await scenario_service(**dict(SETTINGS, start_timeout=60, lease_ttl=600))
    await submit(service, concurrency_key="hot", idempotency_key="hot-held")
    async with holding(service, concurrency_keys=True) as (_, held):
        assert held.task["concurrency_key"] == "hot"  # the key's one permit is taken and stays taken
        for queue in ("q", "r"):
            await submit.many(service, [dict(queue=queue, concurrency_key="hot", priority=9,
                                             idempotency_key=f"hot-{queue}{i}") for i in range(1200)])
        await trio.sleep(1)
        behind = await submit.many(service, [dict(idempotency_key="plain-q"),
                                             dict(queue="r", idempotency_key="plain-r", priority=2),
                                             dict(queue="r", concurrency_key="cold", idempotency_key="cold-r")])
        async with connect_worker(service, queues=("q", "r"), concurrency_keys=True) as worker:
            await worker.capacity(10)
            with trio.fail_after(2):  # a dispatch pass or two, not a walk through the backlog
                got = [await offered(worker) for _ in range(3)]
            await worker.listen(2)
            assert not worker.pushed("task.assign")
    assert {h.task_id for h in got} == {d["task_id"] for d in behind}
