"""``/v1/settings``: read by any API token, changed by an operator without queues, one error shape."""

from __future__ import annotations

import pytest

from sql_support import rows


async def test_a_producer_reads_them_and_cannot_change_them(http, tokens, db):
    listed = await http.get("/v1/settings", token=tokens["producer"])
    assert listed.status == 200
    assert listed.json()["settings"]["priority_step"]["value"] == 30
    one = await http.get("/v1/settings/permit_quarantine", token=tokens["producer"])
    assert one.json()["value"] is None and one.json()["meaning"] == "the task's own lease ttl"
    for token in (tokens["producer"], tokens["producer_any"]):
        refused = await http.request("PUT", "/v1/settings/priority_step", token=token, json_body={"value": 1})
        assert refused.status == 403 and refused.error["code"] == "forbidden"
        refused = await http.request("PATCH", "/v1/settings", token=token, json_body={"priority_step": 1})
        assert refused.status == 403
    assert rows(db, "SELECT value_ms, state FROM cluster_settings WHERE name = 'priority_step'") == [
        (30_000, "DEFAULT")]


async def test_an_operator_token_held_to_queues_cannot_change_what_spans_every_queue(http, token_factory):
    scoped = token_factory("operator", ("billing",))
    assert (await http.get("/v1/settings", token=scoped)).status == 200
    refused = await http.request("PUT", "/v1/settings/cancel_grace", token=scoped, json_body={"value": 2})
    assert refused.status == 403 and "without --queue" in refused.error["message"]
    refused = await http.request("PATCH", "/v1/settings", token=scoped, json_body={"cancel_grace": 2})
    assert refused.status == 403 and "without --queue" in refused.error["message"]
    # whoami says so too, so the dashboard hides what would be refused.
    assert "configure" not in (await http.get("/v1/whoami", token=scoped)).json()["may"]
    assert "configure" in (await http.get("/v1/whoami", token=token_factory("operator"))).json()["may"]


async def test_an_operator_changes_one_and_this_instance_applies_it_at_once(http, tokens, service, db):
    changed = await http.request("PUT", "/v1/settings/cancel_grace", token=tokens["operator"],
                                 json_body={"value": 2.5})
    assert changed.status == 200
    body = changed.json()
    assert (body["name"], body["value"], body["state"]) == ("cancel_grace", 2.5, "SET")
    assert body["updated_by"].startswith("http:tok_")
    assert service.settings.cancel_grace == 2.5  # no refresh interval for the instance that answered
    assert rows(db, "SELECT value_ms FROM cluster_settings WHERE name = 'cancel_grace'") == [(2_500,)]
    back = await http.request("PUT", "/v1/settings/permit_quarantine", token=tokens["operator"],
                              json_body={"value": None})
    assert back.status == 200 and back.json()["value"] is None


async def test_patch_changes_several_in_one_transaction(http, tokens, service):
    both = await http.request("PATCH", "/v1/settings", token=tokens["operator"],
                              json_body={"node_heartbeat": 20, "node_lapse": 60})
    assert both.status == 200
    assert both.json()["settings"]["node_lapse"]["value"] == 60
    assert (service.settings.node_heartbeat, service.settings.node_lapse) == (20, 60)


@pytest.mark.parametrize(("method", "path", "body", "status", "code"), [
    ("PUT", "/v1/settings/poll_interval", {"value": 1}, 404, "setting_not_found"),
    ("GET", "/v1/settings/nope", None, 404, "setting_not_found"),
    ("PUT", "/v1/settings/cancel_grace", {"value": 0}, 400, "invalid_request"),
    ("PUT", "/v1/settings/cancel_grace", {"value": 0.0001}, 400, "invalid_request"),
    ("PUT", "/v1/settings/cancel_grace", {"value": 1e10}, 400, "invalid_request"),
    ("PUT", "/v1/settings/cancel_grace", {"value": "2"}, 400, "invalid_request"),
    ("PUT", "/v1/settings/cancel_grace", {"value": True}, 400, "invalid_request"),
    ("PUT", "/v1/settings/lease_ttl", {"value": None}, 400, "invalid_request"),
    ("PUT", "/v1/settings/cancel_grace", {}, 400, "invalid_request"),
    ("PUT", "/v1/settings/cancel_grace", {"value": 2, "why": "x"}, 400, "invalid_request"),
    ("PATCH", "/v1/settings", {}, 400, "invalid_request"),
    ("PATCH", "/v1/settings", {"poll_interval": 1}, 400, "invalid_request"),
    ("PATCH", "/v1/settings", {"cancel_grace": 2, "lease_ttl": -1}, 400, "invalid_request"),
    ("PUT", "/v1/settings/node_heartbeat", {"value": 10}, 409, "setting_conflict"),
    ("DELETE", "/v1/settings/cancel_grace", None, 405, "method_not_allowed"),
])
async def test_bad_requests_get_the_apis_error_shape_and_change_nothing(http, tokens, db, method, path, body,
                                                                       status, code):
    before = rows(db, "SELECT name, value_ms, state FROM cluster_settings ORDER BY name")
    reply = await http.request(method, path, token=tokens["operator"], json_body=body)
    assert (reply.status, reply.error["code"]) == (status, code), reply.body
    assert rows(db, "SELECT name, value_ms, state FROM cluster_settings ORDER BY name") == before


@pytest.mark.parametrize(("method", "path", "body"), [
    ("PUT", "/v1/settings/cancel_grace", '{"value": 1e999999}'),
    ("PATCH", "/v1/settings", '{"cancel_grace": -1e999999}'),
    # Exponents past what a Decimal even reads: strict JSON all the same.
    ("PUT", "/v1/settings/cancel_grace", '{"value": 1e9999999999999999999}'),
    ("PUT", "/v1/settings/cancel_grace", '{"value": -1e9999999999999999999}'),
    ("PUT", "/v1/settings/permit_quarantine", '{"value": 1e-9999999999999999999}'),
    ("PATCH", "/v1/settings", '{"cancel_grace": 1e9999999999999999999}'),
    # More digits than Decimal's context keeps: judged exactly, never rounded into range first.
    ("PUT", "/v1/settings/cancel_grace", '{"value": 2.0000000000000000000000000001}'),
    ("PUT", "/v1/settings/cancel_grace", '{"value": 2147483.6470000000000000000000000001}'),
])
async def test_a_number_past_any_range_is_refused_like_any_out_of_range_one(http, tokens, db, method, path, body):
    before = rows(db, "SELECT name, value_ms, state FROM cluster_settings ORDER BY name")
    reply = await http.request(method, path, token=tokens["operator"], body=body,
                               headers={"Content-Type": "application/json"})
    assert (reply.status, reply.error["code"]) == (400, "invalid_request"), reply.body
    assert any(word in reply.error["message"] for word in ("seconds", "range", "millisecond"))
    assert rows(db, "SELECT name, value_ms, state FROM cluster_settings ORDER BY name") == before


async def test_a_body_that_is_not_strict_json_is_refused(http, tokens):
    reply = await http.request("PUT", "/v1/settings/cancel_grace", token=tokens["operator"],
                               body='{"value": 2, "value": 3}', headers={"Content-Type": "application/json"})
    assert (reply.status, reply.error["code"]) == (400, "invalid_json")


async def test_fairness_weights_are_read_by_any_token_and_set_by_an_unscoped_operator(http, tokens, db):
    assert (await http.get("/v1/fairness-weights", token=tokens["producer"])).json() == {"fairness_weights": {}}
    default = await http.get("/v1/fairness-weights/tenant%2F7", token=tokens["producer"])
    assert default.status == 200 and default.json()["weight"] == 1 and default.json()["fairness_key"] == "tenant/7"
    refused = await http.request("PUT", "/v1/fairness-weights/tenant-1", token=tokens["producer"],
                                 json_body={"weight": 3})
    assert refused.status == 403
    changed = await http.request("PUT", "/v1/fairness-weights/tenant%2F7", token=tokens["operator"],
                                 json_body={"weight": 3})
    assert changed.status == 200, changed.json()
    assert (changed.json()["weight"], changed.json()["updated_by"][:9]) == (3, "http:tok_")
    assert rows(db, "SELECT fairness_key, state, weight FROM fairness_weights") == [("tenant/7", "SET", 3)]
    listed = (await http.get("/v1/fairness-weights", token=tokens["producer"])).json()["fairness_weights"]
    assert list(listed) == ["tenant/7"]
    whole = await http.request("PUT", "/v1/fairness-weights/tenant%2F7", token=tokens["operator"],
                               json_body={"weight": 4.0})  # JSON Schema's integer: 4.0 is 4
    assert whole.status == 200 and whole.json()["weight"] == 4


@pytest.mark.parametrize("body", [{"weight": 0}, {"weight": 10_001}, {"weight": 1.5}, {"weight": "2"}, {}, {"w": 2},
                                  {"weight": True}, {"weight": None}])
async def test_a_bad_weight_is_refused_and_nothing_is_written(http, tokens, db, body):
    refused = await http.request("PUT", "/v1/fairness-weights/t", token=tokens["operator"], json_body=body)
    assert refused.status == 400 and refused.error["code"] == "invalid_request"
    assert rows(db, "SELECT COUNT(*) FROM fairness_weights") == [(0,)]


async def test_a_bad_fairness_key_in_the_path_is_refused(http, tokens):
    for path in ("/v1/fairness-weights/" + "x" * 129, "/v1/fairness-weights/%C3%98"):
        read = await http.get(path, token=tokens["producer"])
        assert read.status == 400 and read.error["code"] == "invalid_request"
    refused = await http.request("PUT", "/v1/fairness-weights/" + "x" * 129, token=tokens["operator"],
                                 json_body={"weight": 2})
    assert refused.status == 400 and refused.error["code"] == "invalid_request"
