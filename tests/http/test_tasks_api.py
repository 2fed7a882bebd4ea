"""The /v1 resources over real HTTP against a running service and database."""

from __future__ import annotations

import json
import threading

import trio
import trio_websocket

from pulse_trio.client import Client

from http_support import Http, RawWorker  # noqa: I001  (beside this file; see conftest)

SUBMIT = {"queue": "billing", "kind": "invoice.send", "payload": {"invoice": 991}}


async def test_submit_answers_201_with_the_task_view_and_a_location(http, tokens):
    reply = await http.post("/v1/tasks", token=tokens["producer"], json_body={
        **SUBMIT, "priority": 7, "max_attempts": 5, "concurrency_key": "customer:42", "retry_uncertain": True})
    assert reply.status == 201
    task = reply.json()
    assert task["state"] == "READY" and task["created"] is True
    assert (task["queue"], task["kind"], task["priority"], task["max_attempts"]) == ("billing", "invoice.send", 7, 5)
    assert task["concurrency_key"] == "customer:42" and task["retry_uncertain"] is True
    assert task["payload"] == {"invoice": 991} and task["attempts"] == [] and task["outcome"] is None
    assert (task["backoff_initial"], task["backoff_factor"], task["backoff_max"]) == (1.0, 2.0, 300.0)
    assert reply.headers["x-request-id"].startswith("req_")


async def test_submit_takes_a_retry_backoff(http, tokens):
    reply = await http.post("/v1/tasks", token=tokens["producer"], json_body={
        **SUBMIT, "backoff_initial": 0.25, "backoff_factor": 1.5, "backoff_max": 60})
    assert reply.status == 201, reply.body
    task = reply.json()
    assert (task["backoff_initial"], task["backoff_factor"], task["backoff_max"]) == (0.25, 1.5, 60.0)
    long_first = await http.post("/v1/tasks", token=tokens["producer"], json_body={**SUBMIT, "backoff_initial": 900})
    assert (long_first.json()["backoff_initial"], long_first.json()["backoff_max"]) == (900.0, 900.0)


async def test_payload_numbers_survive_digit_for_digit(http, tokens):
    body = '{"queue":"billing","kind":"k","payload":{"amount":1.10,"big":123456789012345678901234567890,"e":1E+2}}'
    reply = await http.post("/v1/tasks", token=tokens["producer"], body=body,
                            headers={"Content-Type": "application/json"})
    assert reply.status == 201
    assert b'"payload":{"amount":1.10,"big":123456789012345678901234567890,"e":1E+2}' in reply.body
    shown = await http.get(f"/v1/tasks/{reply.json()['task_id']}", token=tokens["producer"])
    assert b'{"amount":1.10,"big":123456789012345678901234567890,"e":1E+2}' in shown.body


async def test_idempotency_key_header_returns_the_existing_task_with_200(http, tokens):
    first = await http.post("/v1/tasks", token=tokens["producer"], json_body=SUBMIT,
                            headers={"Idempotency-Key": "invoice-991"})
    again = await http.post("/v1/tasks", token=tokens["producer"], json_body={**SUBMIT, "payload": {"other": 1}},
                            headers={"Idempotency-Key": "invoice-991"})
    by_field = await http.post("/v1/tasks", token=tokens["producer"],
                               json_body={**SUBMIT, "idempotency_key": "invoice-991"})
    assert (first.status, again.status, by_field.status) == (201, 200, 200)
    assert first.json()["task_id"] == again.json()["task_id"] == by_field.json()["task_id"]
    assert again.json()["created"] is False and again.json()["payload"] == {"invoice": 991}
    assert first.json()["idempotency_key"] == "invoice-991"
    clash = await http.post("/v1/tasks", token=tokens["producer"], json_body={**SUBMIT, "idempotency_key": "a"},
                            headers={"Idempotency-Key": "b"})
    assert clash.status == 400 and "disagree" in clash.error["message"]


async def test_idempotency_keys_that_differ_in_trailing_spaces_are_two_keys(http, tokens):
    """A key is any text of 1-255 characters, compared exactly: the database must not pad it."""
    first = await http.post("/v1/tasks", token=tokens["producer"],
                            json_body={**SUBMIT, "payload": {"invoice": 1}, "idempotency_key": "inv-1"})
    second = await http.post("/v1/tasks", token=tokens["producer"],
                             json_body={**SUBMIT, "payload": {"invoice": 2}, "idempotency_key": "inv-1 "})
    assert (first.status, second.status) == (201, 201), second.body
    assert second.json()["idempotency_key"] == "inv-1 " and second.json()["task_id"] != first.json()["task_id"]
    listed = await http.get("/v1/tasks?idempotency_key=inv-1%20", token=tokens["producer"])
    assert [t["task_id"] for t in listed.json()["tasks"]] == [second.json()["task_id"]]


async def test_null_optional_fields_count_as_not_given(http, tokens):
    nulls = dict.fromkeys(("priority", "delay", "due_at", "idempotency_key", "concurrency_key", "concurrency_limit",
                           "max_attempts", "retry_uncertain", "lease_ttl", "backoff_initial", "backoff_factor",
                           "backoff_max"))
    reply = await http.post("/v1/tasks", token=tokens["producer"], json_body={**SUBMIT, **nulls, "payload": None})
    assert reply.status == 201, reply.body
    task = reply.json()
    assert (task["priority"], task["max_attempts"], task["state"], task["payload"]) == (0, 3, "READY", None)


async def test_a_repeat_submit_racing_the_purge_answers_a_task_never_404(http, tokens, db):
    """A known key answers 200 with its task, and once the purge deleted that task 201 with a new one
    (docs/tasks.md §8): the view is read in the submit's own transaction, so never 404 task_not_found."""
    stop = threading.Event()

    def purge_until_stopped() -> None:
        with Client(db) as purger:
            while not stop.is_set():
                purger.purge(older_than=0, queue="billing")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, purge_until_stopped)
        try:
            for i in range(300):
                body = {**SUBMIT, "idempotency_key": f"invoice-{i}"}
                first = await http.post("/v1/tasks", token=tokens["producer"], json_body=body)
                cancel = await http.post(f"/v1/tasks/{first.json()['task_id']}/cancel", token=tokens["operator"])
                assert cancel.status == 200, cancel.body
                again = await http.post("/v1/tasks", token=tokens["producer"], json_body=body)
                assert again.status in (200, 201), again.body
                assert (again.status == 201) is (again.json()["task_id"] != first.json()["task_id"])
        finally:
            stop.set()


async def test_delay_and_due_at_schedule_the_task(http, tokens):
    delayed = await http.post("/v1/tasks", token=tokens["producer"], json_body={**SUBMIT, "delay": 3600.5})
    due = await http.post("/v1/tasks", token=tokens["producer"],
                          json_body={**SUBMIT, "due_at": "2099-01-01T00:00:00Z", "lease_ttl": 0.5})
    assert delayed.json()["state"] == due.json()["state"] == "SCHEDULED"
    assert due.json()["due_at"] == "2099-01-01T00:00:00.000000Z"


async def test_list_filters_and_pages_with_a_cursor(http, tokens):
    ids = []
    for n in range(5):
        kind = "a" if n % 2 == 0 else "b"
        reply = await http.post("/v1/tasks", token=tokens["operator"],
                                json_body={"queue": "billing" if n < 4 else "mail", "kind": kind})
        ids.append(reply.json()["task_id"])
    seen, cursor = [], ""
    while True:
        page = (await http.get(f"/v1/tasks?limit=2{cursor}", token=tokens["operator"])).json()
        seen += [t["task_id"] for t in page["tasks"]]
        if page["next"] is None:
            break
        cursor = f"&cursor={page['next']}"
    assert seen == ids
    kinds = (await http.get("/v1/tasks?queue=billing&kind=a", token=tokens["operator"])).json()["tasks"]
    assert [t["task_id"] for t in kinds] == [ids[0], ids[2]]
    ready = (await http.get("/v1/tasks?state=READY&queue=mail", token=tokens["operator"])).json()["tasks"]
    assert [t["task_id"] for t in ready] == [ids[4]]
    # a queue-scoped producer sees its queues only, with or without a filter
    scoped = (await http.get("/v1/tasks", token=tokens["producer"])).json()["tasks"]
    assert [t["task_id"] for t in scoped] == ids[:4]


async def test_cancel_a_ready_task_and_report_a_terminal_one(http, tokens):
    task_id = (await http.post("/v1/tasks", token=tokens["producer"], json_body=SUBMIT)).json()["task_id"]
    first = await http.post(f"/v1/tasks/{task_id}/cancel", token=tokens["operator"],
                            json_body={"reason": "customer asked"})
    assert first.status == 200
    assert first.json()["state"] == "CANCELLED" and first.json()["cancel_changed"] is True
    again = await http.post(f"/v1/tasks/{task_id}/cancel", token=tokens["operator"])  # empty body is fine
    assert again.status == 200 and again.json()["cancel_changed"] is False


async def test_retry_makes_one_new_task_per_source_and_refuses_live_tasks(http, tokens):
    task_id = (await http.post("/v1/tasks", token=tokens["producer"], json_body=SUBMIT)).json()["task_id"]
    live = await http.post(f"/v1/tasks/{task_id}/retry", token=tokens["operator"])
    assert live.status == 409 and live.error["code"] == "not_retryable"
    await http.post(f"/v1/tasks/{task_id}/cancel", token=tokens["operator"])
    retried = await http.post(f"/v1/tasks/{task_id}/retry", token=tokens["operator"])
    assert retried.status == 201
    new = retried.json()
    assert new["retry_of"] == task_id and new["created"] is True and new["state"] == "READY"
    repeat = await http.post(f"/v1/tasks/{task_id}/retry", token=tokens["operator"], json_body={})
    assert repeat.status == 200 and repeat.json()["task_id"] == new["task_id"] and repeat.json()["created"] is False
    source = (await http.get(f"/v1/tasks/{task_id}", token=tokens["operator"])).json()
    assert source["retried_by"] == new["task_id"]


async def test_a_submit_through_http_reaches_a_worker_and_its_outcome_is_shown(http, tokens, token_factory,
                                                                            open_worker, service):
    worker = await open_worker(token_factory("worker", ("billing",)), "billing")
    with trio.fail_after(10):
        submitted = (await http.post("/v1/tasks", token=tokens["producer"], json_body=SUBMIT)).json()
        assign = await worker.run_one({"sent": True, "amount": 12.5})
    assert assign["task"]["task_id"] == submitted["task_id"]
    done = await http.get(f"/v1/tasks/{submitted['task_id']}", token=tokens["producer"])
    task = done.json()
    assert task["state"] == "SUCCEEDED" and task["attempt"] == 1
    assert task["outcome"]["status"] == "SUCCEEDED" and b'"result":{"sent":true,"amount":12.5}' in done.body
    assert [a["status"] for a in task["attempts"]] == ["SUCCEEDED"]

    workers = (await http.get("/v1/workers", token=tokens["operator"])).json()["workers"]
    assert len(workers) == 1
    (listed,) = workers
    assert listed["session_id"] == worker.session_id and listed["capacity"] == 1 and listed["drain"] is False
    assert listed["subscriptions"] == [{"queue": "billing", "kinds": None}] and listed["active_leases"] == 0
    depths = (await http.get("/v1/queues", token=tokens["producer"])).json()["queues"]
    assert depths == {"billing": {"states": {"SUCCEEDED": 1}, "oldest_ready_age_s": None, "state": "ACTIVE",
                                  "paused": False, "paused_at": None, "paused_by": None, "task_retention": None}}


async def test_a_payload_holding_any_string_stays_the_payload_and_the_result_the_result(http, tokens, token_factory,
                                                                                      open_worker):
    """The view embeds payload and result as their stored text: no string in the payload, as a value or as a
    key, may be taken for the place of either (a NUL is a valid JSON string character)."""
    worker = await open_worker(token_factory("worker", ("billing",)), "billing")
    for payload in ({"note": "\x00result\x00"}, {"\x00result\x00": 1}):
        with trio.fail_after(10):
            submitted = await http.post("/v1/tasks", token=tokens["producer"], json_body={**SUBMIT, "payload": payload})
            await worker.run_one({"ok": True, "total": 42})
        for path in (f"/v1/tasks/{submitted.json()['task_id']}", f"/v1/tasks/{submitted.json()['task_id']}/outcome"):
            shown = (await http.get(path, token=tokens["producer"])).json()
            assert shown["payload"] == payload and shown["outcome"]["result"] == {"ok": True, "total": 42}, path


async def test_a_started_task_shows_running_at_its_attempt_and_an_offered_one_offered(http, tokens, token_factory,
                                                                                     open_worker):
    """A start writes its lease alone; the view, the listing and its state filter show what the lease says."""
    worker = await open_worker(token_factory("worker", ("billing",)), "billing", capacity=2)
    with trio.fail_after(10):
        first = (await http.post("/v1/tasks", token=tokens["producer"], json_body=SUBMIT)).json()["task_id"]
        second = (await http.post("/v1/tasks", token=tokens["producer"], json_body=SUBMIT)).json()["task_id"]
        offers = {}
        while len(offers) < 2:
            assign = await worker.next_assignment()
            offers[assign["task"]["task_id"]] = assign["lease"]
        lease = offers[first]
        await worker.request("task.start", {"task_id": first, "lease_id": lease["lease_id"],
                                            "lease_secret": lease["lease_secret"], "revision": lease["revision"]})
    shown = (await http.get(f"/v1/tasks/{first}", token=tokens["producer"])).json()
    assert (shown["state"], shown["attempt"]) == ("RUNNING", 1)
    assert [(a["attempt"], a["status"]) for a in shown["attempts"]] == [(1, "RUNNING")]
    assert (await http.get(f"/v1/tasks/{second}", token=tokens["producer"])).json()["state"] == "OFFERED"
    listed = (await http.get("/v1/tasks?queue=billing", token=tokens["producer"])).json()["tasks"]
    assert {t["task_id"]: (t["state"], t["attempt"]) for t in listed} == {first: ("RUNNING", 1),
                                                                          second: ("OFFERED", 0)}
    for state, expected in (("RUNNING", [first]), ("OFFERED", [second])):
        page = (await http.get(f"/v1/tasks?state={state}", token=tokens["producer"])).json()["tasks"]
        assert [t["task_id"] for t in page] == expected, state
    depths = (await http.get("/v1/queues", token=tokens["producer"])).json()["queues"]["billing"]["states"]
    assert depths == {"RUNNING": 1, "OFFERED": 1}


async def test_queue_depths_count_states_and_hide_foreign_queues(http, tokens):
    for queue in ("billing", "billing", "mail"):
        await http.post("/v1/tasks", token=tokens["operator"], json_body={"queue": queue, "kind": "k"})
    everything = (await http.get("/v1/queues", token=tokens["operator"])).json()["queues"]
    assert everything["billing"]["states"] == {"READY": 2} and everything["mail"]["states"] == {"READY": 1}
    assert everything["billing"]["oldest_ready_age_s"] >= 0
    scoped = (await http.get("/v1/queues", token=tokens["producer"])).json()["queues"]
    assert set(scoped) == {"billing"}


async def test_operator_drain_stops_new_offers_and_outlives_drain_false(http, tokens, token_factory, open_worker):
    worker = await open_worker(token_factory("worker"), "billing")
    instance_id = worker.welcome["instance_id"]
    reply = await http.post(f"/v1/workers/{instance_id}/drain", token=tokens["operator"])
    assert reply.status == 200 and reply.json()["state"] == "DRAINING" and reply.json()["drain"] is True
    again = await http.post(f"/v1/workers/{instance_id}/drain", token=tokens["operator"])
    assert again.status == 200 and again.json()["state"] == "DRAINING"
    # The worker asks for work again with drain=false: the operator's drain holds.
    ack = await worker.request("worker.capacity", {"sequence": "2", "capacity": 3, "drain": False})
    assert ack["drain"] is True and ack["capacity"] == 3
    submitted = await http.post("/v1/tasks", token=tokens["operator"], json_body={"queue": "billing", "kind": "k"})
    assert submitted.status == 201
    with trio.move_on_after(1.0):
        frame = await worker.receive()
        raise AssertionError(f"a drained instance was offered work: {frame}")
    unknown = await http.post("/v1/workers/ins_01M8VZMC9N9WQ7HZY3RZQQCE2A/drain", token=tokens["operator"])
    assert unknown.status == 404 and unknown.error["code"] == "instance_not_found"


async def test_a_queue_scoped_operator_sees_and_drains_only_the_workers_of_its_queues(http, token_factory,
                                                                                        open_worker):
    """A worker that also serves another queue is outside the scope: listed, it would show that queue."""
    worker_token = token_factory("worker")
    billing = await open_worker(worker_token, "billing")
    mail = await open_worker(worker_token, "mail")
    both = await open_worker(worker_token, "billing", also=("mail",))
    scoped = token_factory("operator", ("billing",))
    listed = (await http.get("/v1/workers", token=scoped)).json()["workers"]
    assert [w["instance_id"] for w in listed] == [billing.welcome["instance_id"]]
    for outside in (mail, both):
        reply = await http.post(f"/v1/workers/{outside.welcome['instance_id']}/drain", token=scoped)
        assert reply.status == 404 and reply.error["code"] == "instance_not_found"
    unknown = await http.post("/v1/workers/ins_01M8VZMC9N9WQ7HZY3RZQQCE2A/drain", token=scoped)
    assert unknown.status == 404 and unknown.error["code"] == "instance_not_found"
    drained = await http.post(f"/v1/workers/{billing.welcome['instance_id']}/drain", token=scoped)
    assert drained.status == 200 and drained.json()["drain"] is True
    everyone = (await http.get("/v1/workers", token=token_factory("operator"))).json()["workers"]
    assert {w["instance_id"]: w["drain"] for w in everyone} == {
        billing.welcome["instance_id"]: True, mail.welcome["instance_id"]: False, both.welcome["instance_id"]: False}


async def test_a_submit_through_this_instance_wakes_its_dispatcher_at_once(start_service, tokens, token_factory,
                                                                         nursery):
    service = await start_service(poll_interval=30.0)  # the poll alone would take 30 s
    ws = await trio_websocket.connect_websocket_url(
        nursery, f"ws://127.0.0.1:{service.worker_port}/v1/worker", subprotocols=["pulse.worker.v1"],
        extra_headers=[(b"authorization", f"Bearer {token_factory('worker')}".encode())])
    worker = RawWorker(ws)
    await worker.register("billing")
    await trio.sleep(0.1)  # let the pass that capacity triggered find nothing
    await Http(service.http_port).post("/v1/tasks", token=tokens["producer"], json_body=SUBMIT)
    with trio.fail_after(2):
        assign = await worker.next_assignment()
    assert assign["task"]["queue"] == "billing"


async def test_a_cancel_through_this_instance_offers_the_next_task_of_its_key_at_once(start_service, tokens,
                                                                                      token_factory, nursery,
                                                                                      monkeypatch):
    """Cancelling a keyed offer frees the key's permit: the key's waiting task is offered now, not at the poll."""
    from pulse_trio.server import timers

    # Nothing else may find it: the timers' reconciliation would free the revoked offer's slot within a second.
    monkeypatch.setattr(timers, "RECONCILE_EVERY_S", 3600.0)
    service = await start_service(poll_interval=30.0)  # the poll alone would take 30 s
    ws = await trio_websocket.connect_websocket_url(
        nursery, f"ws://127.0.0.1:{service.worker_port}/v1/worker", subprotocols=["pulse.worker.v1"],
        extra_headers=[(b"authorization", f"Bearer {token_factory('worker')}".encode())])
    worker = RawWorker(ws)
    await worker.register("billing", capacity=2, keys=True)
    await trio.sleep(0.1)  # let the pass that capacity triggered find nothing
    http = Http(service.http_port)
    keyed = {**SUBMIT, "concurrency_key": "customer:7", "concurrency_limit": 1}
    first = (await http.post("/v1/tasks", token=tokens["producer"], json_body=keyed)).json()
    with trio.fail_after(2):
        assert (await worker.next_assignment())["task"]["task_id"] == first["task_id"]
    second = (await http.post("/v1/tasks", token=tokens["producer"], json_body=keyed)).json()
    await trio.sleep(0.2)
    assert not worker.assigned  # the key's one permit is held by the first, unstarted offer
    cancelled = await http.post(f"/v1/tasks/{first['task_id']}/cancel", token=tokens["operator"])
    assert cancelled.status == 200 and cancelled.json()["state"] == "CANCELLED"
    with trio.fail_after(5):
        while True:
            assign = await worker.next_assignment()
            if assign["task"]["task_id"] == second["task_id"]:
                break


async def test_nodes_list_the_serve_processes_and_the_sessions_they_hold(http, tokens, token_factory, open_worker,
                                                                       service, db):
    import os

    from pulse_trio.dburl import connect

    await open_worker(token_factory("worker", ("billing",)), "billing")
    conn = connect(db)  # a process that stopped gracefully yesterday
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO server_nodes (node_id, state, host, pid, lapse_ms, started_at, heartbeat_at,"
                        " stopped_at) VALUES ('nod_01M8VZMC9N9WQ7HZY3RZQQCE2A', 'STOPPED', 'old-host', 7, 15000,"
                        " '2026-12-01 10:00:00', '2026-12-01 11:00:00', '2026-12-01 11:00:01')")
        conn.commit()
    finally:
        conn.close()
    (this,) = (await http.get("/v1/nodes", token=tokens["operator"])).json()["nodes"]
    assert this["node_id"] == service.store.node_id and this["state"] == "ALIVE"
    assert (this["pid"], this["open_sessions"], this["lapse_s"]) == (os.getpid(), 1, 15.0)
    assert this["lost_at"] is None and this["stopped_at"] is None
    every = (await http.get("/v1/nodes?all=true", token=tokens["operator"])).json()["nodes"]
    assert [n["state"] for n in every] == ["ALIVE", "STOPPED"]  # newest first
    assert every[1]["stopped_at"] == "2026-12-01T11:00:01.000000Z" and every[1]["open_sessions"] == 0
    assert (await http.get("/v1/nodes?all=maybe", token=tokens["operator"])).status == 400


async def test_a_cancelled_task_has_one_result_whoever_cancelled_it(http, tokens, token_factory, open_worker):
    """Cancelled before start (by an operator) or stopped by its handler on request: ``{}`` either way."""
    early = (await http.post("/v1/tasks", token=tokens["operator"], json_body={"queue": "billing", "kind": "k"})).json()
    await http.post(f"/v1/tasks/{early['task_id']}/cancel", token=tokens["operator"], json_body={"reason": "early"})
    worker = await open_worker(token_factory("worker", ("billing",)), "billing")
    running = (await http.post("/v1/tasks", token=tokens["operator"], json_body={"queue": "billing", "kind": "k"})).json()
    lease = (await worker.next_assignment())["lease"]
    command = {"task_id": lease["task_id"], "lease_id": lease["lease_id"], "lease_secret": lease["lease_secret"],
               "revision": lease["revision"]}
    command["revision"] = (await worker.request("task.start", command))["lease"]["revision"]
    await http.post(f"/v1/tasks/{running['task_id']}/cancel", token=tokens["operator"], json_body={"reason": "late"})
    await worker.request("task.finish", {**command, "status": "CANCELLED", "error_code": "cancelled", "result": {}})
    for task_id in (early["task_id"], running["task_id"]):
        view = (await http.get(f"/v1/tasks/{task_id}", token=tokens["operator"])).json()
        assert view["state"] == "CANCELLED" and view["outcome"]["result"] == {}, view["outcome"]


async def test_submit_takes_a_fairness_key_and_refuses_a_malformed_one(http, tokens):
    reply = await http.post("/v1/tasks", token=tokens["producer"], json_body={**SUBMIT, "fairness_key": "tenant:7"})
    assert reply.status == 201 and reply.json()["fairness_key"] == "tenant:7"
    assert (await http.post("/v1/tasks", token=tokens["producer"], json_body=SUBMIT)).json()["fairness_key"] is None
    for bad in ("", "x" * 129, "two words", 7):
        refused = await http.post("/v1/tasks", token=tokens["producer"], json_body={**SUBMIT, "fairness_key": bad})
        assert refused.status == 400 and refused.error["code"] == "invalid_request", bad


async def test_a_drain_answers_with_its_worker_however_many_sessions_came_before(http, tokens, token_factory,
                                                                                open_worker, service, db):
    """Each reconnect is a new instance row, kept for good: the drain's answer reads its own instance,
    not a capped list of the oldest ones."""
    import datetime as dt

    from pulse_trio.store import NewInstance, SubscribedQueue, disconnect, register

    now = dt.datetime.now(dt.timezone.utc)
    for _ in range(11):  # more ended sessions than a worker listing shows
        news = [NewInstance("old", (SubscribedQueue("billing"),)) for _ in range(100)]
        await service.store.run_batch([(register, {"instance": n, "now": now}) for n in news])
        await service.store.run_batch([(disconnect, {"session_id": n.session_id, "now": now}) for n in news])
    worker = await open_worker(token_factory("worker"), "billing")
    instance_id = worker.welcome["instance_id"]
    reply = await http.post(f"/v1/workers/{instance_id}/drain", token=tokens["operator"])
    assert reply.status == 200, reply.body
    assert (reply.json()["instance_id"], reply.json()["drain"]) == (instance_id, True)


async def test_an_idempotency_key_header_given_twice_is_refused(service, tokens):
    """Not read as its first value: the second would be dropped unseen."""
    import socket

    body = json.dumps(SUBMIT).encode()

    def send() -> bytes:
        with socket.create_connection(("127.0.0.1", service.http_port), timeout=5) as s:
            s.sendall(b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      b"Authorization: Bearer " + tokens["producer"].encode() + b"\r\n"
                      b"Content-Type: application/json\r\nIdempotency-Key: a\r\nIdempotency-Key: b\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            return data

    answer = await trio.to_thread.run_sync(send)
    assert answer.startswith(b"HTTP/1.1 400") and b'"invalid_request"' in answer and b"twice" in answer, answer
