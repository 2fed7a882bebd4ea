"""Structured logs: one JSON object per line, ids where they belong, never a secret."""

from __future__ import annotations

import io
import json
import logging

import pytest
import trio

from pulse_trio import logs


@pytest.fixture
def captured():
    """Every record of the process, at DEBUG, through the JSON formatter, into a buffer."""
    root = logging.getLogger()
    level = root.level
    buffer = io.StringIO()
    handler = logs.configure("json", "DEBUG", stream=buffer)
    try:
        yield buffer
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def _records(buffer: io.StringIO) -> list[dict]:
    lines = buffer.getvalue().splitlines()
    assert lines, "nothing was logged"
    return [json.loads(line) for line in lines]  # every line is one JSON object


async def test_a_full_flow_logs_ids_and_no_secret(captured, http, tokens, token_factory, open_worker):
    worker_token = token_factory("worker", ("billing",))
    worker = await open_worker(worker_token, "billing")
    with trio.fail_after(10):
        task = (await http.post("/v1/tasks", token=tokens["producer"], json_body={
            "queue": "billing", "kind": "invoice.send", "payload": {"invoice": 7}})).json()
        assign = await worker.run_one({"sent": True})
    await http.get(f"/v1/tasks/{task['task_id']}", token=tokens["producer"])
    await http.post(f"/v1/tasks/{task['task_id']}/retry", token=tokens["worker"])  # a 403
    await http.get("/v1/queues", headers={"Authorization": f"Bearer {tokens['operator']}x"})  # a 401
    with trio.fail_after(5):  # the access line is written just after the answer has gone out
        while '"route":"/v1/queues"' not in captured.getvalue():
            await trio.sleep(0.01)

    text = captured.getvalue()
    secrets = {**tokens, "worker_token": worker_token, "lease_secret": assign["lease"]["lease_secret"],
               "instance_secret": worker.welcome["instance_secret"]}
    for name, secret in secrets.items():
        assert secret not in text, f"the {name} was logged"
    records = _records(captured)
    for record in records:
        assert {"ts", "level", "logger", "msg"} <= set(record)
        assert record["ts"].endswith("Z")

    registered = [r for r in records if r["msg"] == "session registered"]
    assert registered and registered[0]["session_id"] == worker.session_id
    assert registered[0]["instance_id"] == worker.welcome["instance_id"]

    access = [r for r in records if r["logger"] == "pulse_trio.http.access"]
    submit = next(r for r in access if r["method"] == "POST" and r["route"] == "/v1/tasks")
    assert submit["status"] == 201 and submit["task_id"] == task["task_id"] and submit["token_id"].startswith("tok_")
    assert submit["request_id"].startswith("req_") and submit["duration_ms"] >= 0
    shown = next(r for r in access if r["route"] == "/v1/tasks/{task_id}")
    assert shown["task_id"] == task["task_id"]  # lifted from the path in the message
    assert {r["status"] for r in access} >= {201, 200, 403, 401}


def _format(fmt: str, message: str, *args, exc_info=None, **extra) -> str:
    record = logging.LogRecord("pulse_trio.test", logging.INFO, __file__, 1, message, args, exc_info)
    record.__dict__.update(extra)
    return logs.formatter(fmt).format(record)


TOKEN = "pt_" + "A1b2" * 11
SECRET = "Zx9" * 14 + "A"


def test_secret_fields_are_redacted_and_secret_text_is_masked():
    line = json.loads(_format(
        "json", "worker %s sent %s with Authorization: Bearer %s to mysql://app:hunter2@db:3306/pulse",
        TOKEN, f'{{"lease_secret":"{SECRET}"}}', "opaque-credential",
        lease_secret=SECRET, instance_secret=SECRET, token=TOKEN, password="hunter2", token_id="tok_1",
        concurrency_token=12, session_id="ses_01M8VZMC9N9WQ7HZY3RZQQCE2A"))
    dumped = json.dumps(line)
    for secret in (TOKEN, SECRET, "hunter2", "opaque-credential"):
        assert secret not in dumped
    assert line["lease_secret"] == line["instance_secret"] == line["token"] == line["password"] == "[redacted]"
    assert line["token_id"] == "tok_1" and line["concurrency_token"] == 12  # ids, not secrets
    assert "mysql://app:***@db:3306/pulse" in line["msg"]


def test_tracebacks_are_masked_too():
    try:
        raise RuntimeError(f"could not use {TOKEN}")
    except RuntimeError:
        import sys

        line = json.loads(_format("json", "failed", exc_info=sys.exc_info()))
    assert "RuntimeError" in line["exc"] and TOKEN not in line["exc"]


def test_ids_in_the_message_become_fields_unless_given():
    line = json.loads(_format("json", "offer lse_01M8VZMC9N9WQ7HZY3RZQQCE2A of tsk_01M8VZMC9N9WQ7HZY3RZQQCE2B lapsed",
                              task_id="tsk_GIVEN"))
    assert line["lease_id"] == "lse_01M8VZMC9N9WQ7HZY3RZQQCE2A" and line["task_id"] == "tsk_GIVEN"


def test_bind_adds_context_to_every_line_inside_it():
    with logs.bind(request_id="req_1", task_id=None):
        inside = json.loads(_format("json", "x"))
    outside = json.loads(_format("json", "x"))
    assert inside["request_id"] == "req_1" and "task_id" not in inside and "request_id" not in outside


def test_text_format_is_one_key_value_line():
    line = _format("text", "hello %s", "world", session_id="ses_01M8VZMC9N9WQ7HZY3RZQQCE2A", token=TOKEN)
    assert "\n" not in line and TOKEN not in line
    assert ' msg="hello world" ' in line and "session_id=ses_01M8VZMC9N9WQ7HZY3RZQQCE2A" in line
    assert "token=[redacted]" in line
