"""`pulse-trio settings show|set`, and the producer commands' deprecated timing flags, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sql_support import rows


def cli(db, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pulse_trio", *args, "--database-url", db.url(redact=False)],
                          capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})})


def stored(db) -> dict[str, tuple]:
    return {name: (value, state) for name, value, state in rows(db, "SELECT name, value_ms, state FROM cluster_settings")}


def test_show_prints_every_setting_with_its_default_and_who_set_it(db):
    done = cli(db, "settings", "show")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)["settings"]
    assert list(shown) == ["lease_ttl", "start_timeout", "cancel_grace", "permit_quarantine", "priority_step",
                           "fairness_quantum", "node_heartbeat", "node_lapse", "task_retention"]
    assert shown["cancel_grace"] == {
        "name": "cancel_grace", "value": 30, "unit": "s", "meaning": "30 s", "default": 30, "state": "DEFAULT",
        "updated_at": None, "updated_by": None, "description": shown["cancel_grace"]["description"]}
    assert shown["permit_quarantine"]["value"] is None


def test_set_changes_one_or_several_in_one_go(db):
    done = cli(db, "settings", "set", "cancel_grace", "2.5")
    assert done.returncode == 0, done.stderr
    after = json.loads(done.stdout)["settings"]["cancel_grace"]
    assert (after["value"], after["state"]) == (2.5, "SET") and after["updated_by"].startswith("cli@")
    done = cli(db, "settings", "set", "node_heartbeat", "20", "node_lapse", "60", "permit_quarantine", "5")
    assert done.returncode == 0, done.stderr
    assert stored(db)["node_heartbeat"] == (20_000, "SET") and stored(db)["node_lapse"] == (60_000, "SET")
    assert cli(db, "settings", "set", "permit_quarantine", "lease-ttl").returncode == 0
    assert stored(db)["permit_quarantine"] == (None, "SET")
    assert json.loads(cli(db, "settings", "show").stdout)["settings"]["cancel_grace"]["value"] == 2.5


@pytest.mark.parametrize(("args", "message"), [
    (("poll_interval", "1"), "no cluster setting 'poll_interval'"),
    (("cancel_grace", "0"), "0.001 to 2147483.647 seconds"),
    (("cancel_grace", "0.0001"), "to the millisecond"),
    (("lease_ttl", "0.001"), "lease_ttl must be 0.5 to 2147483.647 seconds"),  # a task's own: 0.5 at least
    (("lease_ttl", "lease-ttl"), "not a number"),
    (("cancel_grace",), "a value is missing"),
    (("cancel_grace", "2", "cancel_grace", "3"), "named twice"),
    (("cancel_grace", "2", "nope", "3"), "no cluster setting 'nope'"),  # all or nothing
])
def test_bad_input_exits_2_and_writes_nothing(db, args, message):
    before = stored(db)
    done = cli(db, "settings", "set", *args)
    assert done.returncode == 2 and message in done.stderr, done
    assert done.stdout == "" and stored(db) == before


def test_a_combination_the_cluster_refuses_exits_1(db):
    done = cli(db, "settings", "set", "node_heartbeat", "10")  # the lapse is 15 s
    assert done.returncode == 1 and "node_lapse (15 s) must be at least twice node_heartbeat (10 s)" in done.stderr
    assert stored(db)["node_heartbeat"] == (5_000, "DEFAULT")


def test_the_old_timing_flags_warn_and_write_nothing(db):
    assert cli(db, "settings", "set", "priority_step", "2").returncode == 0
    done = cli(db, "submit", "--queue", "q", "--kind", "k", "--priority", "3", "--priority-step", "99",
               env={"PULSE_PRIORITY_STEP": "99"})
    assert done.returncode == 0, done.stderr
    assert "--priority-step is deprecated and ignored" in done.stderr
    task = json.loads(done.stdout)
    assert rows(db, "SELECT TIMESTAMPDIFF(SECOND, effective_at, due_at) FROM tasks WHERE task_id = %s",
                (task["task_id"],)) == [(6,)]  # 3 x the cluster's 2 s
    quiet = cli(db, "task", "show", task["task_id"], env={"PULSE_CANCEL_GRACE": "99"})
    assert quiet.returncode == 0 and quiet.stderr == ""  # the variable is serve's: here it is simply not read
    assert stored(db)["cancel_grace"] == (30_000, "DEFAULT")


def test_task_cancel_ignores_a_stale_pulse_cancel_grace_as_documented(db):
    """A shell that sourced an old serve.env, written the way people write durations: serve's to refuse."""
    task_id = json.loads(cli(db, "submit", "--queue", "billing", "--kind", "invoice.send").stdout)["task_id"]
    done = cli(db, "task", "cancel", task_id, env={"PULSE_CANCEL_GRACE": "30s"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["cancel_changed"] is True


def test_settings_show_is_not_refused_for_a_serve_only_variable(db):
    """`settings show` takes no --poll-interval: a bad PULSE_POLL_INTERVAL is serve's business, not its."""
    done = cli(db, "settings", "show", env={"PULSE_POLL_INTERVAL": "50ms"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["settings"]["cancel_grace"]["value"] == 30


def test_weight_gives_a_fairness_key_a_weight_and_weights_lists_them(db):
    done = cli(db, "settings", "weight", "tenant:7", "3")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert (shown["fairness_key"], shown["weight"]) == ("tenant:7", 3) and shown["updated_by"].startswith("cli@")
    listed = json.loads(cli(db, "settings", "weights").stdout)["fairness_weights"]
    assert list(listed) == ["tenant:7"]
    for bad in (("tenant:7", "0"), ("tenant:7", "x"), ("two words", "2")):
        refused = cli(db, "settings", "weight", *bad)
        assert refused.returncode == 2 and refused.stderr, bad
    assert rows(db, "SELECT weight FROM fairness_weights") == [(3,)]
    submitted = subprocess.run([sys.executable, "-m", "pulse_trio", "submit", "--queue", "q", "--kind", "k",
                                "--fairness-key", "tenant:7", "--database-url", db.url(redact=False)],
                               capture_output=True, text=True, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    assert json.loads(submitted.stdout)["fairness_key"] == "tenant:7"


def test_settings_show_table_prints_the_value_that_is_set(db):
    """Every digit, as the JSON output prints it: not rounded to 1.23457e+06."""
    assert cli(db, "settings", "set", "task_retention", "1234567.891").returncode == 0
    done = cli(db, "settings", "show", "--format", "table")
    assert done.returncode == 0, done.stderr
    row = next(line.split() for line in done.stdout.splitlines() if line.startswith("task_retention "))
    assert row[1] == "1234567.891", done.stdout
    assert json.loads(cli(db, "settings", "show").stdout)["settings"]["task_retention"]["value"] == 1234567.891


def test_settings_show_table_spells_the_task_s_own_lease_ttl_as_set_takes_it(db):
    """permit_quarantine's null is a value ("the task's own lease ttl"), not an empty cell: `-` read as unset."""
    done = cli(db, "settings", "show", "--format", "table")
    assert done.returncode == 0, done.stderr
    row = next(line.split() for line in done.stdout.splitlines() if line.startswith("permit_quarantine "))
    assert row[1:4] == ["lease-ttl", "lease-ttl", "DEFAULT"], done.stdout
    assert cli(db, "settings", "set", "permit_quarantine", "5").returncode == 0
    row = next(line.split() for line in cli(db, "settings", "show", "--format", "table").stdout.splitlines()
               if line.startswith("permit_quarantine "))
    assert row[1:4] == ["5", "lease-ttl", "SET"]
