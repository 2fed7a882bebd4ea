"""Tasks in the browser: live updates, paging, look-up, cancel, and retry with its lineage."""

from __future__ import annotations

import time

from ui_support import screenshot, sign_in, still_same_document, wait_for

REFRESH_S = 3  # app.js REFRESH_MS


def row_state(page, task_id: str) -> str | None:
    cell = page.query_selector(f"tr[data-task={task_id}] [data-field=state]")
    return cell.text_content() if cell else None


def test_a_submitted_task_appears_on_the_overview_and_in_the_list_without_a_reload(page, service):
    operator = service.token("operator")
    sign_in(page, operator)
    page.wait_for_selector("#queues, #view .notice")
    first = service.api.submit(operator, queue="ui-live", kind="mail.send", payload={"to": "ops"})
    page.wait_for_selector("tr[data-queue=ui-live] td[data-state=READY] >> text=1")

    page.click("tr[data-queue=ui-live] th a")
    wait_for(lambda: row_state(page, first["task_id"]) == "READY", "the task in the list")
    second = service.api.submit(operator, queue="ui-live", kind="mail.send")
    wait_for(lambda: row_state(page, second["task_id"]) == "READY", "the second task in the list")
    ids = page.eval_on_selector_all("#tasks tr[data-task]", "rows => rows.map(r => r.dataset.task)")
    assert ids == [second["task_id"], first["task_id"]]  # newest first
    assert still_same_document(page)
    screenshot(page, "tasks")

    page.click("#pause")
    assert page.text_content("#pause") == "Resume refresh"
    third = service.api.submit(operator, queue="ui-live", kind="mail.send")
    time.sleep(REFRESH_S + 1)
    assert row_state(page, third["task_id"]) is None  # paused: nothing was fetched
    page.click("#pause")
    wait_for(lambda: row_state(page, third["task_id"]) == "READY", "the third task once resumed", timeout=5)
    assert still_same_document(page)


def test_pages_follow_the_cursor_while_tasks_are_added(page, service):
    operator = service.token("operator")
    made = [service.api.submit(operator, queue="ui-pages", kind="k", payload={"n": n})["task_id"] for n in range(53)]
    sign_in(page, operator, "#/tasks?queue=ui-pages")
    page.wait_for_selector("#tasks")
    first_page = page.eval_on_selector_all("#tasks tr[data-task]", "rows => rows.map(r => r.dataset.task)")
    assert first_page == made[::-1][:50]
    page.click("#older")
    page.wait_for_selector("#newest")
    added = service.api.submit(operator, queue="ui-pages", kind="k")["task_id"]
    time.sleep(REFRESH_S + 1)  # a refresh of the second page happens meanwhile
    second_page = page.eval_on_selector_all("#tasks tr[data-task]", "rows => rows.map(r => r.dataset.task)")
    assert second_page == made[::-1][50:]  # the same three: nothing shifted in, nothing repeated
    assert page.query_selector("#older") is None
    page.click("#newest")
    wait_for(lambda: page.eval_on_selector_all("#tasks tr[data-task]", "rows => rows.map(r => r.dataset.task)")[:1]
             == [added], "the added task at the top of the first page")


def test_look_up_by_task_id_and_by_idempotency_key(page, service):
    operator = service.token("operator")
    keyed = service.api.submit(operator, queue="ui-lookup", kind="k", idempotency_key="order-77")
    plain = service.api.submit(operator, queue="ui-lookup", kind="k")
    sign_in(page, operator, "#/tasks")
    page.fill("#lookup", "order-77")
    page.click("#lookup-form button")
    assert page.wait_for_selector("#task-id").text_content() == keyed["task_id"]
    page.goto("/ui/#/tasks")
    page.fill("#lookup", plain["task_id"])
    page.click("#lookup-form button")
    page.wait_for_selector(f"#task-id >> text={plain['task_id']}")
    page.goto("/ui/#/tasks")
    page.fill("#lookup", "no-such-key")
    page.click("#lookup-form button")
    assert "No task was submitted with idempotency key" in page.wait_for_selector("#lookup-message .notice").text_content()


def test_a_task_address_whose_percent_escapes_nothing_shows_the_task_as_not_found(page, service):
    """A hand-edited ``#/task/…`` with a stray ``%`` still leaves the page it was on, for the API's 404."""
    sign_in(page, service.token("operator"), "#/overview")
    page.wait_for_selector("#queues, #view .notice")
    page.goto("/ui/#/task/tsk_%E0%A4%A")
    assert "404 task_not_found" in page.wait_for_selector("#banner:not([hidden])").text_content()
    assert page.get_attribute("#nav a[data-page=tasks]", "aria-current") == "page"
    assert still_same_document(page)


def test_an_address_naming_a_property_every_object_has_shows_the_overview(page, service):
    """``#/constructor`` names no page, like ``#/nonsense``: the overview, not a throw and an empty view."""
    sign_in(page, service.token("operator"), "#/constructor")
    page.wait_for_selector("#view h1 >> text=Queues")
    page.goto("/ui/#/tasks")
    page.wait_for_selector("#view h1 >> text=Tasks")
    page.goto("/ui/#/__proto__")
    page.wait_for_selector("#view h1 >> text=Queues")
    assert page.get_attribute("#nav a[data-page=overview]", "aria-current") == "page"
    assert still_same_document(page)


def test_open_a_task_cancel_it_and_see_its_state_change(page, service):
    operator = service.token("operator")
    task = service.api.submit(operator, queue="ui-cancel", kind="invoice.send", payload={"invoice": 991})
    sign_in(page, operator, "#/tasks?queue=ui-cancel")
    page.click(f"a >> text={task['task_id']}")
    assert page.wait_for_selector("#task-state").text_content() == "READY"
    assert page.text_content("#cancel-info") == "No cancel requested."
    assert page.is_visible("#cancel")  # READY: a cancel request cancels it at once

    page.click("#retry")  # not terminal: the API refuses, and the refusal is shown
    assert "Retry refused: 409 not_retryable" in page.wait_for_selector("#action-answer .notice").text_content()

    page.click("#cancel")
    page.fill("#cancel-reason", "customer asked")
    page.click("#confirm-cancel")
    answer = page.wait_for_selector("#action-answer .notice.ok").text_content()
    assert "request saved; the task is now CANCELLED" in answer
    page.wait_for_selector("#task-state >> text=CANCELLED")
    assert page.text_content("[data-field=cancel-state]") == "RESOLVED"
    assert "customer asked" in page.text_content("#cancel-info")
    assert "none: the task had not started, so it was cancelled at once" in page.text_content("#cancel-info")
    assert service.api.task(operator, task["task_id"])["state"] == "CANCELLED"
    screenshot(page, "task-cancelled", full_page=True)

    # A cancel could change nothing now (the API would answer "nothing to change"): it is not offered.
    page.wait_for_selector("#cancel", state="hidden")
    assert not page.is_visible("#cancel-reason") and page.is_visible("#retry")


def test_retry_a_failed_task_and_follow_its_lineage(page, service, start_worker):
    operator = service.token("operator")
    start_worker("busy", "ui-billing-worker", "ui-work")
    source = service.api.submit(operator, queue="ui-work", kind="charge", payload={"card": "4242"}, max_attempts=1)
    wait_for(lambda: service.api.task(operator, source["task_id"])["state"] == "FAILED", "the task to fail")

    sign_in(page, operator, f"#/task/{source['task_id']}")
    page.wait_for_selector("#task-state >> text=FAILED")
    assert page.is_hidden("#cancel") and page.is_visible("#retry")  # FAILED: nothing a cancel could stop
    assert page.text_content("#attempts [data-field=error-code]") == "card.declined"
    assert "card declined" in page.text_content("#outcome")
    screenshot(page, "task-failed", full_page=True)

    page.click("#retry")
    answer = page.wait_for_selector("#action-answer .notice.ok")
    retry_id = answer.query_selector("a").text_content()
    assert retry_id != source["task_id"] and "new task" in answer.text_content()
    page.wait_for_selector("#retried-by")
    assert page.text_content("#retried-by") == retry_id

    page.click("#retried-by")
    page.wait_for_selector(f"#task-id >> text={retry_id}")
    assert page.text_content("#retry-of") == source["task_id"]
    page.click("#retry-of")
    page.wait_for_selector(f"#task-id >> text={source['task_id']}")

    page.click("#retry")  # once per source: the same new task again
    page.wait_for_selector("#action-answer .notice >> text=already retried as")
    wait_for(lambda: service.api.task(operator, retry_id)["state"] == "FAILED", "the retry to run (and fail)")
