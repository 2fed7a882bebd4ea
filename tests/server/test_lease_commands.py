"""task.start / task.renew / task.finish: every acceptance, refusal and replay."""

from __future__ import annotations

import json

import pytest
import trio

UNKNOWN_LEASE = "lse_01KBFEY3G05SYNQT44FQ3AKSZY"
OTHER_SECRET = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE"


async def take(service, connect, token, client, *, name="w", capacity=1, queues=("billing",), **submit):
    """A registered worker holding one offered task (submitted here)."""
    w = await connect(service, token, name=name)
    await w.register(list(queues), capacity=capacity)
    task = client.submit(queues[0], "invoice.send", {"invoice": 991}, **submit)
    held = await w.expect_assign()
    assert held.task_id == task["task_id"]
    return w, held


async def test_start_renew_finish_happy_path(start_service, connect, worker_token, client):
    service = await start_service()
    w, held = await take(service, connect, worker_token, client, idempotency_key="invoice-991", max_attempts=5)
    assert held.task["payload"] == {"invoice": 991} and held.task["attempt"] == 1
    assert held.task["max_attempts"] == 5 and held.task["idempotency_key"] == "invoice-991"
    started = await w.ok(w.start(held))
    assert started["receipt"]["duplicate"] is False and started["lease"]["state"] == "RUNNING"
    assert held.revision == int(started["lease"]["revision"])
    assert client.get(held.task_id)["state"] == "RUNNING"
    for _ in range(3):
        before = held.revision
        renewed = await w.ok(w.renew(held))
        assert int(renewed["lease"]["revision"]) == before + 1
        assert renewed["lease"]["expires_at"] >= started["lease"]["expires_at"]
    done = await w.ok(w.finish(held, result={"sent": True, "n": 1.50}))
    assert "lease" not in done and done["receipt"]["command"] == "task.finish"
    shown = client.get(held.task_id)
    assert shown["state"] == "SUCCEEDED" and shown["outcome"]["result"] == {"sent": True, "n": 1.50}


async def test_result_numbers_survive_digit_for_digit(start_service, connect, worker_token, client):
    service = await start_service()
    w, held = await take(service, connect, worker_token, client)
    await w.ok(w.start(held))
    text = ('{"protocol_version":"1","type":"task.finish","id":"f1","session_id":"%s","body":{"task_id":"%s",'
            '"lease_id":"%s","lease_secret":"%s","revision":"%d","status":"SUCCEEDED",'
            '"result":{"big":123456789012345678901234567890,"exact":0.10000000000000000001,"e":1E+300}}}'
            % (w.session_id, held.task_id, held.lease_id, held.lease_secret, held.revision))
    reply = await w.reply(await w.send_valid_text(text))
    assert reply["type"] == "ack", reply
    stored = client.get_json_text(held.task_id)
    assert "123456789012345678901234567890" in stored and "0.10000000000000000001" in stored


@pytest.mark.parametrize("status", ["FAILED", "UNKNOWN"])
async def test_failed_and_unknown_outcomes_are_recorded(start_service, connect, worker_token, client, status):
    service = await start_service()
    w, held = await take(service, connect, worker_token, client)
    await w.ok(w.start(held))
    await w.ok(w.finish(held, status, result={"why": "x"}, error_code="smtp.down", error_message="no route"))
    outcome = client.get(held.task_id)["outcome"]
    assert (outcome["status"], outcome["error_code"], outcome["error_message"]) == (status, "smtp.down",
                                                                                   "no route")


async def test_retryable_failure_comes_back_as_the_next_attempt(start_service, connect, worker_token, client):
    service = await start_service()
    w, held = await take(service, connect, worker_token, client, max_attempts=2)
    await w.ok(w.start(held))
    await w.ok(w.finish(held, "FAILED", error_code="smtp.down", retryable=True))
    assert client.get(held.task_id)["state"] in ("SCHEDULED", "READY")


async def test_lease_not_found_for_unknown_lease_wrong_secret_and_wrong_task(start_service, connect,
                                                                             worker_token, client):
    service = await start_service()
    w, held = await take(service, connect, worker_token, client, capacity=2)
    other_task = client.submit("billing", "invoice.send", {})
    other = await w.expect_assign()
    assert other.task_id == other_task["task_id"]
    for body in (
        held.body() | {"lease_id": UNKNOWN_LEASE},
        held.body() | {"lease_secret": OTHER_SECRET},
        held.body() | {"lease_secret": other.lease_secret},
        held.body() | {"task_id": other.task_id},
    ):
        for command in ("task.start", "task.renew"):
            w.assert_error(await w.request(command, body), "lease_not_found")
        finish = body | {"status": "SUCCEEDED", "result": {}}
        w.assert_error(await w.request("task.finish", finish), "lease_not_found")
    await w.ok(w.start(held))  # nothing above changed the lease


async def test_invalid_transitions_renew_or_finish_before_start_and_start_twice(start_service, connect,
                                                                                worker_token, client):
    service = await start_service()
    w, held = await take(service, connect, worker_token, client)
    w.assert_error(await w.renew(held), "invalid_transition")
    w.assert_error(await w.finish(held), "invalid_transition")
    await w.ok(w.start(held))
    w.assert_error(await w.start(held), "invalid_transition")  # current revision, already RUNNING
    await w.ok(w.finish(held))


async def test_revision_conflict_for_stale_future_and_other_content(start_service, connect, worker_token, client):
    service = await start_service()
    w, held = await take(service, connect, worker_token, client)
    await w.ok(w.start(held))  # revision 1 -> 2
    await w.ok(w.renew(held))  # 2 -> 3
    # Revision 1 has the start's receipt: a renew there is other content.
    w.assert_error(await w.renew(held, revision=1), "revision_conflict")
    # Revision 2 has a renew receipt: a finish there is other content.
    w.assert_error(await w.finish(held, revision=2), "revision_conflict")
    # A revision the lease never had.
    w.assert_error(await w.renew(held, revision=held.revision + 5), "revision_conflict")
    renewed = await w.ok(w.renew(held))
    assert renewed["receipt"]["duplicate"] is False


async def test_duplicate_replay_returns_the_stored_receipt(start_service, connect, worker_token, client):
    service = await start_service()
    w, held = await take(service, connect, worker_token, client)
    first = await w.ok(w.start(held, revision=1))
    again = await w.ok(w.start(held, revision=1))
    assert again["receipt"] == {**first["receipt"], "duplicate": True}
    assert again["lease"]["revision"] == first["lease"]["revision"]  # still held: the current lease
    renewed = await w.ok(w.renew(held, revision=2))
    replay = await w.ok(w.renew(held, revision=2))
    assert replay["receipt"] == {**renewed["receipt"], "duplicate": True}
    assert "lease" in replay
    final = held.revision
    done = await w.ok(w.finish(held, result={"a": 1}, revision=final))
    twice = await w.ok(w.finish(held, result={"a": 1}, revision=final))
    assert twice["receipt"] == {**done["receipt"], "duplicate": True} and "lease" not in twice
    # Same revision, other content -> conflict, even after the end.
    w.assert_error(await w.finish(held, result={"a": 2}, revision=final), "revision_conflict")
    w.assert_error(await w.finish(held, "FAILED", result={"a": 1}, revision=final), "revision_conflict")
    # A replay after the finish: the receipt, but no lease (the right ended).
    late = await w.ok(w.start(held, revision=1))
    assert late["receipt"] == {**first["receipt"], "duplicate": True} and "lease" not in late
    assert client.get(held.task_id)["outcome"]["result"] == {"a": 1}


async def test_result_too_large_and_invalid_results(start_service, connect, worker_token, client):
    service = await start_service()
    w, held = await take(service, connect, worker_token, client)
    await w.ok(w.start(held))
    big = {"blob": "x" * (256 * 1024)}  # over 256 KiB as a result, well under the 512 KiB frame
    w.assert_error(await w.finish(held, result=big), "result_too_large")
    just = {"blob": "x" * (256 * 1024 - len('{"blob":""}'))}
    assert len(json.dumps(just, separators=(",", ":"))) == 256 * 1024
    base = held.body() | {"status": "SUCCEEDED"}
    for i, raw_result in enumerate(("null", "1e309", "-1E400", "1" * 4301, '{"n":[1e999]}')):
        text = json.dumps({"protocol_version": "1", "type": "task.finish", "id": f"r{i}",
                           "session_id": w.session_id, "body": base | {"result": "@"}}).replace('"@"', raw_result)
        await w.send_text(text)
        await w.expect_error("invalid_result", fatal=False, reply_to=f"r{i}")
    ok = await w.ok(w.finish(held, result=just))
    assert ok["receipt"]["duplicate"] is False
    assert client.get(held.task_id)["state"] == "SUCCEEDED"


@pytest.mark.parametrize("raw_result", ["1e308", "-1E-308", "9" * 4300, '{"deep":' * 28 + "1" + "}" * 28])
async def test_results_at_the_limits_are_accepted(start_service, connect, worker_token, client, raw_result):
    service = await start_service()
    w, held = await take(service, connect, worker_token, client)
    await w.ok(w.start(held))
    text = json.dumps({"protocol_version": "1", "type": "task.finish", "id": "f", "session_id": w.session_id,
                       "body": held.body() | {"status": "SUCCEEDED", "result": "@"}}).replace('"@"', raw_result)
    reply = await w.reply(await w.send_valid_text(text))
    assert reply["type"] == "ack", reply
    assert raw_result in client.get_json_text(held.task_id)


async def test_finish_field_rules_are_invalid_frame(start_service, connect, worker_token, client):
    service = await start_service()
    w, held = await take(service, connect, worker_token, client)
    await w.ok(w.start(held))
    base = held.body() | {"result": {}}
    for i, extra in enumerate((
        {"status": "FAILED"},  # error_code required
        {"status": "FAILED", "error_code": ""},
        {"status": "SUCCEEDED", "error_code": "x"},
        {"status": "SUCCEEDED", "retryable": True},
        {"status": "DONE"},
        {"status": "SUCCEEDED", "error_message": "m" * 4097},
    )):
        text = json.dumps({"protocol_version": "1", "type": "task.finish", "id": f"i{i}",
                           "session_id": w.session_id, "body": base | extra})
        await w.send_text(text)
        await w.expect_error("invalid_frame", fatal=False, reply_to=f"i{i}")
    await w.ok(w.finish(held, "SUCCEEDED", error_code=""))


async def test_cancel_not_requested_and_task_cancelled(start_service, connect, worker_token, client):
    service = await start_service()
    w, held = await take(service, connect, worker_token, client, capacity=2)
    await w.ok(w.start(held))
    w.assert_error(await w.finish(held, "CANCELLED", error_code="cancelled"), "cancel_not_requested")
    # Cancelled before start: the offer is revoked, the start refused.
    offered = client.submit("billing", "invoice.send", {})
    second = await w.expect_assign()
    assert second.task_id == offered["task_id"]
    client.cancel(second.task_id, reason="operator")
    w.assert_error(await w.start(second), "task_cancelled")
    assert client.get(second.task_id)["state"] == "CANCELLED"
    # Cancelled while running: the renew shows it, CANCELLED is accepted.
    client.cancel(held.task_id, reason="operator")
    renewed = await w.ok(w.renew(held))
    assert "cancel_requested_at" in renewed["lease"]
    await w.ok(w.finish(held, "CANCELLED", error_code="cancelled"))
    assert client.get(held.task_id)["state"] == "CANCELLED"


async def test_task_cancel_is_pushed_only_to_sessions_that_opted_in(start_service, connect, worker_token, client):
    service = await start_service()
    loud = await connect(service, worker_token, name="loud")
    await loud.register(["billing"], capacity=1, cancellation_notifications=True)
    quiet = await connect(service, worker_token, name="quiet")
    await quiet.register(["mail"], capacity=1)
    a = client.submit("billing", "invoice.send", {})
    b = client.submit("mail", "digest", {})
    held_a, held_b = await loud.expect_assign(), await quiet.expect_assign()
    await loud.ok(loud.start(held_a))
    await quiet.ok(quiet.start(held_b))
    client.cancel(a["task_id"], reason="operator")
    client.cancel(b["task_id"], reason="operator")
    notice = await loud.expect_cancel()
    assert (notice["task_id"], notice["lease_id"], notice["reason"]) == (held_a.task_id, held_a.lease_id,
                                                                        "operator")
    assert notice["grace_expires_at"] >= notice["cancel_requested_at"]
    # The quiet session learns of it only through its renew (the harness fails any task.cancel to it).
    renewed = await quiet.ok(quiet.renew(held_b))
    assert "cancel_requested_at" in renewed["lease"]
    for w, h in ((loud, held_a), (quiet, held_b)):
        await w.ok(w.finish(h, "CANCELLED", error_code="cancelled"))


async def test_lease_expires_in_real_time_without_renewal(start_service, connect, worker_token, client):
    service = await start_service(lease_ttl=0.5)
    w, held = await take(service, connect, worker_token, client)
    assert w.welcome["lease_ttl_ms"] == 500
    await w.ok(w.start(held))
    with trio.fail_after(10):
        while client.get(held.task_id)["state"] == "RUNNING":
            await trio.sleep(0.05)
    shown = client.get(held.task_id)
    assert shown["state"] == "UNKNOWN" and shown["outcome"]["error_code"] == "lease_expired"
    w.assert_error(await w.renew(held), "lease_expired")
    w.assert_error(await w.finish(held), "lease_expired")
    ack = await w.capacity_ok(1)
    assert ack["active_leases"] == 0


async def test_renewing_keeps_a_short_lease_alive(start_service, connect, worker_token, client):
    service = await start_service(lease_ttl=1.0)
    w, held = await take(service, connect, worker_token, client)
    await w.ok(w.start(held))
    for _ in range(8):  # about twice the ttl, renewing at a fraction of it
        await trio.sleep(0.25)
        await w.ok(w.renew(held))
    await w.ok(w.finish(held))
    assert client.get(held.task_id)["state"] == "SUCCEEDED"


async def test_an_unstarted_offer_lapses_and_the_task_is_offered_again(start_service, connect, worker_token,
                                                                       client):
    service = await start_service(start_timeout=0.3)
    w, held = await take(service, connect, worker_token, client)
    assert w.welcome["start_timeout_ms"] == 300
    w.forget(held)  # we never start it: the server will take it back
    again = await w.expect_assign()
    assert again.task_id == held.task_id and again.lease_id != held.lease_id
    assert again.task["attempt"] == 1 and "effect_uncertain" not in again.task
    w.assert_error(await w.start(held), "lease_expired")
    await w.ok(w.start(again))
    await w.ok(w.finish(again))
    shown = client.get(held.task_id)
    assert shown["state"] == "SUCCEEDED" and shown["attempt"] == 1


async def test_retry_uncertain_task_comes_back_flagged_after_expiry(start_service, connect, worker_token, client):
    service = await start_service(lease_ttl=0.5)
    w, held = await take(service, connect, worker_token, client, retry_uncertain=True, max_attempts=3)
    await w.ok(w.start(held))
    w.forget(held)
    again = await w.expect_assign()
    assert again.task_id == held.task_id and again.task["attempt"] == 2
    assert again.task["effect_uncertain"] is True


async def test_a_revoked_offer_frees_its_slot(start_service, connect, worker_token, client):
    """A producer's cancel revokes the offer in the store; the session must get new work."""
    service = await start_service()
    w, held = await take(service, connect, worker_token, client)
    client.cancel(held.task_id, reason="operator")
    w.assert_error(await w.start(held), "task_cancelled")
    follow_up = client.submit("billing", "invoice.send", {})
    assert (await w.expect_assign()).task_id == follow_up["task_id"]


async def test_cancel_grace_caps_renewals_and_then_the_task_ends_cancelled(start_service, connect, worker_token,
                                                                           db):
    from pulse_trio.client import Client

    service = await start_service(lease_ttl=30, cancel_grace=0.5)  # the cluster's grace, whoever cancels
    with Client(db) as client:
        w, held = await take(service, connect, worker_token, client)
        await w.ok(w.start(held))
        cancelled = client.cancel(held.task_id, reason="operator")
        assert cancelled["cancel_changed"] is True
        renewed = (await w.ok(w.renew(held)))["lease"]
        assert "cancel_requested_at" in renewed
        # The renewed expiry is capped by the 0.5 s grace deadline, far before now + 30 s.
        assert renewed["expires_at"] <= _plus_seconds(renewed["cancel_requested_at"], 0.5)
        w.forget(held)
        with trio.fail_after(10):
            while client.get(held.task_id)["state"] == "RUNNING":
                await trio.sleep(0.05)
        shown = client.get(held.task_id)
        assert shown["state"] == "CANCELLED" and shown["outcome"]["error_code"] == "cancel_timeout"
        w.assert_error(await w.renew(held), "lease_expired")


def _plus_seconds(stamp: str, seconds: float) -> str:
    import datetime as dt

    moment = dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ") + dt.timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def test_commands_sent_back_to_back_on_one_lease_apply_in_the_order_sent(start_service, connect,
                                                                              worker_token, client):
    """Commands that reach the batcher together run one batch at a time per lease, in the order sent."""
    service = await start_service()
    w, held = await take(service, connect, worker_token, client)
    await w.ok(w.start(held))
    first = held.revision
    ids = [await w.send(w.frame("task.renew", held.body(first + i))) for i in range(6)]
    ids.append(await w.send(w.frame("task.finish", held.body(first + 6, status="SUCCEEDED", result={"n": 7}))))
    replies = [await w.reply(i) for i in ids]
    assert [r["type"] for r in replies] == ["ack"] * 7, replies
    assert [int(r["body"]["lease"]["revision"]) for r in replies[:-1]] == [first + 1 + i for i in range(6)]
    assert client.get(held.task_id)["outcome"]["result"] == {"n": 7}



async def test_an_http_cancel_of_an_offer_refills_its_slot_at_once(start_service, connect, worker_token,
                                                                   token_factory):
    """Cancelled through this instance's HTTP API, an offer's slot is free at once: the pass the cancel
    wakes offers the READY work waiting behind it, not the lease reconciliation about a second later
    (the cancel is sent right after one; the poll is long)."""
    from http_support import Http
    from pulse_trio.server.timers import RECONCILE_EVERY_S

    service = await start_service(poll_interval=5)
    http, producer = Http(service.http_port), token_factory("producer", ["billing"])
    operator = token_factory("operator")
    w = await connect(service, worker_token)
    await w.register(["billing"], capacity=1)
    ids = []
    for n in range(2):
        reply = await http.post("/v1/tasks", token=producer, json_body={"queue": "billing", "kind": "k", "payload": n})
        assert reply.status == 201, reply.body
        ids.append(reply.json()["task_id"])
    held = await w.expect_assign()
    assert held.task_id == ids[0]  # the second waits: the session's only slot holds the offer
    timers = service.timers
    last = timers._reconciled_at
    with trio.fail_after(5):
        while timers._reconciled_at == last:
            await trio.sleep(0.005)
    deadline = timers._reconciled_at + 0.8 * RECONCILE_EVERY_S
    reply = await http.post(f"/v1/tasks/{ids[0]}/cancel", token=operator)
    assert reply.status == 200 and reply.json()["cancel_changed"] is True, reply.body
    w.forget(held)  # revoked: the worker would drop it at its start's task_cancelled
    offered = await w.expect_assign(timeout=max(0.05, deadline - trio.current_time()))
    assert offered.task_id == ids[1]
