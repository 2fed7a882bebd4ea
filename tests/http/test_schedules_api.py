"""``/v1/schedules``: operators create and change schedules, any API token reads them, bad fields are 422."""

from __future__ import annotations

import json

import trio
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from pulse_trio.http.openapi import document

from sql_support import rows

DOC_ID = "https://pulse-trio.dev/openapi.json"
NIGHTLY = {"name": "nightly", "queue": "billing", "kind": "invoice.batch", "cron": "30 2 * * *",
           "timezone": "Europe/Berlin", "payload": {"amount": 10.10}}


def _check(name: str, value: object) -> None:
    registry = Registry().with_resource(DOC_ID, Resource(contents=document(), specification=DRAFT202012))
    validator = Draft202012Validator({"$ref": f"{DOC_ID}#/components/schemas/{name}"}, registry=registry)
    errors = sorted(validator.iter_errors(value), key=str)
    assert not errors, f"{name}: {errors[0]}"


async def test_an_operator_creates_pauses_resumes_and_deletes_and_producers_read(http, tokens, db):
    text = json.dumps(NIGHTLY).replace("10.1", "10.10")
    made = await http.post("/v1/schedules", token=tokens["operator"], body=text)
    assert made.status == 201, made.body
    schedule = made.json()
    _check("Schedule", schedule)
    assert b'"payload":{"amount":10.10}' in made.body  # digit for digit
    assert (schedule["state"], schedule["cron"], schedule["missed"], schedule["catch_up_limit"]) == (
        "ACTIVE", "30 2 * * *", "skip", None)
    assert schedule["created_by"].startswith("http:tok_")
    listed = await http.get("/v1/schedules", token=tokens["producer"])  # held to billing: sees it
    _check("ScheduleList", listed.json())
    assert [s["name"] for s in listed.json()["schedules"]] == ["nightly"]
    for ref in ("nightly", schedule["schedule_id"]):
        assert (await http.get(f"/v1/schedules/{ref}", token=tokens["producer"])).json()["schedule_id"] == \
            schedule["schedule_id"]
    paused = await http.post("/v1/schedules/nightly/pause", token=tokens["operator"])
    _check("Schedule", paused.json())
    assert (paused.json()["state"], paused.json()["changed"], paused.json()["next_fire_at"]) == ("PAUSED", True, None)
    assert (await http.post("/v1/schedules/nightly/pause", token=tokens["operator"])).json()["changed"] is False
    resumed = await http.post(f"/v1/schedules/{schedule['schedule_id']}/resume", token=tokens["operator"])
    assert (resumed.json()["state"], resumed.json()["changed"]) == ("ACTIVE", True)
    deleted = await http.request("DELETE", "/v1/schedules/nightly", token=tokens["operator"])
    assert (deleted.status, deleted.json()["state"]) == (200, "DELETED")
    assert (await http.get("/v1/schedules/nightly", token=tokens["operator"])).status == 404
    assert (await http.get("/v1/schedules", token=tokens["operator"])).json() == {"schedules": []}
    every = (await http.get("/v1/schedules?all=true", token=tokens["operator"])).json()["schedules"]
    assert [s["state"] for s in every] == ["DELETED"]


async def test_producers_and_foreign_queues_cannot_change_them(http, tokens, token_factory):
    for token in (tokens["producer"], tokens["producer_any"]):
        refused = await http.post("/v1/schedules", token=token, json_body=NIGHTLY)
        assert refused.status == 403
    made = (await http.post("/v1/schedules", token=tokens["operator"], json_body=NIGHTLY)).json()
    assert (await http.post("/v1/schedules/nightly/pause", token=tokens["producer"])).status == 403
    scoped = token_factory("operator", ("shipping",))
    assert (await http.post("/v1/schedules", token=scoped, json_body=NIGHTLY)).status == 403
    for ref in ("nightly", made["schedule_id"]):  # another queue's schedule is not found to it
        assert (await http.post(f"/v1/schedules/{ref}/pause", token=scoped)).status == 404
        assert (await http.get(f"/v1/schedules/{ref}", token=scoped)).status == 404
    assert (await http.get("/v1/schedules", token=scoped)).json() == {"schedules": []}
    assert (await http.get("/v1/schedules")).status == 401


async def test_names_are_one_namespace_so_a_name_another_queue_uses_is_taken_for_a_scoped_token_too(
        http, tokens, token_factory):
    """docs/http-api.md, Tokens and roles: the schedule stays not found to the token, its name does not."""
    assert (await http.post("/v1/schedules", token=tokens["operator"], json_body=NIGHTLY)).status == 201
    scoped = token_factory("operator", ("shipping",))
    assert (await http.get("/v1/schedules/nightly", token=scoped)).status == 404
    taken = await http.post("/v1/schedules", token=scoped, json_body=NIGHTLY | {"queue": "shipping"})
    assert (taken.status, taken.json()["error"]["code"]) == (409, "schedule_exists")
    assert "billing" not in taken.body.decode()  # the name is all it learns
    other = await http.post("/v1/schedules", token=scoped, json_body=NIGHTLY | {"name": "n2", "queue": "shipping"})
    assert other.status == 201


BAD_FIELDS = [
    ({"cron": "61 * * * *"}, "cron"),
    ({"cron": "0 0 ? * *"}, "cron"),  # no Quartz forms beyond L, LW, 5L and 1#5 (operations.md §8.1)
    ({"cron": "0 0 L/2 * *"}, "cron"),  # cronsim would read it as L
    ({"cron": "@daily"}, "cron"),
    ({"cron": None, "interval": 0}, "interval"),
    ({"cron": None, "interval": 0.5}, "interval"),
    ({"cron": None}, "cron"),
    ({"interval": 60}, "interval"),
    ({"timezone": "Europe/Atlantis"}, "timezone"),
    ({"timezone": 1}, "timezone"),
    ({"missed": "later"}, "missed"),
    ({"catch_up_limit": 5}, "catch_up_limit"),
    ({"missed": "catch_up", "catch_up_limit": 0}, "catch_up_limit"),
    ({"name": "sch_abc"}, "name"),
    ({"queue": "Bad Queue"}, "queue"),
    ({"kind": None}, "kind"),
    ({"priority": 10}, "priority"),
    ({"max_attempts": True}, "max_attempts"),
    ({"colour": "red"}, "colour"),
]


async def test_a_field_out_of_its_rule_is_422_naming_it_and_nothing_is_written(http, tokens, db):
    for change, field in BAD_FIELDS:
        reply = await http.post("/v1/schedules", token=tokens["operator"], json_body=NIGHTLY | change)
        assert reply.status == 422, (change, reply.body)
        error = reply.json()["error"]
        assert (error["code"], error["field"]) == ("invalid_schedule", field), change
        assert error["message"].startswith(f"{field}: ")
        _check("Error", reply.json())
    assert rows(db, "SELECT COUNT(*) FROM schedules") == [(0,)]


async def test_the_day_fields_take_the_last_day_and_nth_weekday_forms(http, tokens):
    month_end = NIGHTLY | {"name": "month-end", "cron": "30 2 LW * *"}
    made = await http.post("/v1/schedules", token=tokens["operator"], json_body=month_end)
    assert (made.status, made.json()["cron"]) == (201, "30 2 LW * *")
    fifth = await http.post("/v1/schedules", token=tokens["operator"],
                            json_body=NIGHTLY | {"name": "fifth", "cron": "30 2 * * MON#5,0L"})
    assert (fifth.status, fifth.json()["state"]) == (201, "ACTIVE")


async def test_other_bad_requests(http, tokens, db):
    op = tokens["operator"]
    assert (await http.post("/v1/schedules", token=op, body="[1]")).status == 400
    assert (await http.post("/v1/schedules", token=op, body="{")).status == 400
    huge = await http.post("/v1/schedules", token=op, body=json.dumps(NIGHTLY).replace("10.1", "1e400"))
    assert (huge.status, huge.json()["error"]["field"]) == (422, "payload")
    for many_digits in ("1" + "0" * 5000, "1e999999999"):  # compared as given, and quoted cut short
        body = json.dumps(NIGHTLY | {"cron": None, "interval": 0}).replace(": 0", ": " + many_digits)
        long = await http.post("/v1/schedules", token=op, body=body)
        assert (long.status, long.json()["error"]["field"]) == (422, "interval")
        assert len(long.json()["error"]["message"]) < 200, long.json()["error"]["message"][:300]
    assert (await http.post("/v1/schedules", token=op, json_body=NIGHTLY)).status == 201
    taken = await http.post("/v1/schedules", token=op, json_body=NIGHTLY | {"cron": "0 * * * *"})
    assert (taken.status, taken.json()["error"]["code"]) == (409, "schedule_exists")
    for path in ("/v1/schedules/nope", "/v1/schedules/sch_NOTANID", "/v1/schedules/%E2%9C%93"):
        assert (await http.get(path, token=op)).status == 404
        assert (await http.post(path + "/pause", token=op)).status == 404
        assert (await http.request("DELETE", path, token=op)).status == 404
    assert (await http.post("/v1/schedules/nightly/pause", token=op, json_body={"now": True})).status == 400
    assert (await http.get("/v1/schedules?all=maybe", token=op)).status == 400
    assert rows(db, "SELECT COUNT(*) FROM schedules") == [(1,)]


async def test_a_schedule_fires_through_the_service(http, tokens, service, db):
    """The service's own fire loop (virtual time aside, this is the wall clock): an every-second tick."""
    made = await http.post("/v1/schedules", token=tokens["operator"], json_body={
        "name": "tick", "queue": "billing", "kind": "k", "interval": 1})
    schedule_id = made.json()["schedule_id"]
    with trio.fail_after(10):
        while not rows(db, "SELECT COUNT(*) FROM tasks WHERE idempotency_key LIKE %s", (f"schedule:{schedule_id}:%",))[0][0]:
            await trio.sleep(0.1)
    shown = (await http.get(f"/v1/schedules/{schedule_id}", token=tokens["producer"])).json()
    assert shown["fired_ticks"] >= 1 and shown["last_task_id"].startswith("tsk_")
    task = (await http.get(f"/v1/tasks/{shown['last_task_id']}", token=tokens["producer"])).json()
    assert task["idempotency_key"] == f"schedule:{schedule_id}:{shown['last_tick_at']}"
