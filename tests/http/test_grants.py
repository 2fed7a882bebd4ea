"""Grants: a producer token made with ``--allow cancel,retry`` may cancel and retry, only in its queues."""

from __future__ import annotations

import datetime as dt

import pytest

from pulse_trio.dburl import connect
from pulse_trio.store.token import tokens as stored_tokens


@pytest.fixture
async def tasks(http, tokens) -> dict[str, str]:
    made = {}
    for queue in ("billing", "mail"):
        reply = await http.post("/v1/tasks", token=tokens["operator"], json_body={"queue": queue, "kind": "k"})
        made[queue] = reply.json()["task_id"]
    return made


async def test_a_granted_producer_cancels_and_retries_in_its_queues_only(http, token_factory, tasks):
    granted = token_factory("producer", ("billing",), allow=("cancel", "retry"))
    cancel_only = token_factory("producer", ("billing",), allow=("cancel",))
    assert (await http.post(f"/v1/tasks/{tasks['mail']}/cancel", token=granted)).status == 404  # not its queue
    refused = await http.post(f"/v1/tasks/{tasks['billing']}/retry", token=cancel_only)
    assert refused.status == 403 and "--allow retry" in refused.error["message"]
    cancelled = await http.post(f"/v1/tasks/{tasks['billing']}/cancel", token=granted, json_body={"reason": "void"})
    assert cancelled.status == 200 and cancelled.json()["state"] == "CANCELLED"
    retried = await http.post(f"/v1/tasks/{tasks['billing']}/retry", token=granted)
    assert retried.status == 201 and retried.json()["retry_of"] == tasks["billing"]
    for other in ("/v1/workers", "/v1/nodes"):  # a grant is those two actions, nothing more
        assert (await http.get(other, token=granted)).status == 403


async def test_whoami_shows_the_grants_and_the_actions_they_add(http, token_factory):
    granted = token_factory("producer", ("billing",), allow=("retry", "cancel"))
    me = (await http.get("/v1/whoami", token=granted)).json()
    assert me["allow"] == ["cancel", "retry"] and me["queues"] == ["billing"]
    assert {"cancel", "retry"} <= set(me["may"]) and "workers" not in me["may"]
    plain = (await http.get("/v1/whoami", token=token_factory("producer"))).json()
    assert plain["allow"] == [] and "cancel" not in plain["may"]


@pytest.mark.parametrize(("role", "allow"), [("producer", ("drain",)), ("worker", ("cancel",)),
                                             ("operator", ("retry",))])
def test_a_grant_outside_the_rules_is_refused_and_nothing_is_stored(db, role, allow):
    conn = connect(db)
    try:
        with pytest.raises(ValueError):
            stored_tokens.create_token(conn, role=role, queues=(), label="", now=dt.datetime.now(dt.timezone.utc),
                                       allow=allow)
        assert stored_tokens.list_tokens(conn) == []
    finally:
        conn.close()
