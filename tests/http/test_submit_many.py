"""``POST /v1/tasks/batch``: one request, one transaction, all or nothing, each refusal named."""

from __future__ import annotations

import pytest

from pulse_trio.client import ranges
from pulse_trio.contract.limits import MAX_PAYLOAD_BYTES


async def listed(http, token) -> list[dict]:
    return (await http.get("/v1/tasks", token=token)).json()["tasks"]


async def test_a_batch_is_submitted_in_one_go_and_again_by_its_keys(http, tokens):
    batch = {"tasks": [{"queue": "billing", "kind": "invoice.send", "payload": {"n": n}, "idempotency_key": f"i-{n}"}
                       for n in range(3)]}
    first = await http.post("/v1/tasks/batch", token=tokens["producer"], json_body=batch)
    assert first.status == 201, first.body
    done = first.json()["tasks"]
    assert [d["created"] for d in done] == [True] * 3 and {d["state"] for d in done} == {"READY"}
    assert {t["task_id"] for t in await listed(http, tokens["producer"])} == {d["task_id"] for d in done}
    again = await http.post("/v1/tasks/batch", token=tokens["producer"], json_body=batch)
    assert again.status == 200 and [d["task_id"] for d in again.json()["tasks"]] == [d["task_id"] for d in done]
    assert [d["created"] for d in again.json()["tasks"]] == [False] * 3
    shown = (await http.get(f"/v1/tasks/{done[1]['task_id']}", token=tokens["producer"])).json()
    assert shown["payload"] == {"n": 1} and shown["idempotency_key"] == "i-1"


async def test_one_bad_task_refuses_the_whole_batch_and_names_each_refusal(http, tokens):
    batch = {"tasks": [
        {"queue": "billing", "kind": "k"},
        {"queue": "billing", "kind": "k", "priority": 12},
        {"queue": "billing", "kind": "k"},
        {"queue": "billing", "kind": "k", "colour": "red"},
        "not an object",
        {"queue": "billing", "kind": "k", "payload": "x" * MAX_PAYLOAD_BYTES},
        {"queue": "Bad Queue", "kind": "k"},
        {"queue": "billing", "kind": "k", "delay": 1, "due_at": "2030-01-01T00:00:00Z"},
    ]}
    reply = await http.post("/v1/tasks/batch", token=tokens["producer"], json_body=batch)
    assert reply.status == 400
    error = reply.json()["error"]
    assert error["code"] == "invalid_request" and "nothing was submitted" in error["message"]
    named = [(i["index"], i["code"], i["field"]) for i in error["items"]]
    assert named == [(1, "invalid_request", "priority"), (3, "invalid_request", "colour"),
                     (4, "invalid_request", None), (5, "payload_too_large", "payload"),
                     (6, "invalid_request", "queue"), (7, "invalid_request", "delay")]
    assert all(i["message"] for i in error["items"])
    assert await listed(http, tokens["producer"]) == []


async def test_a_task_outside_the_tokens_queues_is_403_and_nothing_is_submitted(http, tokens):
    batch = {"tasks": [{"queue": "billing", "kind": "k"}, {"queue": "mail", "kind": "k"}]}
    reply = await http.post("/v1/tasks/batch", token=tokens["producer"], json_body=batch)
    assert reply.status == 403
    assert [(i["index"], i["code"], i["field"]) for i in reply.json()["error"]["items"]] == [(1, "forbidden", "queue")]
    assert await listed(http, tokens["operator"]) == []
    assert (await http.post("/v1/tasks/batch", token=tokens["worker"], json_body=batch)).status == 403


@pytest.mark.parametrize("body", [{}, {"tasks": []}, {"tasks": {}}, {"tasks": [{}] * (ranges.MAX_BATCH + 1)},
                                  {"tasks": [{"queue": "billing", "kind": "k"}], "extra": 1}])
async def test_a_malformed_batch_is_400(http, tokens, body):
    reply = await http.post("/v1/tasks/batch", token=tokens["producer"], json_body=body)
    assert reply.status == 400 and reply.error["code"] == "invalid_request"


async def test_a_batch_takes_no_idempotency_key_header(http, tokens):
    reply = await http.post("/v1/tasks/batch", token=tokens["producer"], headers={"Idempotency-Key": "k"},
                            json_body={"tasks": [{"queue": "billing", "kind": "k"}]})
    assert reply.status == 400 and "idempotency_key" in reply.error["message"]
    unauthenticated = await http.post("/v1/tasks/batch", headers={"Idempotency-Key": "k"},
                                      json_body={"tasks": [{"queue": "billing", "kind": "k"}]})
    assert unauthenticated.status == 400, "refused before the token, as on every other operation"


async def test_the_batch_path_is_not_a_task(http, tokens):
    reply = await http.get("/v1/tasks/batch", token=tokens["producer"])
    assert reply.status == 404 and reply.error["code"] == "task_not_found"


async def test_one_key_twice_in_a_batch_is_one_task(http, tokens):
    batch = {"tasks": [{"queue": "billing", "kind": "k", "idempotency_key": "same"},
                       {"queue": "billing", "kind": "k", "idempotency_key": "same"}]}
    reply = await http.post("/v1/tasks/batch", token=tokens["producer"], json_body=batch)
    assert reply.status == 201, reply.body
    done = reply.json()["tasks"]
    assert done[0]["task_id"] == done[1]["task_id"] and [d["created"] for d in done] == [True, False]
