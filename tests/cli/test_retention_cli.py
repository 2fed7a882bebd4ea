"""`task purge` and `settings set task_retention … --queue`, as an operator runs them."""

from __future__ import annotations

import json
import subprocess

import pytest

from cli_support import run
from pulse_trio.bench.fill_finished import FillOptions, fill
from sql_support import rows

EXIT_USAGE = 2
DAY_S = 86_400


def cli(db, *args: str) -> subprocess.CompletedProcess[str]:
    return run(*args, "--database-url", db.url(redact=False))


def _tasks(db, queue: str) -> int:
    return rows(db, "SELECT COUNT(*) FROM tasks WHERE queue = %s", (queue,))[0][0]


def test_purge_by_hand_dry_run_then_for_real(db):
    fill(db, FillOptions(tasks=30, queue="billing", age_s=10 * DAY_S))
    fill(db, FillOptions(tasks=20, queue="billing", age_s=2 * DAY_S))
    fill(db, FillOptions(tasks=5, queue="mail", age_s=10 * DAY_S))
    dry = json.loads(cli(db, "task", "purge", "--older-than", "7d", "--dry-run").stdout)
    assert dry["dry_run"] is True and dry["due"] == {"tasks": 35}
    assert dry["queues"]["billing"]["due"] == 30 and dry["queues"]["billing"]["retention"] == 7 * DAY_S
    assert _tasks(db, "billing") == 50  # nothing deleted
    one = json.loads(cli(db, "task", "purge", "--older-than", "168h", "--queue", "mail").stdout)
    assert one["purged"]["tasks"] == 5 and list(one["queues"]) == ["mail"] and _tasks(db, "billing") == 50
    done = json.loads(cli(db, "task", "purge", "--older-than", "604800").stdout)
    assert done["purged"]["tasks"] == 30 and done["purged"]["leases"] == 30
    assert done["purged"]["renew_receipts"] == 30
    assert (_tasks(db, "billing"), _tasks(db, "mail")) == (20, 0)
    # Without --older-than each queue's retention applies: the cluster's 7 days, or the queue's own.
    assert json.loads(cli(db, "task", "purge").stdout)["purged"]["tasks"] == 0
    changed = json.loads(cli(db, "settings", "set", "task_retention", "86400", "--queue", "billing").stdout)
    assert (changed["queue"], changed["task_retention"], changed["changed"]) == ("billing", 86400, True)
    assert json.loads(cli(db, "task", "purge").stdout)["purged"]["tasks"] == 20
    back = json.loads(cli(db, "settings", "set", "task_retention", "cluster", "--queue", "billing").stdout)
    assert back["task_retention"] is None
    shown = json.loads(cli(db, "settings", "show").stdout)["settings"]["task_retention"]
    assert (shown["value"], shown["default"], shown["state"]) == (7 * DAY_S, 7 * DAY_S, "DEFAULT")


def test_the_cluster_retention_is_set_like_the_other_settings(db):
    changed = json.loads(cli(db, "settings", "set", "task_retention", "1209600").stdout)["settings"]
    assert (changed["task_retention"]["value"], changed["task_retention"]["state"]) == (1_209_600, "SET")


@pytest.mark.parametrize("args", [
    ["task", "purge", "--older-than", "7x"],
    ["task", "purge", "--older-than", "-1d"],
    ["task", "purge", "--older-than", "99999d"],
    ["task", "purge", "--queue", "bad name"],
    ["settings", "set", "task_retention", "0.5"],
    ["settings", "set", "task_retention", "999999999999"],
    ["settings", "set", "task_retention", "3600", "--queue", "-bad"],
    ["settings", "set", "task_retention", "0", "--queue", "billing"],
    ["settings", "set", "lease_ttl", "30", "--queue", "billing"],
    ["settings", "set", "task_retention", "3600", "lease_ttl", "30", "--queue", "billing"],
])
def test_bad_input_exits_2_and_writes_nothing(db, args):
    fill(db, FillOptions(tasks=3, queue="billing", age_s=30 * DAY_S))
    done = cli(db, *args)
    assert done.returncode == EXIT_USAGE and done.stdout == "", (args, done.stderr)
    assert done.stderr.startswith(("pulse-trio", "usage:")), done.stderr
    assert _tasks(db, "billing") == 3
    assert rows(db, "SELECT COUNT(*) FROM queues") == [(0,)]
    assert rows(db, "SELECT state FROM cluster_settings WHERE name = 'task_retention'") == [("DEFAULT",)]
