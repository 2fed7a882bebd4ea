"""Every numeric input has one range: the served document's bounds are accepted, one step past is 400, never 5xx.

The bounds are read from the served ``/openapi.json``, not from the code, so
the test checks what a client is told against what the server does.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from sql_support import rows

OK = {"queue": "billing", "kind": "k"}
JSON_HEADERS = {"Content-Type": "application/json"}


@pytest.mark.parametrize(("body", "fragment"), [
    ('{"delay": 999999999999}', "delay must be 0..315360000 seconds"),
    ('{"delay": 1e9}', "delay must be 0..315360000 seconds (got 1000000000)"),
    ('{"delay": 1e400}', "delay must be 0..315360000 seconds"),
    ('{"lease_ttl": 99999999999}', "lease_ttl must be 0.5..2147483.647 seconds"),
    ('{"lease_ttl": 0.0001}', "lease_ttl must be 0.5..2147483.647 seconds"),
    ('{"lease_ttl": -1e-400}', "lease_ttl must be"),
    ('{"concurrency_limit": 2147483648}', "concurrency_limit must be 1..2147483647"),
    ('{"max_attempts": 99999999999999999999999}', "max_attempts must be 1..2147483647"),
    ('{"priority": ' + "9" * 5000 + "}", "priority"),
    ('{"backoff_initial": 2147483.648}', "backoff_initial must be 0.001..2147483.647 seconds"),
    ('{"backoff_factor": 1e308}', "backoff_factor must be 1..100"),
    ('{"due_at": "0001-01-01T00:00:00Z", "priority": 9}', "due_at must not be before 1970-01-01"),
    ('{"delay": 5, "due_at": "2099-01-01T00:00:00Z"}', "not both"),
    ('{"delay": 1e999999999999}', "delay must be 0..315360000 seconds (got 1E+999999999999)"),
    ('{"priority": 1e99999999999999999999}', "priority must be an integer 0..9"),
    ('{"lease_ttl": -1e99999999999999999999}', "lease_ttl must be"),
    ('{"max_attempts": 1e-99999999999999999999}', "max_attempts must be"),
])
async def test_out_of_range_numbers_are_400_never_5xx(http, tokens, body, fragment):
    text = '{"queue":"billing","kind":"k",' + body[1:]
    reply = await http.post("/v1/tasks", token=tokens["operator"], body=text, headers=JSON_HEADERS)
    assert reply.status == 400, (body[:80], reply.status, reply.body[:300])
    assert reply.error["code"] == "invalid_request" and fragment in reply.error["message"], reply.error
    assert (await http.get("/v1/tasks", token=tokens["operator"])).json()["tasks"] == []


def _bounds(schema: dict) -> dict:
    return next(alt for alt in schema["anyOf"] if alt.get("type") != "null")


async def test_every_documented_bound_is_accepted_and_one_step_past_it_refused(http, tokens, db):
    document = (await http.get("/openapi.json")).json()
    fields = document["components"]["schemas"]["SubmitRequest"]["properties"]
    numeric = {name: _bounds(schema) for name, schema in fields.items()
               if "anyOf" in schema and _bounds(schema).get("type") in ("integer", "number")}
    assert set(numeric) == {"priority", "delay", "concurrency_limit", "max_attempts", "lease_ttl",
                            "backoff_initial", "backoff_factor", "backoff_max"}
    for name, schema in numeric.items():
        step = Decimal(1) if schema["type"] == "integer" else Decimal("0.001")
        lo, hi = Decimal(str(schema["minimum"])), Decimal(str(schema["maximum"]))
        for value, accepted in ((lo, True), (hi, True), (lo - step, False), (hi + step, False)):
            body = {**OK, name: int(value) if schema["type"] == "integer" else float(value)}
            if name == "backoff_initial":
                body["backoff_max"] = float(hi)  # the one rule across fields: initial <= max
            reply = await http.post("/v1/tasks", token=tokens["operator"], json_body=body)
            assert reply.status == (201 if accepted else 400), (name, value, reply.body[:300])
    limit = next(p for p in document["paths"]["/v1/tasks"]["get"]["parameters"] if p["name"] == "limit")["schema"]
    for value, status in ((limit["minimum"], 200), (limit["maximum"], 200), (limit["maximum"] + 1, 400),
                          (limit["minimum"] - 1, 400)):
        assert (await http.get(f"/v1/tasks?limit={value}", token=tokens["operator"])).status == status


async def test_a_lease_ttl_is_kept_to_the_millisecond_and_is_never_shorter_than_renewable(http, tokens, db):
    reply = await http.post("/v1/tasks", token=tokens["operator"], json_body={**OK, "lease_ttl": 0.5004})
    assert reply.status == 201, reply.body
    assert rows(db, "SELECT lease_ttl_ms FROM tasks WHERE task_id = %s", (reply.json()["task_id"],)) == [(500,)]
    short = await http.post("/v1/tasks", token=tokens["operator"], json_body={**OK, "lease_ttl": 0.499})
    assert short.status == 400 and "0.5..2147483.647" in short.error["message"]


async def test_an_exponent_is_a_number_like_any_other(http, tokens):
    reply = await http.post("/v1/tasks", token=tokens["operator"], body='{"queue":"billing","kind":"k","delay":1e3}',
                            headers=JSON_HEADERS)
    assert reply.status == 201 and reply.json()["state"] == "SCHEDULED", reply.body


async def test_an_integer_is_what_json_schema_calls_one(http, tokens):
    """The document says ``"type": "integer"``, which 1.0 and 1e0 satisfy: so does the server."""
    for text in ("1.0", "1e0", "10E-1"):
        reply = await http.post("/v1/tasks", token=tokens["operator"], headers=JSON_HEADERS,
                                body='{"queue":"billing","kind":"k","priority":' + text + ',"max_attempts":2.0}')
        assert reply.status == 201 and reply.json()["priority"] == 1 and reply.json()["max_attempts"] == 2, reply.body
