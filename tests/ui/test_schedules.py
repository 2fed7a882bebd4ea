"""Schedules in the browser: an operator creates, pauses, resumes and deletes one; a bad field is named."""

from __future__ import annotations

from ui_support import screenshot, sign_in, wait_for


def _row(page, name: str):
    return page.wait_for_selector(f"#schedules tr:has([data-field=name]:text-is('{name}'))")


def test_an_operator_creates_pauses_resumes_and_deletes_a_schedule(page, service):
    operator = service.token("operator")
    sign_in(page, operator, "#/schedules")
    page.wait_for_selector("#schedule-form")
    page.fill("#schedule-name", "ui-nightly")
    page.fill("#schedule-queue", "ui-schedules")
    page.fill("#schedule-kind", "report")
    page.fill("#schedule-cron", "30 2 * * *")
    page.fill("#schedule-timezone", "Europe/Atlantis")
    page.click("#schedule-create")
    refused = page.wait_for_selector("#schedule-answer .notice.error").text_content()
    assert "422 invalid_schedule: timezone:" in refused
    assert page.get_attribute("#schedule-timezone", "aria-invalid") == "true"
    assert service.api.request("GET", "/v1/schedules", operator).doc["schedules"] == []  # nothing written

    page.fill("#schedule-timezone", "Europe/Berlin")
    page.click("#schedule-create")
    assert "Created ui-nightly" in page.wait_for_selector("#schedule-answer .notice.ok").text_content()
    row = _row(page, "ui-nightly")
    assert row.query_selector("[data-field=state]").text_content() == "ACTIVE"
    assert "30 2 * * *" in row.query_selector("[data-field=rule]").text_content()
    (made,) = service.api.request("GET", "/v1/schedules", operator).doc["schedules"]
    assert (made["timezone"], made["state"]) == ("Europe/Berlin", "ACTIVE")
    screenshot(page, "schedules")

    page.click(f"[data-pause={made['schedule_id']}]")
    page.wait_for_selector(f"tr[data-schedule={made['schedule_id']}] [data-field=state] >> text=PAUSED")
    page.click(f"[data-resume={made['schedule_id']}]")
    page.wait_for_selector(f"tr[data-schedule={made['schedule_id']}] [data-field=state] >> text=ACTIVE")
    page.click(f"[data-delete={made['schedule_id']}]")
    page.wait_for_selector("#schedule-list >> text=No schedule yet.")
    wait_for(lambda: service.api.request("GET", f"/v1/schedules/{made['schedule_id']}", operator).doc["state"]
             == "DELETED", "the schedule to be deleted")


def test_a_producer_sees_schedules_but_no_controls(page, service):
    operator = service.token("operator")
    service.api.request("POST", "/v1/schedules", operator, {"name": "ui-readonly", "queue": "ui-schedules-ro",
                                                            "kind": "k", "interval": 3600})
    sign_in(page, service.token("producer", "ui-schedules-ro"), "#/schedules")
    row = _row(page, "ui-readonly")
    assert row.query_selector("button") is None
    assert page.query_selector("#schedule-form") is None
    assert "every 3600 s" in row.query_selector("[data-field=rule]").text_content()
