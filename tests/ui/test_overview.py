"""The overview counts and charts what the database holds: states, the oldest READY age, finishes."""

from __future__ import annotations

from ui_support import screenshot, sign_in, wait_for


def test_the_overview_shows_counts_recent_finishes_and_the_hour_chart(page, service, start_worker):
    operator = service.token("operator")
    start_worker("steady", "ui-overview-worker", "ui-overview")
    done = [service.api.submit(operator, queue="ui-overview", kind="echo", payload={"n": n})["task_id"] for n in range(6)]
    done += [service.api.submit(operator, queue="ui-overview", kind="charge", max_attempts=1)["task_id"] for _ in range(2)]
    service.api.submit(operator, queue="ui-backlog", kind="report.build", priority=5)
    wait_for(lambda: all(service.api.task(operator, t)["state"] in ("SUCCEEDED", "FAILED") for t in done),
             "the worker to finish the tasks")
    overview = service.api.request("GET", "/v1/overview", operator).doc["queues"]["ui-overview"]

    sign_in(page, operator)
    row = "tr[data-queue=ui-overview]"
    page.wait_for_selector(f"{row} td[data-state=SUCCEEDED] >> text={overview['states']['SUCCEEDED']}")
    assert page.text_content(f"{row} td[data-state=FAILED]") == str(overview["states"]["FAILED"])
    recent = page.text_content(f"{row} [data-field=recent]")
    assert f"{sum(overview['recent'].values())} finished" in recent and f"{overview['recent']['FAILED']} failed" in recent
    assert overview["recent"]["SUCCEEDED"] >= 6 and overview["recent"]["FAILED"] >= 2
    chart = page.get_attribute(f"{row} svg.chart", "aria-label")
    assert f"{sum(sum(s) for s in overview['per_minute'].values())} finished in the last hour" in chart
    assert page.query_selector_all(f"{row} svg.chart rect.ok") and page.query_selector_all(f"{row} svg.chart rect.bad")
    page.wait_for_selector("tr[data-queue=ui-backlog] td[data-state=READY] >> text=1")
    assert page.text_content("tr[data-queue=ui-backlog] [data-field=oldest-ready]").endswith(("ms", "s"))
    screenshot(page, "overview")


def test_the_overview_lists_fairness_keys_with_their_ready_work_and_recent_share(page, service):
    operator = service.token("operator")
    for n in range(3):
        service.api.submit(operator, queue="ui-fair", kind="echo", fairness_key="tenant:big", payload={"n": n})
    service.api.submit(operator, queue="ui-fair", kind="echo", fairness_key="tenant:<small>")
    overview = service.api.request("GET", "/v1/overview", operator).doc["queues"]["ui-fair"]["fairness"]
    assert [(r["fairness_key"], r["ready"]) for r in overview] == [("tenant:big", 3), ("tenant:<small>", 1)]
    sign_in(page, operator)
    section = "section.fairness[data-queue=ui-fair]"
    page.wait_for_selector(f"{section} tr[data-key='tenant:big'] [data-field=ready] >> text=3")
    # a key is data: shown as text, never markup
    assert page.text_content(f"{section} tr[data-key='tenant:<small>'] th") == "tenant:<small>"
    assert page.text_content(f"{section} tr[data-key='tenant:big'] [data-field=recent-share]") == "—"
