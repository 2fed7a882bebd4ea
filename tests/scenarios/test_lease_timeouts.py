"""Offer lapse, lease expiry, renew against expiry, resume: on the virtual clock (docs/tasks.md §5, docs/retries.md §2)."""

from __future__ import annotations

import trio

from scenario_support import error_code, offered, running, sleep_until_wire

TTL = 5
START_TIMEOUT = 5
SETTINGS = dict(start_timeout=START_TIMEOUT, lease_ttl=TTL)


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


async def test_start_after_the_offer_lapsed_is_refused(virtual_clock, one_task, holding):
    service, ops, task = await one_task(SETTINGS)
    async with holding(service, start=False) as (worker, held):
        await sleep_until_wire(service, held.lease["expires_at"])
        assert error_code(await held.start()) == "lease_expired"
        again = await offered(worker)  # READY again, offered again
        assert again.task_id == task["task_id"] and again.task["attempt"] == 1
        assert (await again.start())["type"] == "ack"
        assert (await again.finish())["type"] == "ack"
    view = await ops.get(task["task_id"])
    assert view["state"] == "SUCCEEDED" and view["attempt"] == 1 and len(view["attempts"]) == 1
    assert view["effect_uncertain"] is False and view["outcome"]["effect_uncertain"] is False


async def test_expiry_after_start_with_retry_uncertain_redispatches_uncertain(virtual_clock, one_task, holding):
    service, ops, task = await one_task(SETTINGS, retry_uncertain=True, max_attempts=3)
    async with holding(service) as (worker, lost):
        assert lost.task["attempt"] == 1 and "effect_uncertain" not in lost.task
        # the worker goes silent: no renew, no finish
        again = await offered(worker)
        assert again.task_id == task["task_id"]
        assert again.task["attempt"] == 2 and again.task["effect_uncertain"] is True
        assert error_code(await lost.renew()) == "lease_expired"
        view = await ops.get(task["task_id"])
        assert view["state"] == "OFFERED" and view["effect_uncertain"] is True
        assert [(a["attempt"], a["status"], a["error_code"]) for a in view["attempts"]] == [
            (1, "EXPIRED", "lease_expired")]
        await again.start()
        await again.finish()
    view = await ops.get(task["task_id"])
    assert view["state"] == "SUCCEEDED" and view["attempt"] == 2
    assert [a["effect_uncertain"] for a in view["attempts"]] == [False, True]


async def test_expiry_after_start_without_retry_uncertain_is_terminal_unknown(virtual_clock, one_task, holding):
    service, ops, task = await one_task(SETTINGS, max_attempts=3)
    async with holding(service) as (worker, lost):
        await sleep_until_wire(service, lost.lease["expires_at"], 3)
        view = await ops.wait_state(task["task_id"], "UNKNOWN")
        assert error_code(await lost.finish()) == "lease_expired"  # too late: the outcome is decided
        await worker.listen(3 * TTL)
        assert not worker.pushed("task.assign")  # never dispatched again
    assert view["outcome"]["status"] == "UNKNOWN" and view["outcome"]["error_code"] == "lease_expired"
    assert view["outcome"]["effect_uncertain"] is True and view["attempt"] == 1
    assert (await ops.get(task["task_id"]))["state"] == "UNKNOWN"


async def test_retry_uncertain_with_no_attempts_left_is_terminal_unknown(virtual_clock, one_task, connect_worker):
    service, ops, task = await one_task(SETTINGS, retry_uncertain=True, max_attempts=2)
    async with connect_worker(service) as worker:
        await worker.capacity(1)
        await running(worker)          # attempt 1, lost
        second = await running(worker)  # attempt 2, lost too
        assert second.task["attempt"] == 2 and second.task["effect_uncertain"] is True
        view = await ops.wait_state(task["task_id"], "UNKNOWN")
    assert view["outcome"]["error_code"] == "lease_expired" and view["attempt"] == 2


async def test_renewals_keep_a_lease_alive_past_its_ttl(virtual_clock, one_task, holding):
    service, ops, task = await one_task(SETTINGS)
    async with holding(service) as (worker, held):
        revisions = [int(held.revision)]
        for _ in range(6):  # 6 × (ttl - 1) s: well past one ttl
            await sleep_until_wire(service, held.lease["expires_at"], -1)
            reply = await held.renew()
            assert reply["type"] == "ack", reply
            revisions.append(int(held.revision))
        assert revisions == sorted(set(revisions))  # every renew: revision + 1
        assert (await held.finish())["type"] == "ack"
    assert (await ops.get(task["task_id"]))["state"] == "SUCCEEDED"


async def test_renew_racing_expiry(virtual_clock, scenario_service, connect_worker, submit, operator):
    """A renew just before expires_at wins; at or after it, the lease is gone, whether or not the timer ran."""
    service = await scenario_service(**SETTINGS)
    ops = operator(service)
    early, late = await submit(service, idempotency_key="early"), await submit(service, idempotency_key="late")
    async with connect_worker(service) as worker:
        await worker.capacity(2)
        a, b = await running(worker), await running(worker)
        held = {h.task_id: h for h in (a, b)}
        win, lose = held[early["task_id"]], held[late["task_id"]]
        # each renews at the last moment: `win` a millisecond before its expires_at, `lose` exactly at it
        for h in sorted((win, lose), key=lambda h: h.lease["expires_at"]):
            await sleep_until_wire(service, h.lease["expires_at"], -0.001 if h is win else 0.0)
            h.reply = await h.renew()
        assert win.reply["type"] == "ack" and win.reply["body"]["lease"]["state"] == "RUNNING"
        assert error_code(lose.reply) == "lease_expired"
        lost = await ops.wait_state(lose.task_id, "UNKNOWN")
        assert lost["outcome"]["error_code"] == "lease_expired"
        assert (await win.finish())["type"] == "ack"
    assert (await ops.get(win.task_id))["state"] == "SUCCEEDED"


async def test_resume_before_expiry_moves_the_lease_and_fences_the_old_session(
        virtual_clock, one_task, connect_worker, holding):
    service, ops, task = await one_task(SETTINGS)
    async with holding(service) as (old, held):
        old_epoch, old_revision = int(held.lease["epoch"]), int(held.revision)
        old_credentials = dict(held.credentials)
        await trio.sleep(TTL - 2)
        async with connect_worker(service) as new:
            await new.capacity(1)
            reply = await held.resume_on(new)
            assert reply["type"] == "ack", reply
            lease = reply["body"]
            assert int(lease["epoch"]) > old_epoch and int(lease["revision"]) == old_revision + 1
            assert lease["state"] == "RUNNING"
            # the old session is fenced off, even with the revision it held
            stale = await old.command("task.renew", old_credentials, str(old_revision))
            assert error_code(stale) == "lease_not_owned"
            # the fresh expiry carries the lease past the old one
            await trio.sleep(3)
            assert (await held.renew())["type"] == "ack"
            assert (await held.finish())["type"] == "ack"
    view = await ops.get(task["task_id"])
    assert view["state"] == "SUCCEEDED" and view["attempt"] == 1 and len(view["attempts"]) == 1


async def test_resume_of_an_offer_then_start_on_the_new_session(virtual_clock, one_task, connect_worker, holding):
    service, ops, task = await one_task(SETTINGS)
    async with holding(service, start=False) as (_, held):
        pass  # the worker goes away holding it
    async with connect_worker(service) as new:
        reply = await held.resume_on(new)
        assert reply["type"] == "ack" and reply["body"]["state"] == "OFFERED"
        assert (await held.start())["type"] == "ack"
        assert (await held.finish())["type"] == "ack"
    assert (await ops.get(task["task_id"]))["state"] == "SUCCEEDED"


async def test_resume_after_expiry_is_refused(virtual_clock, one_task, connect_worker, holding):
    service, ops, task = await one_task(SETTINGS)
    async with holding(service) as (_, held):
        pass  # the worker goes away holding it
    await sleep_until_wire(service, held.lease["expires_at"], 0.001)
    async with connect_worker(service) as new:
        assert error_code(await held.resume_on(new)) == "lease_expired"
    view = await ops.wait_state(task["task_id"], "UNKNOWN")
    assert view["outcome"]["error_code"] == "lease_expired"


async def test_resume_by_a_stale_epoch_is_not_owned(virtual_clock, one_task, connect_worker, holding):
    service, ops, task = await one_task(SETTINGS)
    async with holding(service) as (first, held):
        credentials = dict(held.credentials)
        async with connect_worker(service) as older, connect_worker(service) as newest:
            assert int(older.welcome["epoch"]) < int(newest.welcome["epoch"])
            assert (await held.resume_on(newest))["type"] == "ack"
            # the lease left `first`: resuming from it is refused, whoever asks
            assert error_code(await older.resume(first, credentials)) == "lease_not_owned"
            # resuming from its new owner by an older epoch is refused too
            assert error_code(await older.resume(newest, credentials)) == "lease_not_owned"
            # and a wrong secret is an unknown lease, not a hint
            wrong = dict(credentials, lease_secret="A" * 43)
            assert error_code(await older.resume(newest, wrong)) == "lease_not_found"
            assert (await held.finish())["type"] == "ack"
    assert (await ops.get(task["task_id"]))["state"] == "SUCCEEDED"
