"""`task list`, `--format table`, `workers drain` and the one JSON style, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from cli_support import COMMAND, run, serve
from pulse_trio.cli.output import compact
from pulse_trio.client import Client
from token_support import make_token

EXIT_USAGE, EXIT_NOT_FOUND = 2, 3


def cli(db, *args: str) -> subprocess.CompletedProcess[str]:
    return run(*args, "--database-url", db.url(redact=False))


def submit(db, queue: str, kind: str, payload: str = "{}") -> dict:
    done = cli(db, "submit", "--queue", queue, "--kind", kind, "--payload", payload)
    assert done.returncode == 0, done
    return json.loads(done.stdout)


def test_task_list_takes_the_filters_of_the_http_api(db):
    with Client(db, pool_size=1) as client:
        ids = [client.submit("mail" if i % 2 else "billing", "send" if i < 4 else "charge", {})["task_id"]
               for i in range(6)]
        every = json.loads(cli(db, "task", "list").stdout)
        assert every == client.list()  # the Python client's list, as is
    assert [t["task_id"] for t in every["tasks"]] == ids and every["next"] is None
    mail = json.loads(cli(db, "task", "list", "--queue", "mail", "--kind", "send", "--state", "READY").stdout)
    assert [t["task_id"] for t in mail["tasks"]] == [ids[1], ids[3]]
    first = json.loads(cli(db, "task", "list", "--limit", "4").stdout)
    assert [t["task_id"] for t in first["tasks"]] == ids[:4] and first["next"] == ids[3]
    rest = json.loads(cli(db, "task", "list", "--limit", "4", "--cursor", first["next"]).stdout)
    assert [t["task_id"] for t in rest["tasks"]] == ids[4:] and rest["next"] is None
    newest = json.loads(cli(db, "task", "list", "--order", "newest", "--limit", "1").stdout)
    assert [t["task_id"] for t in newest["tasks"]] == ids[-1:]
    table = cli(db, "task", "list", "--format", "table", "--limit", "2").stdout.splitlines()
    assert table[0].split() == ["TASK", "QUEUE", "KIND", "STATE", "PRIORITY", "ATTEMPT", "CREATED"]
    assert table[1].split()[:4] == [ids[0], "billing", "send", "READY"] and table[-1] == f"more: --cursor {ids[1]}"
    for bad in (["--limit", "0"], ["--state", "DONE"], ["--cursor", "nope"]):
        done = cli(db, "task", "list", *bad)
        assert done.returncode == EXIT_USAGE and done.stdout == "", bad


def test_one_compact_json_style_and_tables_for_people(db):
    task = submit(db, "billing", "invoice.send", '{"invoice": 991.50, "note": "a, b: c"}')
    assert task["created"] is True
    for args in (["task", "show", task["task_id"]], ["submit", "--queue", "billing", "--kind", "k"], ["queues"],
                 ["workers"], ["nodes"], ["settings", "show"], ["token", "list"], ["task", "list"]):
        out = cli(db, *args).stdout
        assert out.count("\n") == 1 and out[:-1] == compact(out[:-1]), (args, out)  # no space between tokens
        json.loads(out)
    assert '"invoice":991.50' in cli(db, "task", "show", task["task_id"]).stdout  # digits kept exactly
    queues = cli(db, "queues", "--format", "table").stdout.splitlines()
    assert queues[0].split()[:3] == ["QUEUE", "SCHEDULED", "READY"] and queues[1].split()[:3] == ["billing", "0", "2"]
    settings = cli(db, "settings", "show", "--format", "table").stdout.splitlines()
    assert settings[0].split()[:3] == ["NAME", "VALUE_S", "DEFAULT_S"]
    assert any(line.split()[0] == "lease_ttl" for line in settings[1:])
    assert cli(db, "nodes", "--format", "table").stdout.split() == ["NODE", "STATE", "HOST", "PID", "SESSIONS",
                                                                     "HEARTBEAT", "LOST_BY"]


REGISTRY = """
from pulse_trio.sdk import Registry

registry = Registry()


@registry.handler("mail", "send")
async def send(task):
    return {}
"""


def test_workers_drain_stops_offers_to_one_instance(db, tmp_path):
    (tmp_path / "mail_worker.py").write_text(REGISTRY)
    token = make_token(db, "worker", ("mail",))
    with serve(db) as (worker_port, _http_port):
        worker = subprocess.Popen([*COMMAND, "worker", "run", f"{tmp_path / 'mail_worker.py'}:registry",
                                   "--token", token, "--url", f"ws://127.0.0.1:{worker_port}/v1/worker", "--quiet"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while not (listed := json.loads(cli(db, "workers").stdout)["workers"]):
                assert time.monotonic() < deadline and worker.poll() is None, "the worker never registered"
                time.sleep(0.1)
            instance = listed[0]["instance_id"]
            table = cli(db, "workers", "--format", "table").stdout.splitlines()
            assert table[0].split()[:3] == ["INSTANCE", "NAME", "STATE"] and table[1].startswith(instance)
            drained = cli(db, "workers", "drain", instance)
            assert drained.returncode == 0, drained
            assert json.loads(drained.stdout)["instance_id"] == instance and json.loads(drained.stdout)["drain"]
            later = submit(db, "mail", "send")
            time.sleep(0.5)
            assert json.loads(cli(db, "task", "show", later["task_id"]).stdout)["state"] == "READY"  # not offered
            missing = cli(db, "workers", "drain", "ins_01ARZ3NDEKTSV4RRFFQ69G5FAV")
            assert missing.returncode == EXIT_NOT_FOUND and "no worker instance" in missing.stderr
            assert cli(db, "workers", "drain", "bogus").returncode == EXIT_USAGE
        finally:
            worker.terminate()
            worker.wait(timeout=30)
            worker.stderr.close()


def test_queues_pause_and_resume(db):
    submit(db, "billing", "invoice.send", "{}")
    paused = json.loads(cli(db, "queues", "pause", "billing").stdout)
    assert (paused["queue"], paused["state"], paused["changed"]) == ("billing", "PAUSED", True)
    assert paused["paused_by"].startswith("cli@")
    assert json.loads(cli(db, "queues", "pause", "billing").stdout)["changed"] is False
    listed = json.loads(cli(db, "queues").stdout)["queues"]
    assert (listed["billing"]["state"], listed["billing"]["states"]) == ("PAUSED", {"READY": 1})
    table = cli(db, "queues", "--format", "table").stdout.splitlines()
    assert table[0].split()[-1] == "STATE" and table[1].split()[-1] == "PAUSED"
    resumed = json.loads(cli(db, "queues", "resume", "billing").stdout)
    assert (resumed["state"], resumed["changed"]) == ("ACTIVE", True)
    assert json.loads(cli(db, "queues").stdout)["queues"]["billing"]["paused"] is False


@pytest.mark.parametrize("args", [["pause", "bad name"], ["resume", "-x"], ["pause", "q" * 65], ["pause"],
                                  ["resume", "a", "b"], ["stop", "billing"]])
def test_queues_bad_input_exits_2_and_writes_nothing(db, args):
    done = cli(db, "queues", *args)
    assert done.returncode == EXIT_USAGE and done.stdout == "", (args, done.stderr)
    assert json.loads(cli(db, "queues").stdout)["queues"] == {}
