"""What the dashboard reads: whoami, the overview, newest-first paging, key look-up, the UI files."""

from __future__ import annotations

import datetime as dt

import trio

from pulse_trio.http.security import API_POLICY, UI_POLICY
from pulse_trio.store.views.dashboard import FINISHED_STATUSES


async def submit(http, token, **fields) -> str:
    reply = await http.post("/v1/tasks", token=token, json_body={"kind": "k", **fields})
    assert reply.status == 201, reply.body
    return reply.json()["task_id"]


async def test_whoami_says_what_the_token_may_do(http, tokens):
    operator = (await http.get("/v1/whoami", token=tokens["operator"])).json()
    assert operator["role"] == "operator" and operator["queues"] == ["*"]
    assert {"cancel", "retry", "drain", "workers", "nodes", "submit"} <= set(operator["may"])
    producer = (await http.get("/v1/whoami", token=tokens["producer"])).json()
    assert producer["role"] == "producer" and producer["queues"] == ["billing"]
    assert set(producer["may"]) == {"submit", "read", "list", "queues", "overview", "settings", "schedules"}
    assert producer["allow"] == []
    refused = await http.get("/v1/whoami", token=tokens["worker"])
    assert refused.status == 403 and "worker token cannot use the HTTP API" in refused.error["message"]
    assert (await http.get("/v1/whoami?x=1", token=tokens["operator"])).status == 400


async def test_every_action_whoami_allows_is_allowed_and_the_others_refused(http, tokens):
    """The table whoami reads is the one the handlers enforce: a producer's cancel is 403, as whoami says."""
    task_id = await submit(http, tokens["producer"], queue="billing")
    producer = (await http.get("/v1/whoami", token=tokens["producer"])).json()["may"]
    probes = {"cancel": ("POST", f"/v1/tasks/{task_id}/cancel"), "workers": ("GET", "/v1/workers"),
              "nodes": ("GET", "/v1/nodes"), "list": ("GET", "/v1/tasks"), "read": ("GET", f"/v1/tasks/{task_id}"),
              "overview": ("GET", "/v1/overview"), "queues": ("GET", "/v1/queues"),
              "settings": ("GET", "/v1/settings"), "configure": ("PATCH", "/v1/settings"),
              "schedules": ("GET", "/v1/schedules"), "schedule": ("POST", "/v1/schedules/nope/pause")}
    for action, (method, path) in probes.items():
        status = (await http.request(method, path, token=tokens["producer"])).status
        assert (status == 200) == (action in producer), (action, status)


async def test_the_overview_counts_states_finishes_and_minutes(http, tokens, token_factory, open_worker):
    worker = await open_worker(token_factory("worker"), "billing")
    done = await submit(http, tokens["operator"], queue="billing")
    with trio.fail_after(10):
        await worker.run_one({"ok": True})
    await submit(http, tokens["operator"], queue="billing")
    await submit(http, tokens["operator"], queue="mail", priority=3)
    reply = await http.get("/v1/overview", token=tokens["operator"])
    assert reply.status == 200
    doc = reply.json()
    billing, mail = doc["queues"]["billing"], doc["queues"]["mail"]
    assert list(doc["queues"]) == ["billing", "mail"]
    assert (await http.get(f"/v1/tasks/{done}", token=tokens["operator"])).json()["state"] == "SUCCEEDED"
    assert billing["states"] == {"SUCCEEDED": 1, "OFFERED": 1} or billing["states"] == {"SUCCEEDED": 1, "READY": 1}
    assert billing["capped"] == [] and doc["count_cap"] == 10_000
    assert billing["recent"] == {status: int(status == "SUCCEEDED") for status in FINISHED_STATUSES}
    assert set(billing["per_minute"]) == set(FINISHED_STATUSES)
    assert [len(series) for series in billing["per_minute"].values()] == [60] * 4
    assert billing["per_minute"]["SUCCEEDED"][-1] == 1 and sum(billing["per_minute"]["SUCCEEDED"]) == 1
    assert mail["states"] == {"READY": 1} and mail["oldest_ready_age_s"] >= 0
    assert mail["per_minute"]["FAILED"] == [0] * 60
    at = dt.datetime.fromisoformat(doc["at"].replace("Z", "+00:00"))
    first = dt.datetime.fromisoformat(doc["first_minute"].replace("Z", "+00:00"))
    assert first.second == 0 and dt.timedelta(minutes=59) <= at - first < dt.timedelta(minutes=60)

    scoped = (await http.get("/v1/overview", token=tokens["producer"])).json()
    assert list(scoped["queues"]) == ["billing"]


async def test_newest_first_pages_stay_put_while_tasks_are_added(http, tokens):
    token = tokens["operator"]
    before = [await submit(http, token, queue="billing") for _ in range(5)]
    seen, cursor = [], None
    while True:
        page = (await http.get("/v1/tasks?order=newest&limit=2" + (f"&cursor={cursor}" if cursor else ""),
                               token=token)).json()
        seen += [t["task_id"] for t in page["tasks"]]
        await submit(http, token, queue="billing")  # a task arrives between every two pages
        if page["next"] is None:
            break
        cursor = page["next"]
    assert seen == before[::-1]  # each task that was there once, none twice, none of the new ones in between
    newest = (await http.get("/v1/tasks?order=newest&limit=3", token=token)).json()["tasks"]
    assert [t["task_id"] for t in newest][-1] not in before  # the additions head the first page
    bad = await http.get("/v1/tasks?order=sideways", token=token)
    assert bad.status == 400 and "order must be one of oldest, newest" in bad.error["message"]


async def test_look_up_by_idempotency_key_in_any_visible_queue(http, tokens):
    token = tokens["operator"]
    billing = await submit(http, token, queue="billing", idempotency_key="order-7")
    mail = await submit(http, token, queue="mail", idempotency_key="order-8")
    found = (await http.get("/v1/tasks?idempotency_key=order-7", token=token)).json()["tasks"]
    assert [t["task_id"] for t in found] == [billing]
    assert (await http.get("/v1/tasks?idempotency_key=order-8&queue=billing", token=token)).json()["tasks"] == []
    assert [t["task_id"] for t in (await http.get("/v1/tasks?idempotency_key=order-8",
                                                   token=token)).json()["tasks"]] == [mail]
    # a queue-scoped producer does not find keys outside its queues
    assert (await http.get("/v1/tasks?idempotency_key=order-8", token=tokens["producer"])).json()["tasks"] == []
    assert (await http.get("/v1/tasks?idempotency_key=", token=token)).status == 400


async def test_the_task_view_carries_the_cancel_request_and_its_grace(http, tokens, token_factory, open_worker):
    worker = await open_worker(token_factory("worker"), "billing")
    task_id = await submit(http, tokens["operator"], queue="billing")
    assign = await worker.next_assignment()
    lease = assign["lease"]
    await worker.request("task.start", {"task_id": task_id, "lease_id": lease["lease_id"],
                                        "lease_secret": lease["lease_secret"], "revision": lease["revision"]})
    before = (await http.get(f"/v1/tasks/{task_id}", token=tokens["operator"])).json()
    assert before["cancel"] is None
    cancelled = (await http.post(f"/v1/tasks/{task_id}/cancel", token=tokens["operator"],
                                 json_body={"reason": "customer asked"})).json()
    cancel = cancelled["cancel"]
    assert cancel["state"] in ("REQUESTED", "NOTIFIED") and cancel["reason"] == "customer asked"
    assert cancel["requested_by"].startswith("http:tok_") and cancel["resolved_at"] is None
    requested = dt.datetime.fromisoformat(cancel["requested_at"].replace("Z", "+00:00"))
    deadline = dt.datetime.fromisoformat(cancel["grace_expires_at"].replace("Z", "+00:00"))
    assert deadline - requested == dt.timedelta(seconds=30)  # the default --cancel-grace
    assert cancelled["cancel_requested_at"] == cancel["requested_at"]


async def test_the_dashboard_is_served_with_a_strict_policy(http):
    root = await http.get("/")
    assert root.status == 302 and root.headers["location"] == "/ui/"
    page = await http.get("/ui/")
    assert page.status == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["content-security-policy"] == UI_POLICY
    assert "unsafe-inline" not in UI_POLICY and "require-trusted-types-for 'script'" in UI_POLICY
    assert b'<script type="module" src="/ui/app.js">' in page.body and b"<script>" not in page.body
    assert b"style=" not in page.body
    script = await http.get("/ui/app.js")
    assert script.headers["content-type"] == "text/javascript; charset=utf-8"
    assert script.headers["x-content-type-options"] == "nosniff"
    for missing in ("/ui/nothing.js", "/ui/..%2fapi.py", "/ui/.."):
        reply = await http.get(missing)
        assert reply.status == 404 and reply.error["code"] == "not_found", missing
    api = await http.get("/healthz")
    assert api.headers["content-security-policy"] == API_POLICY
    assert api.headers["x-content-type-options"] == "nosniff" and api.headers["x-frame-options"] == "DENY"
