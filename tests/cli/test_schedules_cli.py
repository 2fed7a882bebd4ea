"""`pulse-trio schedules`, as a user runs it: bad input exits 2 naming the field and writes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sql_support import rows


def cli(db, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pulse_trio", "schedules", *args, "--database-url",
                           db.url(redact=False)], capture_output=True, text=True, timeout=timeout, env=dict(os.environ))


def test_create_list_show_pause_resume_delete(db):
    done = cli(db, "create", "nightly", "--queue", "reports", "--kind", "build", "--cron", "30 2 * * *",
               "--timezone", "Europe/Berlin", "--payload", '{"n": 1.50}', "--missed", "catch_up",
               "--catch-up-limit", "3")
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    assert (made["name"], made["state"], made["cron"], made["timezone"], made["missed"], made["catch_up_limit"],
            made["payload"]) == ("nightly", "ACTIVE", "30 2 * * *", "Europe/Berlin", "catch_up", 3, {"n": 1.50})
    assert '"payload":{"n":1.50}' in done.stdout  # the payload's digits as given
    assert made["next_fire_at"].endswith(("00:30:00.000000Z", "01:30:00.000000Z"))
    listed = cli(db, "list", "--format", "table")
    assert listed.returncode == 0 and "nightly" in listed.stdout and "30 2 * * *" in listed.stdout
    paused = json.loads(cli(db, "pause", "nightly").stdout)
    assert (paused["state"], paused["changed"], paused["next_fire_at"]) == ("PAUSED", True, None)
    assert json.loads(cli(db, "pause", made["schedule_id"]).stdout)["changed"] is False
    resumed = json.loads(cli(db, "resume", "nightly").stdout)
    assert resumed["state"] == "ACTIVE" and resumed["updated_by"].startswith("cli@")
    deleted = json.loads(cli(db, "delete", "nightly").stdout)
    assert deleted["state"] == "DELETED"
    assert cli(db, "show", "nightly").returncode == 3  # the name is free now
    assert [s["state"] for s in json.loads(cli(db, "list", "--all").stdout)["schedules"]] == ["DELETED"]


@pytest.mark.parametrize("args,field", [
    (["--cron", "61 * * * *"], "cron"),
    (["--interval", "60", "--timezone", "Europe/Atlantis"], "timezone"),
    (["--interval", "0"], "interval"),
    (["--interval", "60", "--payload", "{bad"], "payload"),
    (["--interval", "60", "--payload", '{"amount": 1e400}'], "payload"),  # every tick's task would be unreadable
])
def test_bad_input_exits_2_naming_the_field_and_writes_nothing(db, args, field):
    done = cli(db, "create", "bad", "--queue", "q", "--kind", "k", *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"pulse-trio: {field}: "), done.stderr
    assert not done.stderr.startswith(f"pulse-trio: {field}: {field}"), done.stderr  # named once
    assert done.stdout == ""
    assert rows(db, "SELECT COUNT(*) FROM schedules") == [(0,)]


@pytest.mark.parametrize("value", ["1e100000", "1e400", "1" + "0" * 5000], ids=["1e100000", "1e400", "5001-digits"])
def test_an_interval_of_many_digits_is_one_short_line_and_exit_2(db, value):
    done = cli(db, "create", "bad", "--queue", "q", "--kind", "k", "--interval", value)
    assert done.returncode == 2, done.stderr[-600:]
    assert done.stderr.startswith("pulse-trio: interval: ") and len(done.stderr.splitlines()) == 1, done.stderr[-600:]
    assert len(done.stderr) < 200, done.stderr[:300]  # the value is quoted cut short, not digit for digit
    assert rows(db, "SELECT COUNT(*) FROM schedules") == [(0,)]


@pytest.mark.parametrize("flag", ["--interval", "--priority", "--max-attempts", "--catch-up-limit"])
def test_a_number_with_a_huge_exponent_is_refused_at_once(db, flag):
    """Compared to its bounds as typed: as an int, 1e999999999 alone would be a billion digits of work."""
    rule = [] if flag == "--interval" else ["--interval", "60", "--missed", "catch_up"]
    try:
        done = cli(db, "create", "bad", "--queue", "q", "--kind", "k", *rule, flag, "1e999999999", timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail(f"schedules create {flag} 1e999999999 still ran after 20 s")
    field = flag.removeprefix("--").replace("-", "_")
    assert done.returncode == 2 and done.stderr.startswith(f"pulse-trio: {field}: "), done.stderr[-600:]
    assert rows(db, "SELECT COUNT(*) FROM schedules") == [(0,)]


def test_arguments_argparse_refuses_exit_2_too(db):
    assert cli(db, "create", "x", "--queue", "q", "--kind", "k").returncode == 2  # neither --cron nor --interval
    assert rows(db, "SELECT COUNT(*) FROM schedules") == [(0,)]


def test_a_taken_name_exits_1_and_an_unknown_schedule_3(db):
    assert cli(db, "create", "once", "--queue", "q", "--kind", "k", "--interval", "60").returncode == 0
    again = cli(db, "create", "once", "--queue", "q", "--kind", "k", "--interval", "30")
    assert again.returncode == 1 and "exists" in again.stderr
    for action in ("show", "pause", "resume", "delete"):  # every command that names a schedule
        assert cli(db, action, "nope" if action != "resume" else "sch_not-an-id").returncode == 3
    assert cli(db, "list", "--format", "xml").returncode == 2
    assert rows(db, "SELECT COUNT(*) FROM schedules") == [(1,)]
