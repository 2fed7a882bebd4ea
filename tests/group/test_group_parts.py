"""The serve group's parts: connection shares, the settings a member is handed, summed metrics, the code it runs."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from metrics_support import exposition_samples
import pulse_trio
from pulse_trio.child_process import child_environment
from pulse_trio.config import MAX_PROCESSES, Settings, parse_processes, settings_from_json, settings_to_json
from pulse_trio.group.heartbeats import Heartbeats, create_heartbeats
from pulse_trio.group.member import GroupMember
from pulse_trio.group.metrics_files import SharedMetrics
from pulse_trio.group.shares import ConnectionShares, create_shares
from pulse_trio.server.metrics import ServiceMetrics, Snapshot


@pytest.fixture
def shares():
    fd = create_shares(3)
    members = [ConnectionShares(fd, 3, index) for index in range(3)]
    yield members
    for member in members:
        member.close()
    os.close(fd)


def test_only_the_least_loaded_members_accept(shares):
    a, b, c = shares
    assert all(member.may_accept() for member in shares)
    a.opened()
    assert not a.may_accept() and b.may_accept() and c.may_accept()
    b.opened()
    c.opened()
    assert all(member.may_accept() for member in shares) and a.counts() == [1, 1, 1]
    a.opened()
    b.closed()
    assert b.may_accept() and not a.may_accept() and not c.may_accept()
    assert c.counts() == [2, 0, 1] and a.held == 2


def test_a_member_index_outside_the_group_is_refused():
    fd = create_shares(2)
    try:
        with pytest.raises(ValueError):
            ConnectionShares(fd, 2, 2)
    finally:
        os.close(fd)


def test_a_member_gets_the_parents_settings_exactly(tmp_path):
    settings = Settings(database_url="mysql://u:p@h:1/d", state_dir=tmp_path, worker_listen=("::1", 0),
                        tls_cert=tmp_path / "c.pem", tls_key=tmp_path / "k.pem", processes=4,
                        ).override(lease_ttl=3.5, permit_quarantine=None)
    member = GroupMember(index=1, size=4, settings=settings, worker_fds=(5, 6), http_fds=(7,), shares_fd=8,
                         link_fd=9, metrics_dir=tmp_path, group="g1")
    back = GroupMember.from_environment({"PULSE_GROUP_MEMBER": member.to_environment()})
    assert back == member and back.settings.explicit == {"lease_ttl", "permit_quarantine"}
    assert settings_from_json(settings_to_json(Settings())) == Settings()
    assert back.inherited_fds == (5, 6, 7, 8, 9)
    assert GroupMember.from_environment({}) is None


def test_a_member_under_the_watchdog_inherits_the_heartbeats_too(tmp_path):
    member = GroupMember(index=0, size=2, settings=Settings(), worker_fds=(5,), http_fds=(7,), shares_fd=8,
                         link_fd=9, metrics_dir=tmp_path, group="g1", heartbeats_fd=10, watchdog_s=30.0)
    back = GroupMember.from_environment({"PULSE_GROUP_MEMBER": member.to_environment()})
    assert back == member and back.inherited_fds == (5, 7, 8, 9, 10)


def test_a_member_is_silent_until_it_beats_and_again_once_it_stops_beating():
    fd = create_heartbeats(3)
    try:
        first, reader = Heartbeats(fd, 3), Heartbeats(fd, 3)  # each process maps the memory of its own
        assert reader.silent(within=60) == [0, 1, 2]  # never beaten
        first.beat(0)
        first.beat(2)
        assert reader.silent(within=60) == [1]
        time.sleep(0.1)
        first.beat(2)
        assert reader.silent(within=0.05) == [0, 1]  # 0 beat longer ago than that
        first.close()
        reader.close()
    finally:
        os.close(fd)


def test_processes_are_a_whole_number_or_auto():
    assert parse_processes("3") == 3
    assert parse_processes("auto") == min(MAX_PROCESSES, len(os.sched_getaffinity(0)))
    for bad in ("0", "-1", "1.5", "two", str(MAX_PROCESSES + 1)):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_processes(bad)


def _exposition(frames: int, transaction_s: float, sessions: int, http: int) -> bytes:
    metrics = ServiceMetrics()
    for _ in range(frames):
        metrics.count_frame_in(10)
    for _ in range(http):
        metrics.count_http("GET", "/metrics", 200)
    metrics.observe_transaction(transaction_s)
    store = types.SimpleNamespace(commits=frames, rollbacks=0, retries=0, recoveries=0, threads_busy=1)
    return metrics.process_exposition(Snapshot(hub={"sessions": sessions}, store=store))


def test_a_group_scrape_sums_every_members_series(tmp_path: Path):
    SharedMetrics(tmp_path, 0).publish(_exposition(frames=3, transaction_s=0.002, sessions=1, http=1))
    SharedMetrics(tmp_path, 1).publish(_exposition(frames=4, transaction_s=0.2, sessions=2, http=0))
    merged = exposition_samples(SharedMetrics(tmp_path, 1).merged())
    assert merged[("pulse_frames_received_total", ())] == 7
    assert merged[("pulse_frames_received_bytes_total", ())] == 70
    assert merged[("pulse_sessions_connected", ())] == 3
    assert merged[("pulse_store_threads_busy", ())] == 2
    assert merged[("pulse_http_requests_total", (("method", "GET"), ("route", "/metrics"), ("status", "200")))] == 1
    assert merged[("pulse_store_transaction_seconds_count", ())] == 2
    assert merged[("pulse_store_transaction_seconds_bucket", (("le", "0.0025"),))] == 1
    assert merged[("pulse_store_transaction_seconds_bucket", (("le", "0.25"),))] == 2
    # every family once, as one process's exposition has it
    families = [f.name for f in text_string_to_metric_families(SharedMetrics(tmp_path, 0).merged().decode())]
    assert len(families) == len(set(families))
    assert families == [f.name for f in text_string_to_metric_families(_exposition(1, 0.1, 1, 1).decode())]


def test_a_published_file_is_replaced_whole(tmp_path: Path):
    shared = SharedMetrics(tmp_path, 0)
    shared.publish(_exposition(frames=1, transaction_s=0.1, sessions=0, http=0))
    shared.publish(_exposition(frames=5, transaction_s=0.1, sessions=0, http=0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.prom"]
    assert exposition_samples(shared.merged())[("pulse_frames_received_total", ())] == 5


def test_a_stopped_members_series_stay_in_the_sum_until_the_last_member_removes_the_folder(tmp_path: Path):
    """Taken out as it stops, a member's counters would make the group's go down: a restart to Prometheus."""
    folder = tmp_path / "group"
    folder.mkdir()
    first, last = SharedMetrics(folder, 0), SharedMetrics(folder, 1)
    for member in (first, last):
        member.publish(_exposition(frames=1, transaction_s=0.1, sessions=0, http=0))
    first.withdraw()
    assert sorted(p.name for p in folder.iterdir()) == ["0.prom", "0.stopped", "1.prom"]
    assert exposition_samples(last.merged())[("pulse_frames_received_total", ())] == 2
    last.withdraw()
    assert not folder.exists()
    first.publish(b"")  # a member still starting when the others have gone publishes nothing, and does not fail
    assert not folder.exists()


_FRAMES_SENT = (b"# HELP pulse_frames_sent_total Worker frames sent.\n"
                b"# TYPE pulse_frames_sent_total counter\npulse_frames_sent_total 5.0\n")


def _scrapes_while(other_process: Callable[[], None], scrape: Callable[[], None]) -> None:
    """``scrape()`` over and over until ``other_process()`` returns in a thread, the two interleaved as finely
    as two processes are (not at the interpreter's usual switch interval)."""
    done = threading.Event()

    def run() -> None:
        try:
            other_process()
        finally:
            done.set()

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread = threading.Thread(target=run)
    thread.start()
    try:
        while not done.is_set():
            scrape()
    finally:
        sys.setswitchinterval(switch)
        thread.join()


def test_a_scrape_while_another_member_stops_neither_fails_nor_goes_down(tmp_path: Path):
    """Member 1 stops and starts again over and over while member 0 answers scrapes: its series stay in the
    sum, and no file the scrape listed is gone when it reads it."""
    folder = tmp_path / "group"
    folder.mkdir()
    answering, stopping = SharedMetrics(folder, 0), SharedMetrics(folder, 1)
    for member in (answering, stopping):
        member.publish(_FRAMES_SENT)
    sums = set()

    def stop_and_start() -> None:
        for _ in range(500):
            stopping.withdraw()
            stopping.publish(_FRAMES_SENT)

    _scrapes_while(stop_and_start, lambda: sums.add(
        exposition_samples(answering.merged())[("pulse_frames_sent_total", ())]))
    assert sums == {10}


def test_a_scrape_racing_the_last_members_removing_the_folder_does_not_fail(tmp_path: Path):
    """A member that answers before its first publish, while the others stop: their files go as it reads."""
    folder = tmp_path / "group"
    others = [SharedMetrics(folder, 1), SharedMetrics(folder, 2)]

    def start_and_stop() -> None:
        for _ in range(500):
            folder.mkdir(exist_ok=True)
            for member in others:
                member.publish(_FRAMES_SENT)
            for member in others:
                member.withdraw()

    _scrapes_while(start_and_stop, SharedMetrics(folder, 0).merged)


def test_a_child_process_imports_the_pulse_trio_its_parent_imported(tmp_path):
    """Wherever it starts, and whatever the interpreter would find by itself (an install of another checkout)."""
    (tmp_path / "pulse_trio").mkdir()
    (tmp_path / "pulse_trio" / "__init__.py").write_text("")
    done = subprocess.run([sys.executable, "-P", "-c", "import pulse_trio; print(pulse_trio.__file__)"],
                          env=child_environment(), cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert done.stdout.strip() == str(Path(pulse_trio.__file__).resolve()), done
