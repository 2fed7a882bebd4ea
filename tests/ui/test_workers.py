"""Workers and serve processes in the browser: drain an instance, see the nodes' heartbeats."""

from __future__ import annotations

from ui_support import screenshot, sign_in


def test_an_operator_drains_a_worker(page, service, start_worker):
    operator = service.token("operator")
    instance = start_worker("idle", "ui-drain-worker", "ui-drain")
    sign_in(page, operator, "#/workers")
    row = f"tr[data-instance={instance['instance_id']}]"
    page.wait_for_selector(f"{row} [data-field=state] >> text=ACTIVE")
    assert page.text_content(f"{row} [data-field=worker-name]") == "ui-drain-worker"
    assert instance["node_id"] and instance["node_id"] in page.text_content(row)
    screenshot(page, "workers")

    page.click(f"[data-drain={instance['instance_id']}]")
    answer = page.wait_for_selector("#drain-answer .notice.ok").text_content()
    assert "ui-drain-worker is now DRAINING" in answer
    page.wait_for_selector(f"{row} [data-field=state] >> text=DRAINING")
    assert page.query_selector(f"[data-drain={instance['instance_id']}]") is None  # nothing left to drain
    workers = service.api.request("GET", "/v1/workers", operator).doc["workers"]
    assert next(w for w in workers if w["instance_id"] == instance["instance_id"])["drain"] is True


def test_the_nodes_page_shows_the_serve_process_and_its_heartbeat(page, service):
    sign_in(page, service.token("operator"), "#/nodes")
    page.wait_for_selector("#nodes tr[data-node] [data-field=state] >> text=ALIVE")
    node = service.api.request("GET", "/v1/nodes", service.token("operator")).doc["nodes"][0]
    assert node["node_id"] in page.text_content("#nodes")
    assert "ago" in page.text_content(f"tr[data-node={node['node_id']}]")
    # The cluster-wide settings, as GET /v1/settings has them, each with who set it.
    page.wait_for_selector("#settings [data-setting=cancel_grace]")
    settings = service.api.request("GET", "/v1/settings", service.token("operator")).doc["settings"]
    for name, setting in settings.items():
        assert page.text_content(f"#settings [data-setting={name}] [data-field=value]") == setting["meaning"]
    screenshot(page, "nodes")
