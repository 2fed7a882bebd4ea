"""`pulse-trio bench latency`, `bench connections` and `bench producer` run small and report every field (values are not judged)."""

from __future__ import annotations

import json
import subprocess
import sys


def _run(database_server, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pulse_trio", "bench", *args,
         "--database-url", database_server.with_database("unused").url(redact=False)],
        capture_output=True, text=True, timeout=120)


def _bench(database_server, *args: str) -> dict:
    done = _run(database_server, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_latency_reports_both_producer_paths(database_server):
    report = _bench(database_server, "latency", "--rate", "40", "--tasks", "20", "--timeout", "60",
                    "--worker-backend", "trio")
    assert report["mode"] == "latency" and report["options"]["worker_backend"] == "trio"
    assert report["poll_interval_s"] == 0.05 and report["serve_nodes"] == 1
    assert report["options"]["tasks"] == 20
    for path in ("http", "client"):
        figures = report[path]
        assert set(figures["submit_to_assign_ms"]) == {"p50", "p95", "p99"}
        assert set(figures["assign_to_finish_ms"]) == {"p50", "p99"}
        assert set(figures["producer_call_ms"]) == {"p50", "p99"}
        assert all(v is not None for v in (*figures["submit_to_assign_ms"].values(),
                                           *figures["assign_to_finish_ms"].values()))
        assert figures["achieved_rate_per_s"] > 0


def test_latency_with_a_history_reports_what_the_server_purged_meanwhile(database_server):
    report = _bench(database_server, "latency", "--rate", "40", "--tasks", "20", "--timeout", "60",
                    "--path", "http", "--history", "2000")
    assert report["options"]["history"] == 2000
    history = report["history"]
    assert history["tasks"] == 2000 and 0 <= history["left_after_run"] <= 2000
    assert history["purge_tasks_per_s_under_load"] is not None


def test_latency_with_a_negative_history_is_a_bad_argument(database_server):
    done = _run(database_server, "latency", "--rate", "40", "--tasks", "20", "--timeout", "60", "--history", "-1")
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stdout[:300], done.stderr[-400:])
    assert done.stderr.startswith("pulse-trio bench latency: error: argument --history: must not be negative"), \
        done.stderr[-400:]


def test_latency_on_a_serve_group_reports_every_task_assigned(database_server):
    """``--server-processes 2``: the submits reach either member, the one worker sits on one of them."""
    report = _bench(database_server, "latency", "--rate", "40", "--tasks", "20", "--timeout", "60",
                    "--path", "http", "--server-processes", "2")
    assert report["options"]["server_processes"] == 2 and report["serve_nodes"] == 2  # both members served
    figures = report["http"]
    assert all(v is not None for v in (*figures["submit_to_assign_ms"].values(),
                                       *figures["assign_to_finish_ms"].values()))
    assert figures["achieved_rate_per_s"] > 0


def test_connections_registers_every_session_and_stays_healthy(database_server):
    report = _bench(database_server, "connections", "--sessions", "50", "--idle", "1", "--timeout", "60")
    assert report["mode"] == "connections"
    assert report["sessions_registered"] == 50, report["errors"]
    assert report["sessions_connected_metric"] == 50
    assert report["sessions_connected_db"] == 50
    for key in ("register_s", "registrations_per_s", "rss_per_session_kib", "server_cpu_s_registering",
                "server_cpu_percent_registering", "server_cpu_percent_idle", "poll_interval_s"):
        assert report[key] is not None, key
    assert set(report["server_rss_mib"]) == {"before", "after", "after_idle"}
    assert set(report["register_ms"]) == {"p50", "p99"}
    assert report["health"]["readyz_status"] == 200
    assert report["health"]["task_run_s"] is not None


def test_producer_reports_submit_rates_and_the_statements_of_idle_waiters(database_server):
    report = _bench(database_server, "producer", "--tasks", "40", "--batch", "10", "--waiters", "20", "--idle", "1")
    assert report["mode"] == "producer" and report["tasks"] == 40
    assert set(report["submit_per_s"]) == {"one_by_one", "submit_many"}
    assert all(v > 0 for v in report["submit_per_s"].values())
    waiters = report["idle_waiters"]
    assert waiters["waiters"] == 20
    for key in ("queries_per_s_no_waiter", "queries_per_s_one_waiter", "queries_per_s_all_waiters",
                "probes_per_s_one_waiter", "probes_per_s_all_waiters"):
        assert waiters[key] is not None, key


def test_the_statements_per_second_count_none_of_the_readings_own(database_server):
    """A server nobody uses runs no statements: the counter's readings (each one's session set-up, the
    SHOW itself) are not the instance's work, or every producer figure carries them."""
    from pulse_trio.bench.producer import _queries_per_s

    assert _queries_per_s(database_server, 0.5) == 0


def test_connections_with_a_negative_idle_is_a_bad_argument(database_server):
    """One line and exit 2 before anything starts, as the counts are: not a whole registration run and
    then a traceback from sleeping a negative time."""
    done = _run(database_server, "connections", "--sessions", "5", "--timeout", "60", "--idle", "-1")
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stdout[:300], done.stderr[-400:])
    assert done.stderr.startswith("pulse-trio bench connections: error: argument --idle: must not be negative"), \
        done.stderr[-400:]
