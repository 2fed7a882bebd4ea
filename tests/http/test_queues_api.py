"""``/v1/queues/{queue}/pause|resume``: an operator's switch, shown by ``GET /v1/queues``, bad input is 422."""

from __future__ import annotations

import pytest
import trio

from sql_support import rows


async def test_an_operator_pauses_and_resumes_and_every_answer_shows_it(http, tokens, service, db):
    paused = await http.post("/v1/queues/billing/pause", token=tokens["operator"])
    assert paused.status == 200
    body = paused.json()
    assert (body["queue"], body["state"], body["paused"], body["changed"]) == ("billing", "PAUSED", True, True)
    assert body["paused_by"].startswith("http:tok_") and body["paused_at"].endswith("Z")
    assert service.hub.paused == frozenset({"billing"})  # the instance that answered applies it at once
    again = await http.post("/v1/queues/billing/pause", token=tokens["operator"], json_body={})
    assert again.status == 200 and again.json()["changed"] is False
    # Submissions are still accepted; the queue is listed as paused even before it holds a task.
    submitted = await http.post("/v1/tasks", token=tokens["producer"], json_body={"queue": "billing", "kind": "k"})
    assert submitted.status == 201
    listed = (await http.get("/v1/queues", token=tokens["producer"])).json()["queues"]
    assert listed["billing"]["state"] == "PAUSED" and listed["billing"]["states"] == {"READY": 1}
    assert rows(db, "SELECT state FROM queues WHERE queue = 'billing'") == [("PAUSED",)]
    resumed = await http.post("/v1/queues/billing/resume", token=tokens["operator"])
    assert (resumed.json()["state"], resumed.json()["changed"], resumed.json()["paused_by"]) == ("ACTIVE", True, None)
    assert service.hub.paused == frozenset()
    listed = (await http.get("/v1/queues", token=tokens["producer"])).json()["queues"]
    assert listed["billing"]["paused"] is False


async def test_a_resume_wakes_this_instances_dispatcher(http, tokens, open_worker, token_factory):
    worker = await open_worker(token_factory("worker"), "billing")
    await http.post("/v1/queues/billing/pause", token=tokens["operator"])
    task = (await http.post("/v1/tasks", token=tokens["producer"], json_body={"queue": "billing", "kind": "k"}))
    await http.post("/v1/queues/billing/resume", token=tokens["operator"])
    with trio.fail_after(5):
        offered = await worker.next_assignment()
    assert offered["task"]["task_id"] == task.json()["task_id"]


async def test_a_queue_scoped_operator_pauses_only_its_queues(http, token_factory):
    scoped = token_factory("operator", ("billing",))
    assert (await http.post("/v1/queues/billing/pause", token=scoped)).status == 200
    refused = await http.post("/v1/queues/mail/pause", token=scoped)
    assert refused.status == 403 and refused.error["code"] == "forbidden"


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/v1/queues/bad%20name/pause", None, "queue"),
    ("/v1/queues/-leading-dash/resume", None, "queue"),
    ("/v1/queues/" + "q" * 65 + "/pause", None, "queue"),
    ("/v1/queues/%C3%A9t%C3%A9/pause", None, "queue"),
    ("/v1/queues/billing/pause", {"reason": "maintenance"}, "reason"),
    ("/v1/queues/billing/resume", {"force": True}, "force"),
])
async def test_bad_input_is_422_naming_the_field_and_writes_nothing(http, tokens, db, path, body, field):
    reply = await http.post(path, token=tokens["operator"], json_body=body)
    assert reply.status == 422, reply.body
    assert (reply.error["code"], reply.error["field"]) == ("invalid_request", field)
    assert field in reply.error["message"]
    assert rows(db, "SELECT COUNT(*) FROM queues") == [(0,)]


async def test_an_operator_gives_a_queue_its_own_retention_and_takes_it_back(http, tokens, db):
    put = await http.request("PUT", "/v1/queues/billing/retention", token=tokens["operator"],
                             json_body={"value": 86400})
    assert put.status == 200
    assert (put.json()["task_retention"], put.json()["state"], put.json()["changed"]) == (86400, "ACTIVE", True)
    assert rows(db, "SELECT task_retention_ms, state FROM queues WHERE queue = 'billing'") == [(86_400_000, "ACTIVE")]
    listed = (await http.get("/v1/queues", token=tokens["producer"])).json()["queues"]
    assert listed["billing"]["task_retention"] == 86400
    cleared = await http.request("PUT", "/v1/queues/billing/retention", token=tokens["operator"],
                                 json_body={"value": None})
    assert cleared.status == 200 and cleared.json()["task_retention"] is None
    # The cluster's value is a cluster setting like the others.
    cluster = await http.request("PUT", "/v1/settings/task_retention", token=tokens["operator"],
                                 json_body={"value": 1209600})
    assert cluster.status == 200 and cluster.json()["value"] == 1209600


@pytest.mark.parametrize(("body", "field"), [
    ({"value": 0.5}, "value"),
    ({"value": 0}, "value"),
    ({"value": 315360000.001}, "value"),
    ({"value": 1.0001}, "value"),
    ({"value": "86400"}, "value"),
    ({"value": True}, "value"),
    ({}, "value"),
    ({"value": 86400, "queue": "billing"}, "queue"),
])
async def test_bad_retention_is_422_naming_the_field(http, tokens, db, body, field):
    reply = await http.request("PUT", "/v1/queues/billing/retention", token=tokens["operator"], json_body=body)
    assert reply.status == 422, reply.body
    assert reply.error["field"] == field and field in reply.error["message"]
    assert rows(db, "SELECT COUNT(*) FROM queues") == [(0,)]


async def test_a_body_that_is_not_json_is_still_400(http, tokens):
    reply = await http.post("/v1/queues/billing/pause", token=tokens["operator"], body="{",
                            headers={"Content-Type": "application/json"})
    assert reply.status == 400 and reply.error["code"] == "invalid_json"


@pytest.mark.parametrize("value", ["1e999999", "1e9999999999999999999", "315360000.00000000000000000001"])
async def test_a_retention_past_any_range_is_refused_naming_the_value(http, tokens, db, value):
    reply = await http.request("PUT", "/v1/queues/billing/retention", token=tokens["operator"],
                               body='{"value": %s}' % value, headers={"Content-Type": "application/json"})
    assert (reply.status, reply.error["field"]) == (422, "value"), reply.body
    assert rows(db, "SELECT COUNT(*) FROM queues") == [(0,)]
