"""`pulse-trio submit / task show|cancel|retry / workers / queues` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pulse_trio.dburl import connect


def cli(db, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pulse_trio", *args, "--database-url", db.url(redact=False)],
        capture_output=True, text=True, timeout=60, input=stdin,
    )


def task_count(db) -> int:
    conn = connect(db)
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM tasks")
        (count,) = cur.fetchone()
    conn.close()
    return count


def test_submit_then_show(db):
    done = cli(db, "submit", "--queue", "billing", "--kind", "invoice.send", "--payload", '{"invoice": 991.50}',
               "--priority", "7", "--idempotency-key", "invoice-991", "--max-attempts", "5")
    assert done.returncode == 0, done.stderr
    task = json.loads(done.stdout)
    assert task["state"] == "READY" and task["priority"] == 7 and task["max_attempts"] == 5
    assert task["idempotency_key"] == "invoice-991" and task["created"] is True
    shown = cli(db, "task", "show", task["task_id"])
    assert shown.returncode == 0
    view = json.loads(shown.stdout)
    for field in ("task_id", "queue", "kind", "state", "priority", "attempt", "max_attempts", "idempotency_key",
                  "concurrency_key", "effect_uncertain", "retry_of", "retried_by", "cancel_requested_at",
                  "attempts", "outcome"):
        assert field in view
    assert '"invoice": 991.50' in shown.stdout or '"invoice":991.50' in shown.stdout  # digits kept exactly
    again = json.loads(cli(db, "submit", "--queue", "billing", "--kind", "invoice.send",
                           "--idempotency-key", "invoice-991").stdout)
    assert again["task_id"] == task["task_id"] and again["created"] is False


def test_submit_with_a_retry_backoff(db):
    done = cli(db, "submit", "--queue", "q", "--kind", "k", "--backoff-initial", "0.5", "--backoff-factor", "3",
               "--backoff-max", "20")
    assert done.returncode == 0, done.stderr
    task = json.loads(done.stdout)
    assert (task["backoff_initial"], task["backoff_factor"], task["backoff_max"]) == (0.5, 3.0, 20.0)
    refused = cli(db, "submit", "--queue", "q", "--kind", "k", "--backoff-factor", "0.5")
    assert refused.returncode == 2 and "backoff" in refused.stderr
    assert task_count(db) == 1  # the refused one wrote nothing


def test_payload_from_file_and_stdin_and_delay(db, tmp_path):
    path = tmp_path / "payload.json"
    path.write_text(json.dumps({"blob": "x" * 100_000}))
    from_file = json.loads(cli(db, "submit", "--queue", "q", "--kind", "k", "--payload-file", str(path)).stdout)
    assert from_file["payload"]["blob"] == "x" * 100_000
    from_stdin = json.loads(cli(db, "submit", "--queue", "q", "--kind", "k", "--payload-file", "-",
                                "--delay", "60", stdin='[1, 2]').stdout)
    assert from_stdin["payload"] == [1, 2] and from_stdin["state"] == "SCHEDULED"


@pytest.mark.parametrize("args", [
    ["--queue", "Bad Queue", "--kind", "k"],
    ["--queue", "q", "--kind", "k", "--payload", "{not json"],
    ["--queue", "q", "--kind", "k", "--payload", '{"a": 1, "a": 2}'],
    # Valid JSON no worker can read (the protocol's number rules): every offer of it would be refused.
    ["--queue", "q", "--kind", "k", "--payload", '{"amount": 1e400}'],
    ["--queue", "q", "--kind", "k", "--payload", '{"amount": 1' + "0" * 4300 + "}"],
    ["--queue", "q", "--kind", "k", "--priority", "10"],
    ["--queue", "q", "--kind", "k", "--due-at", "2026-02-30T00:00:00Z"],
    ["--queue", "q", "--kind", "k", "--delay", "1", "--due-at", "2026-12-01T00:00:00Z"],
])
def test_bad_arguments_exit_2_and_write_nothing(db, args):
    done = cli(db, "submit", *args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == "" and task_count(db) == 0


def test_payload_over_256_kib_exits_2(db, tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps("x" * 300_000))
    done = cli(db, "submit", "--queue", "q", "--kind", "k", "--payload-file", str(path))
    assert done.returncode == 2 and "larger than" in done.stderr and task_count(db) == 0


def test_unknown_task_exits_3_not_found(db):
    for action in ("show", "cancel", "retry"):
        done = cli(db, "task", action, "tsk_01ARZ3NDEKTSV4RRFFQ69G5FAV")
        assert done.returncode == 3 and "no task" in done.stderr


def test_cancel_ready_task_then_retry_it(db):
    task = json.loads(cli(db, "submit", "--queue", "q", "--kind", "k").stdout)
    cancelled = json.loads(cli(db, "task", "cancel", task["task_id"], "--reason", "changed my mind").stdout)
    assert cancelled["state"] == "CANCELLED" and cancelled["cancel_requested_at"]
    again = json.loads(cli(db, "task", "cancel", task["task_id"]).stdout)
    assert again["state"] == "CANCELLED" and again["cancel_changed"] is False
    retried = json.loads(cli(db, "task", "retry", task["task_id"]).stdout)
    assert retried["retry_of"] == task["task_id"] and retried["task_id"] != task["task_id"]
    assert retried["state"] == "READY" and retried["created"] is True
    twice = json.loads(cli(db, "task", "retry", task["task_id"]).stdout)
    assert twice["task_id"] == retried["task_id"] and twice["created"] is False
    source = json.loads(cli(db, "task", "show", task["task_id"]).stdout)
    assert source["retried_by"] == retried["task_id"]


def test_retry_of_a_live_task_is_refused(db):
    task = json.loads(cli(db, "submit", "--queue", "q", "--kind", "k").stdout)
    done = cli(db, "task", "retry", task["task_id"])
    assert done.returncode == 1 and "terminal" in done.stderr


def test_workers_and_queues(db):
    cli(db, "submit", "--queue", "q", "--kind", "k")
    queues = json.loads(cli(db, "queues").stdout)["queues"]
    assert queues["q"]["states"] == {"READY": 1}
    assert json.loads(cli(db, "workers").stdout) == {"workers": []}
    assert json.loads(cli(db, "nodes", "--all").stdout) == {"nodes": []}  # no serve process ever ran here


def _cancel_is_a_bad_argument(db, reason: str) -> None:
    task = json.loads(cli(db, "submit", "--queue", "q", "--kind", "k").stdout)
    done = cli(db, "task", "cancel", task["task_id"], "--reason", reason)
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.returncode == 2 and "reason" in done.stderr, done  # a bad argument, not a refusal (1)
    assert json.loads(cli(db, "task", "show", task["task_id"]).stdout)["state"] == "READY"  # nothing written


def test_task_cancel_with_a_reason_too_long_is_a_bad_argument(db):
    _cancel_is_a_bad_argument(db, "r" * 256)


def test_task_cancel_with_a_reason_that_is_not_utf8_is_a_bad_argument(db):
    _cancel_is_a_bad_argument(db, "caf\udce9")
