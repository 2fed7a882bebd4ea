"""`pulse-trio bench` runs end to end on a small load and reports every figure (values are not judged)."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sql_support import user_with_password


def _run(database_server, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``pulse-trio bench ARGS`` on a fresh database of ``database_server``, to its end."""
    return subprocess.run(
        [sys.executable, "-m", "pulse_trio", "bench", *args,
         "--database-url", database_server.with_database("unused").url(redact=False)],
        capture_output=True, text=True, timeout=timeout)


def _bench(database_server, *args: str, timeout: float = 180) -> dict:
    """``pulse-trio bench ARGS --timeout 120``: its JSON report."""
    done = _run(database_server, *args, "--timeout", "120", timeout=timeout)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_bench_reports_every_figure(database_server, backend):
    # Enough tasks that each process's CPU in the window is more than the 10 ms tick /proc counts in.
    report = _bench(database_server, "--tasks", "400", "--workers", "1", "--capacity", "8", "--backlog", "50",
                    "--keyed-share", "0.25", "--fairness-keys", "7", "--payload-bytes", "1024",
                    "--worker-backend", backend)
    for key in ("end_to_end_tasks_per_s", "submit_tasks_per_s", "submit_to_assign_ms", "assign_to_finish_ms",
                "db_commits_per_task", "db_statements_per_task", "db_rows_written_per_task",
                "server_cpu_s_per_task", "workers_cpu_s_per_task",
                "database_cpu_s_per_task", "server_peak_rss_mib"):
        assert report[key] is not None, key
    assert set(report["submit_to_assign_ms"]) == {"p50", "p95", "p99"}
    assert report["options"]["tasks"] == 400 and report["options"]["worker_backend"] == backend
    # 400 tasks cannot run on fewer writes than one row each (their submit alone inserts them)
    assert report["db_rows_written_per_task"] >= 1
    assert report["db_statements_per_task"] > 0
    assert set(report["db_statements_by_kind_per_task"]) == {"select", "insert", "update", "delete"}
    assert report["workers_cpu_s_per_task"] > 0  # the worker processes were found and read
    assert report["database_cpu_s_per_task"] > 0  # the test's MariaDB runs here: its pid file was read
    # Read from the run's lease rows: every task held a slot for some time, and some claim offered each.
    assert 0 < report["slot_utilisation"] <= 1
    assert 1 <= report["claims"] <= 60 and report["offers_per_claim"] >= 1
    assert 0 <= report["claims_with_finishes"] <= report["claims"]


def test_bench_submit_first_measures_the_dispatch_without_the_submits(database_server):
    """``--submit-first``: the tasks (and their fairness keys' placement) are written before the window opens."""
    # Enough tasks that the server's CPU in the window is more than the 10 ms clock tick /proc counts in.
    report = _bench(database_server, "--tasks", "400", "--workers", "1", "--capacity", "8", "--fairness-keys", "400",
                    "--submit-first")
    assert report["options"]["submit_first"] is True
    # Within the window each task gets its lease row; the task rows and the keys' rows were inserted before it.
    assert report["db_rows_written_by_kind_per_task"]["inserted"] < 2
    assert report["server_cpu_s_per_task"] > 0 and report["end_to_end_tasks_per_s"] > 0


def test_bench_with_a_serve_group_measures_every_member(database_server):
    """``--server-processes 2``: one ``serve --processes 2``; its CPU is the parent's and both members'."""
    report = _bench(database_server, "--tasks", "400", "--workers", "2", "--capacity", "8",
                    "--server-processes", "2")
    assert report["options"]["server_processes"] == 2 and report["server_processes_measured"] == 3
    assert report["server_cpu_s_per_task"] > 0 and report["end_to_end_tasks_per_s"] > 0


def test_bench_with_a_history_reports_what_the_servers_purged(database_server):
    """``--history``: finished tasks past the retention, filled first and purged by the servers during the run."""
    history = _bench(database_server, "--tasks", "200", "--workers", "1", "--capacity", "8",
                     "--history", "3000")["history"]
    assert (history["tasks"], history["rows"]) == (3000, 9000)
    assert history["purged_during_run_s"] is not None  # the servers purged all of it, within the run's deadline
    assert history["purge_tasks_per_s_under_load"] is not None and "purge_tasks_per_s_after_run" in history


def test_fill_finished_inserts_history_with_leases_and_receipts(db):
    from pulse_trio.bench.fill_finished import FillOptions, fill
    from pulse_trio.client import Client

    report = fill(db, FillOptions(tasks=1234, queue="old", age_s=3600, chunk=500))
    assert (report["tasks"], report["rows"]) == (1234, 3702)
    with Client(db) as client:
        page = client.list(queue="old", limit=1)
        task = client.get(page["tasks"][0]["task_id"])  # every id parses, every row reads as a task
        assert task["state"] == "SUCCEEDED" and len(task["attempts"]) == 1
        assert client.queues()["old"]["states"] == {"SUCCEEDED": 1234}


def test_a_capacity_sweep_reports_each_capacity_and_the_ceiling(database_server):
    """``--capacity 2,4``: one run per capacity, their throughput and CPU per task side by side."""
    report = _bench(database_server, "--tasks", "400", "--workers", "1", "--capacity", "2,4", timeout=240)
    assert [row["capacity"] for row in report["sweep"]] == [2, 4]
    assert [run["options"]["capacity"] for run in report["runs"]] == [2, 4]
    for row in report["sweep"]:
        assert row["end_to_end_tasks_per_s"] > 0 and row["workers_cpu_s_per_task"] > 0
    assert report["ceiling_capacity"] in (2, 4)
    assert report["best_tasks_per_s"] == max(row["end_to_end_tasks_per_s"] for row in report["sweep"])


@pytest.mark.parametrize("capacity", ["1", "1,2"], ids=["one-run", "sweep"])
def test_a_run_past_its_timeout_is_one_line_and_exit_1(database_server, capacity):
    """It says how far the run got, never a traceback (docs/operations.md §7.1), as the other modes do."""
    done = _run(database_server, "--tasks", "3000", "--workers", "1", "--capacity", capacity, "--timeout", "0.5")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-800:]
    failures = [line for line in done.stderr.splitlines() if line.startswith("pulse-trio: ")]
    assert len(failures) == 1 and "of 3000 tasks finished in 0.5s" in failures[0], done.stderr[-800:]
    assert done.stdout == ""


@pytest.mark.parametrize("flag, value", [
    ("--tasks", "0"), ("--tasks", "-3"), ("--instances", "0"), ("--workers", "0"), ("--server-processes", "0"),
    ("--backlog", "-1"), ("--payload-bytes", "-1"), ("--history", "-1"), ("--fairness-keys", "-1"),
    ("--keyed-share", "1.5"), ("--keyed-share", "nan"), ("--timeout", "nan"), ("--timeout", "0"),
])
def test_a_count_out_of_range_is_a_bad_argument(database_server, flag, value):
    """One line and exit 2 before anything starts (docs/operations.md §7.1): no tasks divided by zero, minus
    three printed NaN (not JSON), and no workers waited out the timeout."""
    done = _run(database_server, "--tasks", "10", "--workers", "1", "--capacity", "1", "--timeout", "10", flag, value)
    assert done.returncode == 2, (done.returncode, done.stdout[:300], done.stderr[-400:])
    assert done.stderr.startswith(f"pulse-trio bench: error: argument {flag}: ") and done.stderr.count("\n") == 1, \
        done.stderr[-400:]
    assert done.stdout == ""


def _children(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            children = (task / "children").read_text().split() if (task / "children").exists() else []
            for child in map(int, children):
                if child not in found:
                    found.add(child)
                    todo.append(child)
    return found


def test_a_bench_stopped_by_sigterm_stops_the_servers_and_workers_it_started(database_server):
    """SIGTERM unwinds the run like Ctrl-C: its server and worker processes do not outlive it. Their command
    lines (which ``ps`` shows any user) hold no database password: the URL goes in their environment."""
    with user_with_password(database_server, "bench_runner", "ALL ON *.*") as runner:
        _sigterm_mid_run(runner)


def _sigterm_mid_run(database_server) -> None:
    bench = subprocess.Popen(
        [sys.executable, "-m", "pulse_trio", "bench", "--tasks", "1000000", "--workers", "1", "--capacity", "8",
         "--timeout", "120", "--database-url", database_server.with_database("unused").url(redact=False)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        started: set[int] = set()
        while len(started) < 2 and time.monotonic() < deadline:  # the server and the worker
            time.sleep(0.2)
            started = _children(bench.pid)
        assert len(started) >= 2, "the bench did not start its server and worker"
        for pid in started:
            with contextlib.suppress(FileNotFoundError):
                command_line = Path(f"/proc/{pid}/cmdline").read_bytes()
                assert database_server.password.encode() not in command_line, command_line.split(b"\0")[:8]
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(timeout=60) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 30
        while any(Path(f"/proc/{pid}").exists() for pid in started) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [pid for pid in started if Path(f"/proc/{pid}").exists()
                and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"]
        assert left == [], f"still running after the bench: {left}"
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()


def test_a_bench_stopped_mid_run_ends_at_once_its_workers_drained_before_their_server(database_server):
    """SIGTERM while the worker holds leases: the worker drains while its server still answers, then the
    server stops, so the run ends in seconds (stopped together, the worker had no server to report to and
    waited out its leases until it was killed)."""
    bench = subprocess.Popen(
        [sys.executable, "-m", "pulse_trio", "bench", "--tasks", "50000", "--workers", "1", "--capacity", "8",
         "--timeout", "120", "--database-url", database_server.with_database("unused").url(redact=False)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in bench.stderr:  # the run is under way once every task is submitted
            if "tasks submitted" in line:
                break
        else:
            pytest.fail(f"the bench ended before it submitted its tasks (exit {bench.wait()})")
        started = _children(bench.pid)
        assert len(started) >= 2, "the bench's server and worker are not running"
        stopped_at = time.monotonic()
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(timeout=60) == 128 + signal.SIGTERM
        assert time.monotonic() - stopped_at < 15, "the run took as long to end as a worker killed after waiting"
        assert not [pid for pid in started if Path(f"/proc/{pid}").exists()
                    and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"]
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()


def test_a_server_that_dies_during_the_run_ends_it_at_once_saying_so(database_server):
    """A serve process that exits mid-run leaves tasks nobody will run: the bench says which process exited
    and ends (one line, exit 1), rather than waiting out its deadline and reporting a timeout."""
    bench = subprocess.Popen(
        [sys.executable, "-m", "pulse_trio", "bench", "--tasks", "200", "--workers", "1", "--capacity", "1",
         "--timeout", "120", "--database-url", database_server.with_database("unused").url(redact=False)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in bench.stderr:
            lines.append(line)
            if "server instance(s) up" in line:
                break
        else:
            pytest.fail(f"the bench ended before its server was up: {''.join(lines)[-800:]}")
        [server] = [pid for pid in _children(bench.pid)  # the one serve process (its worker may be starting)
                    if b"serve" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
        killed_at = time.monotonic()
        subprocess.run(["kill", "-KILL", str(server)], check=True)
        out, err = bench.communicate(timeout=90)
        assert time.monotonic() - killed_at < 20, "the bench waited out a deadline for a server that was gone"
        failures = [line for line in err.splitlines() if line.startswith("pulse-trio: ")]
        assert bench.returncode == 1 and "Traceback" not in err, err[-800:]
        assert len(failures) == 1 and f"server process (pid {server}) exited" in failures[0], err[-800:]
        assert out == ""
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()


@pytest.mark.parametrize("share", [0.0625, 0.1, 0.25, 0.3, 0.75, 1.0])
def test_the_keyed_share_keys_that_share_of_the_tasks_spread_over_every_key(share):
    """``--keyed-share S``: S of the tasks carry a concurrency key, whatever S, and the keyed tasks take the
    keys in turn, so how many keys a run contends on does not hang on S (rounding 1/S keyed 0.75 as all
    of them, and a keyed task every 16th sat on one key of its limit of 4)."""
    from pulse_trio.bench.runner import CONCURRENCY_KEYS, concurrency_key

    keys = [concurrency_key(i, share) for i in range(1600)]
    keyed = [key for key in keys if key is not None]
    assert len(keyed) == round(1600 * share)
    assert len(set(keyed)) == min(CONCURRENCY_KEYS, len(keyed))
