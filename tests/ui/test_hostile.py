"""Untrusted data stays text: markup, javascript: URLs, bidi controls and other invisible characters from producers
and workers."""

from __future__ import annotations

from ui_support import screenshot, sign_in, wait_for
from ui_worker import HOSTILE

RLO = "\u202e"
HOSTILE_NAME = f'<img src=x onerror="alert(\'name\')">{RLO}evil'


def assert_nothing_ran(page) -> None:
    assert page.evaluate("() => window.__pwned") is None
    assert page.query_selector("img") is None
    assert page.query_selector("a[href^='javascript']") is None
    assert page.eval_on_selector_all("script", "s => s.map(e => e.getAttribute('src'))") == ["/ui/app.js"]
    text = page.inner_text("body")
    assert RLO not in text  # shown as a marked code point instead, so nothing reads backwards


def test_markup_in_payloads_results_errors_and_names_is_shown_as_text(page, service, start_worker):
    operator = service.token("operator")
    start_worker("busy", HOSTILE_NAME, "ui-work")
    task = service.api.submit(operator, queue="ui-work", kind="hostile", max_attempts=1,
                              idempotency_key=f"<script>alert('key')</script>{RLO}",
                              payload={"html": HOSTILE, "link": "javascript:alert(1)",
                                       "big": 12345678901234567890})
    wait_for(lambda: service.api.task(operator, task["task_id"])["state"] == "FAILED", "the hostile task to fail")

    sign_in(page, operator)
    page.wait_for_selector("tr[data-queue=ui-work]")
    assert_nothing_ran(page)

    page.goto("/ui/#/tasks?queue=ui-work&kind=hostile")
    page.wait_for_selector(f"tr[data-task={task['task_id']}]")
    assert_nothing_ran(page)

    page.goto(f"/ui/#/task/{task['task_id']}")
    page.wait_for_selector("#payload")
    payload = page.text_content("#payload")
    assert '<script>window.__pwned = \\"script\\"</script><img src=x onerror=' in payload
    assert '"link": "javascript:alert(1)"' in payload
    assert '"big": 12345678901234567890' in payload  # every digit, past what a JavaScript number holds
    assert "<img src=x onerror=" in page.text_content("[data-field=error-message]")
    assert "<img src=x onerror=" in page.text_content("#result")
    assert "U+202E" in page.eval_on_selector_all(".ctl", "chips => chips.map(c => c.textContent).join()")
    assert_nothing_ran(page)
    screenshot(page, "hostile-task", full_page=True)

    page.goto("/ui/#/workers")
    name = page.wait_for_selector("[data-field=worker-name] >> text=evil")
    assert name.text_content() == HOSTILE_NAME.replace(RLO, "U+202E")
    assert_nothing_ran(page)


def test_zero_width_and_other_format_characters_are_shown_as_marked_code_points(page, service):
    """A value with one must not read exactly like the value without it."""
    operator = service.token("operator")
    hidden = {"U+200B": "\u200b", "U+2060": "\u2060", "U+FEFF": "\ufeff", "U+00AD": "\u00ad"}
    key = "inv-" + "".join(hidden.values()) + "-key"
    task = service.api.submit(operator, queue="ui-invisible", kind="k", idempotency_key=key,
                              payload={"user": "admin\u200b"})
    sign_in(page, operator)
    page.goto(f"/ui/#/task/{task['task_id']}")
    page.wait_for_selector("#payload")
    text = page.inner_text("#view")
    assert not [name for name, char in hidden.items() if char in text]
    chips = page.eval_on_selector_all(".ctl", "chips => chips.map(c => c.textContent)")
    assert set(hidden) <= set(chips), chips
    assert page.text_content("#payload .ctl") == "U+200B"


def test_the_page_policy_refuses_markup_and_inline_script_outright(page, service):
    sign_in(page, service.token("operator"))
    # Trusted Types: assigning a string as HTML throws, whatever code tries it.
    refused = page.evaluate("""() => {
        try { document.body.insertAdjacentHTML("beforeend", "<img src=x onerror='window.__pwned=1'>"); }
        catch (error) { return error.name; }
        return "parsed";
    }""")
    assert refused == "TypeError"
    ran = page.evaluate("""() => {
        const script = document.createElement("script");
        try { script.text = "window.__pwned = 'inline'"; document.head.append(script); } catch (error) {}
        return window.__pwned ?? null;
    }""")
    assert ran is None
    assert_nothing_ran(page)
