"""Signing in: a good token, a bad one, a revoked one, and what each role is shown."""

from __future__ import annotations

from token_support import make_token, revoke_token
from ui_support import DatabaseRelay, screenshot, sign_in

from pulse_trio.serve_process import ServeProcess

OPERATOR_ONLY = ("#nav a[data-page=workers]", "#nav a[data-page=nodes]")


def test_root_redirects_to_the_dashboard_which_asks_for_a_token(page, service):
    answer = page.goto("/")
    assert page.url == f"{service.url}/ui/"
    headers = answer.all_headers()
    assert "script-src 'self'" in headers["content-security-policy"]
    assert "unsafe-inline" not in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    assert page.is_visible("#signin-form") and not page.is_visible("#app")
    screenshot(page, "sign-in")


def test_an_operator_token_signs_in_and_is_told_what_it_may_do(page, service):
    token = service.token("operator")
    sign_in(page, token)
    assert page.text_content("[data-field=role]") == "operator"
    may = page.text_content("#may").split(", ")
    assert {"cancel", "retry", "drain", "workers", "nodes"} <= set(may)
    assert all(page.is_visible(link) for link in OPERATOR_ONLY)
    # The token lives in this tab's sessionStorage and goes out as a header, never as a cookie.
    assert page.evaluate("() => Object.values(sessionStorage)") == [token]
    assert page.context.cookies() == []


def test_a_bad_token_is_sent_back_to_sign_in_with_the_reason(page, service):
    page.goto("/ui/")
    page.fill("#token", "pt_this-is-not-a-token")
    page.click("#signin-form button[type=submit]")
    message = page.wait_for_selector("#signin-message:not([hidden])").text_content()
    assert "refused" in message and "unknown or revoked" in message
    assert not page.is_visible("#app")
    assert page.evaluate("() => sessionStorage.length") == 0
    screenshot(page, "sign-in-refused")


def test_a_worker_token_cannot_use_the_dashboard(page, service):
    page.goto("/ui/")
    page.fill("#token", service.token("worker"))
    page.click("#signin-form button[type=submit]")
    message = page.wait_for_selector("#signin-message:not([hidden])").text_content()
    assert "cannot use the dashboard" in message and "worker token" in message


def test_a_token_revoked_while_signed_in_ends_the_session(page, service):
    token = service.token("operator")
    sign_in(page, token)
    revoke_token(service.db, token)
    message = page.wait_for_selector("#signin-message:not([hidden])", timeout=15_000).text_content()
    assert "no longer accepted" in message and "revoked" in message
    assert not page.is_visible("#app") and page.evaluate("() => sessionStorage.length") == 0


def test_a_reload_while_the_database_is_away_keeps_the_token_and_signs_in_once_it_is_back(page, db):
    """Only an unknown or revoked token sends you back to sign-in: a remembered token that /v1/whoami cannot
    check (503 database_unavailable) is kept, the banner says why, and the check is tried again as a refresh is.

    On a `serve` of its own (the test's database, just reset), which reaches it through a relay the test cuts.
    """
    with DatabaseRelay(db) as relay, ServeProcess(relay.config) as serve:
        token = make_token(db, "operator", (), label="ui-outage")
        page.goto(f"{serve.http_url}/ui/")
        page.fill("#token", token)
        page.click("#signin-form button[type=submit]")
        page.wait_for_selector("#who:not([hidden])")
        relay.cut()
        page.reload()
        said = page.wait_for_selector("#banner:not([hidden]), #signin-message:not([hidden])", timeout=20_000)
        assert not page.is_visible("#signin"), page.text_content("#signin-message")
        assert "503 database_unavailable" in said.text_content()
        assert page.evaluate("() => Object.values(sessionStorage)") == [token]
        relay.restore()
        page.wait_for_selector("#who:not([hidden])")
        assert page.text_content("[data-field=role]") == "operator"
        page.wait_for_selector("#banner", state="hidden")


def test_a_producer_sees_its_queues_and_no_operator_action(page, service):
    producer = service.token("producer", "ui-prod")
    task = service.api.submit(producer, queue="ui-prod", kind="report.build", payload={"month": "2026-11"})
    service.api.submit(service.token("operator"), queue="ui-other", kind="k")
    sign_in(page, producer)
    assert page.text_content("[data-field=role]") == "producer"
    assert not any(page.is_visible(link) for link in OPERATOR_ONLY)
    assert "Not: cancel, retry, workers, drain, nodes" in page.text_content("#who")
    page.wait_for_selector("tr[data-queue=ui-prod]")
    assert page.query_selector("tr[data-queue=ui-other]") is None  # outside the token's queues
    screenshot(page, "producer-overview")

    page.click("tr[data-queue=ui-prod] a >> text=ui-prod")
    page.click(f"a >> text={task['task_id']}")
    page.wait_for_selector("#payload")
    assert "2026-11" in page.text_content("#payload")
    for action in ("#task-actions", "#cancel", "#retry", "[data-drain]"):
        assert page.query_selector(action) is None
    page.goto("/ui/#/workers")
    assert "cannot see this page" in page.wait_for_selector("#view .notice").text_content()
