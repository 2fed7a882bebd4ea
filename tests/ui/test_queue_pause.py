"""An operator pauses a queue from the overview, sees it held back, and resumes it."""

from __future__ import annotations

import time

from ui_support import screenshot, sign_in, wait_for


def test_an_operator_pauses_and_resumes_a_queue_from_the_overview(page, service, start_worker):
    operator = service.token("operator")
    start_worker("pausable", "ui-pause-worker", "ui-pause")
    first = service.api.submit(operator, queue="ui-pause", kind="echo", payload={"n": 0})["task_id"]
    wait_for(lambda: service.api.task(operator, first)["state"] == "SUCCEEDED", "the worker to run the first task")

    sign_in(page, operator)
    row = "tr[data-queue=ui-pause]"
    page.wait_for_selector(f"{row} [data-field=queue-state] >> text=ACTIVE")
    page.click(f"{row} [data-queue-action=pause]")
    assert "ui-pause is paused" in page.wait_for_selector("#queue-answer .notice.ok").text_content()
    page.wait_for_selector(f"{row} [data-field=queue-state] >> text=PAUSED")
    page.wait_for_selector(f"{row} [data-queue-action=resume]")
    screenshot(page, "queue-paused")
    assert service.api.request("GET", "/v1/queues", operator).doc["queues"]["ui-pause"]["state"] == "PAUSED"

    # Submissions are accepted while paused, and the idle worker is offered none of them.
    held = service.api.submit(operator, queue="ui-pause", kind="echo", payload={"n": 1})["task_id"]
    time.sleep(1.5)
    assert service.api.task(operator, held)["state"] == "READY"
    page.wait_for_selector(f"{row} td[data-state=READY] >> text=1")

    page.click(f"{row} [data-queue-action=resume]")
    page.wait_for_selector(f"{row} [data-field=queue-state] >> text=ACTIVE")
    wait_for(lambda: service.api.task(operator, held)["state"] == "SUCCEEDED", "the resumed queue's task to run")


def test_a_producer_sees_the_state_but_no_switch(page, service):
    operator, producer = service.token("operator"), service.token("producer")
    service.api.request("POST", "/v1/queues/ui-pause-ro/pause", operator)
    sign_in(page, producer)
    page.wait_for_selector("tr[data-queue=ui-pause-ro] [data-field=queue-state] >> text=PAUSED")
    assert page.query_selector("tr[data-queue=ui-pause-ro] [data-queue-action]") is None
