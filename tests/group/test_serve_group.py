"""``pulse-trio serve --processes 2`` as a user runs it: real processes, sockets and MariaDB.

One worker address and one HTTP address for the group; the workers are
spread over the members; ``/metrics`` answers for the group; a stop, a
member's death and the parent's death each end every process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio_websocket

import harness
from http_support import RawWorker
from metrics_support import Samples, exposition_samples
from pulse_trio.bench.processes import wait_until
from pulse_trio.child_process import child_environment, python_command
from pulse_trio.client import Client
from pulse_trio.config import Settings
from pulse_trio.group.member import ENVIRONMENT, GroupMember
from pulse_trio.group.metrics_files import SharedMetrics
from pulse_trio.group.shares import ConnectionShares, create_shares
from pulse_trio.ports import free_port
from pulse_trio.serve_process import ServeProcess
from pulse_trio.server.gated_accept import GATE_PATIENCE_S, GatedListener

pytestmark = pytest.mark.live

EXIT_CANNOT_LISTEN = 5


@pytest.fixture
def group(db):
    """A group of two on ``db``, both members ALIVE; yields (ServeProcess, Client)."""
    client = Client(db)
    with ServeProcess(db, extra_args=("--processes", "2", "--log-level", "info")) as serve:
        wait_until(lambda: len(client.nodes()) == 2, 20, "both members ALIVE")
        yield serve, client
    client.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _metrics(serve: ServeProcess) -> Samples:
    with urllib.request.urlopen(f"{serve.http_url}/metrics", timeout=5) as reply:
        return exposition_samples(reply.read())


async def _worker(serve: ServeProcess, token: str, nursery: trio.Nursery, name: str) -> RawWorker:
    """A worker of queue billing, connected to the group and registered."""
    ws = await trio_websocket.connect_websocket_url(
        nursery, serve.worker_url, subprotocols=["pulse.worker.v1"],
        extra_headers=[(b"authorization", f"Bearer {token}".encode())])
    worker = RawWorker(ws)
    await worker.register("billing", name=name)
    return worker


async def test_workers_spread_over_the_members_and_metrics_answer_for_the_group(group, token_factory, nursery):
    serve, client = group
    token = token_factory("worker")
    workers = [await _worker(serve, token, nursery, f"w{n}") for n in range(4)]
    nodes = [w["node_id"] for w in await trio.to_thread.run_sync(client.workers)]
    assert len(nodes) == 4 and sorted(nodes.count(node) for node in set(nodes)) == [2, 2]

    for n in range(4):
        await trio.to_thread.run_sync(lambda: client.submit("billing", "k", {"n": n}))

    async def offered(worker: RawWorker) -> None:  # each member offers to its own workers
        while not worker.assigned:
            await worker.receive()

    async with trio.open_nursery() as offers:  # all four first: a finished slot could take a task still READY
        for worker in workers:
            offers.start_soon(offered, worker)
    for worker in workers:
        await worker.run_one("ok")

    def counted() -> bool:  # the members publish every second; each scrape sums both
        figures = _metrics(serve)
        return (figures[("pulse_sessions_connected", ())] == 4
                and figures[("pulse_finishes_total", (("queue", "billing"), ("status", "SUCCEEDED")))] == 4)

    await trio.to_thread.run_sync(wait_until, counted, 20, "the group's metrics summed")
    for _ in range(5):  # whichever member answers
        figures = _metrics(serve)
        assert figures[("pulse_sessions_connected", ())] == 4
        assert figures[("pulse_database_up", ())] == 1
        assert figures[("pulse_finishes_total", (("queue", "billing"), ("status", "SUCCEEDED")))] == 4
    for worker in workers:
        await worker.ws.aclose()


async def test_a_worker_that_reconnects_lands_on_the_member_it_left_not_on_the_busier_one(group, token_factory,
                                                                                        nursery):
    """One worker on each member; one reconnects (a restart, a network blip): only the member it left, now
    holding none, may take it. Each round is the kernel's toss between two members, hence several."""
    serve, client = group
    token = token_factory("worker")
    first = await _worker(serve, token, nursery, "w0")
    second = await _worker(serve, token, nursery, "w1")
    assert len({w["node_id"] for w in await trio.to_thread.run_sync(client.workers)}) == 2
    for round_ in range(24):
        await second.ws.aclose()
        await trio.to_thread.run_sync(wait_until, lambda: len(client.workers()) == 1, 20, "the session closed")
        await trio.to_thread.run_sync(wait_until, lambda: sorted(_connection_counts(serve)) == [0, 1], 20,
                                      "its member has counted the connection closed")
        second = await _worker(serve, token, nursery, f"w{round_ + 2}")
        nodes = [w["node_id"] for w in await trio.to_thread.run_sync(client.workers)]
        assert len(set(nodes)) == 2, f"round {round_}: both workers on one member: {nodes}"
    for worker in (first, second):
        await worker.ws.aclose()


def _connection_counts(serve: ServeProcess, size: int = 2) -> list[int]:
    """Each member's count of worker connections, read from the group's shared memory (``group.shares``)."""
    assert serve.process is not None
    fds = Path(f"/proc/{serve.process.pid}/fd")
    (shares,) = [fd for fd in fds.iterdir()
                 if os.readlink(fd).startswith("/memfd:pulse-trio-connection-shares")]
    fd = os.open(shares, os.O_RDWR)
    try:
        view = ConnectionShares(fd, size, 0)
        try:
            return view.counts()
        finally:
            view.close()
    finally:
        os.close(fd)


def _running(group):
    """The group's first process and its members' pids, as the tests that stop it start from."""
    serve, client = group
    process = serve.process
    assert process is not None
    return serve, client, [node["pid"] for node in client.nodes()], process


def test_a_stopped_group_stops_every_member_and_records_them_stopped(group):
    serve, client, members, process = _running(group)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    assert not any(_alive(pid) for pid in members)
    assert {node["state"] for node in client.nodes(include_stopped=True)} == {"STOPPED"}
    lines = [json.loads(line) for line in serve.log_tail(10**6).splitlines() if line.startswith("{")]
    stopping = [line for line in lines if line["msg"].startswith("the serve group is stopping")]
    assert sorted(line["member"] for line in stopping) == [0, 1]  # each member's lines say which it is


def test_a_signal_to_every_process_at_once_still_stops_each_member_the_orderly_way(group):
    """systemd's default KillMode and a terminal's Ctrl-C signal the whole group, not only its first process."""
    serve, client, members, process = _running(group)
    for pid in (process.pid, *members):
        os.kill(pid, signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    wait_until(lambda: not any(_alive(pid) for pid in members), 20, "every member stopped")
    assert {node["state"] for node in client.nodes(include_stopped=True)} == {"STOPPED"}


def test_a_closed_terminal_sighup_stops_each_member_the_orderly_way(group):
    """Closing the terminal `serve --processes` runs in sends SIGHUP to every process of the group: a stop, as
    SIGTERM is, not the first process's death (docs/operations.md §14)."""
    serve, client, members, process = _running(group)
    for pid in (process.pid, *members):
        os.kill(pid, signal.SIGHUP)
    assert process.wait(timeout=30) == 0, serve.log_tail()
    wait_until(lambda: not any(_alive(pid) for pid in members), 20, "every member stopped")
    assert "Traceback" not in serve.log_tail(10**6)
    assert {node["state"] for node in client.nodes(include_stopped=True)} == {"STOPPED"}


def test_a_second_sigterm_while_the_group_stops_does_not_abandon_the_orderly_stop(group):
    """An impatient operator, a script that signals twice, Ctrl-C pressed twice: still an orderly stop, exit 0."""
    serve, client, members, process = _running(group)
    process.send_signal(signal.SIGTERM)
    time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0, serve.log_tail()
    assert "Traceback" not in serve.log_tail(10**6)
    wait_until(lambda: not any(_alive(pid) for pid in members), 30, "every member stopped")
    assert {node["state"] for node in client.nodes(include_stopped=True)} == {"STOPPED"}


async def test_ctrl_c_pressed_twice_in_a_terminal_still_stops_each_member_the_orderly_way(group, token_factory):
    """A terminal's Ctrl-C reaches every process of the group, and so does the second, pressed while the
    members still close their sessions (a worker on each that never answers the close holds that up to the
    grace): each member takes it as a warning too, as the first process does."""
    serve, client, members, process = _running(group)
    token = token_factory("worker")
    silent = [(await harness.raw_upgrade(serve.worker_port, token))[0] for _ in members]  # one on each member
    for pid in (process.pid, *members):
        os.kill(pid, signal.SIGINT)
    await trio.sleep(0.5)
    for pid in (process.pid, *members):
        if _alive(pid):
            os.kill(pid, signal.SIGINT)
    assert await trio.to_thread.run_sync(lambda: process.wait(timeout=30)) == 0, serve.log_tail()
    await trio.to_thread.run_sync(wait_until, lambda: not any(_alive(pid) for pid in members), 20,
                                  "every member stopped")
    for stream in silent:
        await stream.aclose()
    log = serve.log_tail(10**6)
    assert "Traceback" not in log, log[-3000:]
    assert {node["state"] for node in client.nodes(include_stopped=True)} == {"STOPPED"}, log[-3000:]


def _members_of(parent: int) -> list[int]:
    """The pids of ``parent``'s children, from /proc: a group's members before they have a node."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == parent:
                        found.append(int(entry))
    return found


def test_sigterm_to_every_process_while_the_group_starts_stops_it_with_exit_0(db):
    """systemctl stop while the group still starts: systemd's default KillMode signals every process, members
    still importing or starting among them. The group stops as asked and its first process exits 0, as one
    serve process does on a SIGTERM during its start, not with a member's death, which systemd counts as a
    failure. Each round is a race of a member's end and the first process's own signal, hence several."""
    client = Client(db)
    outcomes = []
    try:
        for attempt in range(12):
            process = subprocess.Popen(
                [sys.executable, "-m", "pulse_trio", "serve", "--processes", "2", "--database-url",
                 db.url(redact=False), "--worker-listen", f"127.0.0.1:{free_port()}",
                 "--http-listen", f"127.0.0.1:{free_port()}", "--log-level", "warning"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            try:
                wait_until(lambda: len(_members_of(process.pid)) == 2, 30, "both members started")
                members = _members_of(process.pid)
                time.sleep(0.05 * (attempt % 6 + 1))  # the members are importing, then starting
                for pid in (process.pid, *members):  # the first process first, as systemd does
                    os.kill(pid, signal.SIGTERM)
                _, stderr = process.communicate(timeout=60)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
            wait_until(lambda: not any(_alive(pid) for pid in members), 30, "every member gone")
            outcomes.append((process.returncode, stderr))
        failed = [stderr[-1500:] for code, stderr in outcomes if code or "Traceback" in stderr]
        assert [code for code, _ in outcomes] == [0] * len(outcomes) and not failed, failed
        assert client.nodes() == []
    finally:
        client.close()


def test_a_member_that_gets_sigterm_while_it_starts_stops_as_asked_with_exit_0(db, tmp_path):
    """A member handed what its parent hands it, on a database that is away, so its start lasts (each store
    call retries): SIGTERM then unwinds the start, as in one serve process, instead of killing the member
    outright with its node half-made; the member exits 0, a stop asked for.

    The signal must come while the start runs: its first connection to the database is held unanswered until
    then (a log line would come too late: the start ends right after it), and later ones are refused.
    """
    hole = socket.create_server(("127.0.0.1", 0))
    away = dataclasses.replace(db, host="127.0.0.1", port=hole.getsockname()[1], unix_socket=None,
                               connect_timeout=5.0)
    worker, http = socket.create_server(("127.0.0.1", 0)), socket.create_server(("127.0.0.1", 0))
    with hole, worker, http, _lone_member(Settings(database_url=away.url(redact=False), processes=1), worker, http,
                                          tmp_path, "info") as process:
        hole.settimeout(30)
        first, _ = hole.accept()  # the start is waiting on the database's greeting
        process.send_signal(signal.SIGTERM)
        time.sleep(0.2)  # the member has taken the signal (kept for after its start)
        first.close()
        hole.close()  # the start's later attempts are refused: it ends, then the member stops as asked
        _, rest = process.communicate(timeout=30)
    assert process.returncode == 0, rest[-3000:]
    assert all(line.startswith("{") for line in rest.splitlines()), rest[-3000:]  # log lines, no traceback
    assert "SIGTERM while starting: stopping" in rest


def _member_racing_for_its_worker_port(db, tmp_path):
    """A member handed a worker socket whose port another process, which also bound it, listens on first.

    Binding with SO_REUSEADDR, as the first process does, succeeds while nobody listens on the port; so two
    groups (or a group and one serve process) started together both bind it, and the one whose members listen
    second finds it taken only then. Runs the member to its end: its exit code and standard error.
    """
    ports = []
    for _ in range(2):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", ports[0].getsockname()[1] if ports else 0))
        ports.append(sock)
    worker, other = ports
    other.listen()
    http = socket.create_server(("127.0.0.1", 0))
    settings = Settings(database_url=db.url(redact=False), processes=1,
                        worker_listen=("127.0.0.1", worker.getsockname()[1]))
    with worker, other, http, _lone_member(settings, worker, http, tmp_path, "warning") as process:
        _, stderr = process.communicate(timeout=30)
    return process.returncode, stderr


@contextlib.contextmanager
def _lone_member(settings: Settings, worker: socket.socket, http: socket.socket, tmp_path: Path,
                 log_level: str) -> Iterator[subprocess.Popen]:
    """A group member of one, started as a first process starts it: handed its sockets, its shares and its link."""
    shares_fd = create_shares(1)
    link, member_end = socket.socketpair()
    member = GroupMember(index=0, size=1, settings=settings, worker_fds=(worker.fileno(),),
                         http_fds=(http.fileno(),), shares_fd=shares_fd, link_fd=member_end.fileno(),
                         metrics_dir=tmp_path, group=secrets.token_hex(8))
    process = subprocess.Popen(python_command("pulse_trio", "serve", "--log-level", log_level),
                               env={**child_environment(), ENVIRONMENT: member.to_environment()},
                               pass_fds=member.inherited_fds, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        link.close()
        member_end.close()
        os.close(shares_fd)


def test_a_member_whose_worker_port_another_process_took_since_the_bind_fails_in_one_line_with_exit_5(db, tmp_path):
    """As one serve process does when its port is taken: exit 5 (which the first process passes on), one line
    naming the flag, not a traceback and exit 70 (an unexpected error)."""
    code, stderr = _member_racing_for_its_worker_port(db, tmp_path)
    assert code == EXIT_CANNOT_LISTEN, stderr[-3000:]
    assert "Traceback" not in stderr and "--worker-listen" in stderr, stderr[-3000:]
    assert stderr.splitlines()[-1].startswith("pulse-trio: cannot listen for workers"), stderr[-3000:]


def test_a_member_whose_worker_port_another_process_took_since_the_bind_leaves_no_node_to_declare_lost(db, tmp_path):
    """Its node joined before it listens (a port that accepts means the instance is up); one that then cannot
    listen never served: recorded STOPPED as it exits, not left ALIVE for the other instances to declare lost."""
    _member_racing_for_its_worker_port(db, tmp_path)
    client = Client(db)
    try:
        assert [node["state"] for node in client.nodes(include_stopped=True)] == ["STOPPED"]
    finally:
        client.close()


def test_a_member_that_dies_stops_the_group(group):
    serve, client = group
    first, second = (node["pid"] for node in client.nodes())
    os.kill(first, signal.SIGKILL)
    process = serve.process
    assert process is not None
    assert process.wait(timeout=30) == 128 + signal.SIGKILL  # a service manager restarts the whole
    wait_until(lambda: not _alive(second), 20, "the other member stopped")
    assert "exited with -9: stopping the others" in serve.log_tail()


def test_the_members_stop_when_the_parent_is_killed(group):
    serve, client, members, process = _running(group)
    process.kill()
    process.wait()
    wait_until(lambda: not any(_alive(pid) for pid in members), 30, "every member stopped")


def _metrics_dir(pid: int) -> Path:
    """The group's metrics folder, as the parent handed it to member ``pid`` (in its environment)."""
    with open(f"/proc/{pid}/environ", "rb") as environ:
        for entry in environ.read().split(b"\0"):
            if entry.startswith(ENVIRONMENT.encode() + b"="):
                return Path(json.loads(entry.split(b"=", 1)[1])["metrics_dir"])
    raise AssertionError(f"pid {pid} is no group member")


def test_the_group_metrics_folder_does_not_outlive_a_group_whose_first_process_was_killed(group):
    """The folder is memory (/dev/shm): a service manager restarting a killed group must not leak one each time."""
    serve, client = group
    members = [node["pid"] for node in client.nodes()]
    folder = _metrics_dir(members[0])
    wait_until(lambda: len(list(folder.glob("*.prom"))) == 2, 10, "both members published")
    process = serve.process
    assert process is not None
    process.kill()
    process.wait()
    wait_until(lambda: not any(_alive(pid) for pid in members), 30, "every member stopped")
    try:
        assert not folder.exists(), f"left behind: {sorted(p.name for p in folder.iterdir())}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_the_group_answers_every_scrape_while_a_member_stops(group):
    """A member that stops leaves the group's folder while the others answer scrapes (here a third member of the
    same folder, stopping and starting again over and over): every scrape answers 200, none 500."""
    serve, client = group
    folder = _metrics_dir(client.nodes()[0]["pid"])
    wait_until(lambda: len(list(folder.glob("*.prom"))) == 2, 10, "both members published")
    stopping = SharedMetrics(folder, 2)
    text = (folder / "0.prom").read_bytes()
    done = threading.Event()

    def stop_and_start() -> None:
        while not done.is_set():
            stopping.withdraw()
            stopping.publish(text)

    thread = threading.Thread(target=stop_and_start)
    thread.start()
    statuses: dict[int, int] = {}
    try:
        for _ in range(400):
            try:
                with urllib.request.urlopen(f"{serve.http_url}/metrics", timeout=5) as reply:
                    status = reply.status
            except urllib.error.HTTPError as exc:
                status = exc.code
            statuses[status] = statuses.get(status, 0) + 1
    finally:
        done.set()
        thread.join()
    assert statuses == {200: 400}, f"scrapes by status: {statuses}\n{serve.log_tail(3000)}"


async def test_a_stop_waits_for_members_that_stop_and_kills_one_still_running_after_the_stop_time(monkeypatch):
    """The parent's stop closes each member's link; a member that has not exited STOP_TIMEOUT_S later is killed."""
    from pulse_trio.group import parent

    monkeypatch.setattr(parent, "STOP_TIMEOUT_S", 1.0)  # 30 s in a real group
    stopping_link, stopping_end = socket.socketpair()
    hung_link, hung_end = socket.socketpair()
    # One child exits when its link closes, as a member does; the other ignores it, as a hung member would.
    stops = await trio.lowlevel.open_process(
        [sys.executable, "-c", f"import os; os.read({stopping_end.fileno()}, 1)"], pass_fds=(stopping_end.fileno(),))
    hangs = await trio.lowlevel.open_process(
        [sys.executable, "-c", "import time; time.sleep(60)"], pass_fds=(hung_end.fileno(),))
    stopping_end.close()
    hung_end.close()
    began = trio.current_time()
    with trio.fail_after(20):
        await parent._stop([stops, hangs], [stopping_link, hung_link])
    assert stops.returncode == 0 and hangs.returncode == -signal.SIGKILL
    assert trio.current_time() - began >= 1.0  # the hung one had its full time


def test_a_taken_port_fails_in_one_line_before_any_member_starts(db):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "pulse_trio", "serve", "--processes", "2", "--database-url", db.url(redact=False),
             "--worker-listen", f"127.0.0.1:{port}", "--http-listen", f"127.0.0.1:{free_port()}",
             "--log-level", "warning"],
            capture_output=True, text=True, timeout=60)
    assert done.returncode == EXIT_CANNOT_LISTEN, done
    assert done.stderr.count("\n") == 1 and "--worker-listen" in done.stderr, done.stderr
    client = Client(db)
    try:
        assert client.nodes(include_stopped=True) == []
    finally:
        client.close()


def test_a_group_whose_flags_the_cluster_refuses_fails_in_one_line_with_exit_2(db):
    """The stored node_lapse is 15 s, so --node-heartbeat 10 is refused: one line, as one process says it,
    not once per member plus the first process's own."""
    stderr = {}
    for processes in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-m", "pulse_trio", "serve", "--processes", processes,
             "--database-url", db.url(redact=False), "--worker-listen", f"127.0.0.1:{free_port()}",
             "--http-listen", f"127.0.0.1:{free_port()}", "--log-level", "warning", "--node-heartbeat", "10"],
            capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done
        stderr[processes] = done.stderr
    assert stderr["1"].count("\n") == 1 and stderr["1"].startswith("pulse-trio: the cluster refused"), stderr["1"]
    assert stderr["2"] == stderr["1"]


def test_a_flag_beats_its_variable_in_a_group_as_in_one_process(db):
    """A variable the flag overrides is never read (docs/operations.md §2), even one the flag's type refuses:
    the members, which take their settings from the first process, must not read it either and exit 2."""
    with _group_of_two(db, [sys.executable, "-m", "pulse_trio"], env={**child_environment(),
                       "PULSE_HTTP_LISTEN": "a leftover"}, stderr=subprocess.PIPE, text=True) as process:
        assert process.poll() is None, process.communicate()[1][-3000:]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


@contextlib.contextmanager
def _group_of_two(db, command: list[str], **popen: Any) -> Iterator[subprocess.Popen]:
    """``command serve --processes 2`` on ``db``, once both members' nodes are up (or it has ended); killed if it
    outlives the block."""
    client = Client(db)
    process = subprocess.Popen(
        [*command, "serve", "--processes", "2", "--database-url", db.url(redact=False),
         "--worker-listen", f"127.0.0.1:{free_port()}", "--http-listen", f"127.0.0.1:{free_port()}",
         "--log-level", "warning"], stdout=subprocess.DEVNULL, **popen)
    try:
        wait_until(lambda: process.poll() is not None or len(client.nodes()) == 2, 30, "the group up, or gone")
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        client.close()


async def test_a_member_over_its_share_leaves_the_next_connection_to_the_others():
    """Two gated listeners on one listening socket, as two members have: the connections alternate."""
    fd = create_shares(2)
    shares = [ConnectionShares(fd, 2, index) for index in range(2)]
    listening = trio.socket.socket()
    await listening.bind(("127.0.0.1", 0))
    listening.listen()
    port = listening.getsockname()[1]
    listeners = [GatedListener(trio.SocketListener(trio.socket.from_stdlib_socket(
        socket.socket(fileno=os.dup(listening.fileno())))), share) for share in shares]
    taken: list[int] = []
    async with trio.open_nursery() as nursery:
        async def accept(index: int) -> None:
            while True:
                await listeners[index].accept()
                taken.append(index)

        for index in range(2):
            nursery.start_soon(accept, index)
        clients = []
        for n in range(6):
            clients.append(await trio.open_tcp_stream("127.0.0.1", port))
            with trio.fail_after(5):
                while len(taken) < n + 1:
                    await trio.sleep(0.005)
        nursery.cancel_scope.cancel()
    assert sorted(taken.count(index) for index in range(2)) == [3, 3]
    assert [share.held for share in shares] == [taken.count(0), taken.count(1)]
    for client in clients:
        await client.aclose()
    listening.close()
    for share in shares:
        share.close()
    os.close(fd)


@contextlib.asynccontextmanager
async def _member_0_over_its_share():
    """Two members' shares with member 0 holding one, a listening socket, and member 0's gate on it."""
    fd = create_shares(2)
    shares = [ConnectionShares(fd, 2, index) for index in range(2)]
    shares[0].opened()
    listening = trio.socket.socket()
    await listening.bind(("127.0.0.1", 0))
    listening.listen()
    gated = GatedListener(trio.SocketListener(listening), shares[0])
    try:
        yield shares, listening, gated
    finally:
        await gated.aclose()
        for share in shares:
            share.close()
        os.close(fd)


async def test_a_connection_the_least_loaded_member_never_takes_goes_to_one_over_its_share_after_a_while():
    """Member 1 holds none but hangs (its listener never accepts: stopped, deadlocked); member 0, holding one,
    is over its share, and takes the connection once it has waited the gate's patience."""
    async with _member_0_over_its_share() as (shares, listening, healthy):
        client = await trio.open_tcp_stream("127.0.0.1", listening.getsockname()[1])
        began = trio.current_time()
        with trio.fail_after(5):
            taken = await healthy.accept()
        assert trio.current_time() - began >= GATE_PATIENCE_S and shares[1].counts() == [2, 0]
        for stream in (taken, client):
            await stream.aclose()


async def test_a_member_over_its_share_waits_its_patience_anew_for_each_connection():
    """Member 0 saw a connection wait while over its share, and member 1 took it; back over its share later, member
    0 must wait its patience for the next connection too, not take it at once on the old sighting."""
    async with _member_0_over_its_share() as (shares, listening, over):
        port = listening.getsockname()[1]
        taken: list[trio.SocketStream] = []

        async def member_0() -> None:
            taken.append(await over.accept())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(member_0)
            first = await trio.open_tcp_stream("127.0.0.1", port)
            await trio.sleep(0.2)  # member 0 has seen it wait at its polls
            (await listening.accept())[0].close()  # member 1 takes it ...
            shares[1].opened()  # ... and holds as many: member 0 is within its share and waits for the next
            await trio.sleep(GATE_PATIENCE_S)  # longer than its patience ago, that sighting
            shares[1].closed()  # member 1's worker leaves: member 0 is over its share again
            second = await trio.open_tcp_stream("127.0.0.1", port)
            await trio.sleep(GATE_PATIENCE_S / 2)
            assert not taken, "member 0 took the new connection at once, on the sighting of an earlier one"
            nursery.cancel_scope.cancel()
        for stream in (first, second):
            await stream.aclose()


async def test_a_hung_member_does_not_stop_the_healthy_one_from_taking_new_workers(group, token_factory, nursery):
    """One worker on member A; member B, holding none, hangs (SIGSTOP stands for a deadlock, a stuck call, a
    debugger). A new worker is still taken, by A: the least loaded member is B, which takes nothing."""
    serve, client = group
    token = token_factory("worker")
    first = await _worker(serve, token, nursery, "first")
    holder = (await trio.to_thread.run_sync(client.workers))[0]["node_id"]
    hung = next(node["pid"] for node in client.nodes() if node["node_id"] != holder)
    os.kill(hung, signal.SIGSTOP)
    try:
        with trio.fail_after(10):
            second = await _worker(serve, token, nursery, "second")
        for worker in (first, second):
            await worker.ws.aclose()
    finally:
        os.kill(hung, signal.SIGCONT)


@contextlib.asynccontextmanager
async def _slow_polling_group_with_one_worker(db, token_factory, nursery):
    """A group of two polling every 5 s, one worker of capacity 8 on one member; yields (worker, post a task)."""
    from http_support import Http

    client = Client(db)
    serve = await trio.to_thread.run_sync(
        ServeProcess(db, extra_args=("--processes", "2", "--poll-interval", "5")).start)
    try:
        await trio.to_thread.run_sync(wait_until, lambda: len(client.nodes()) == 2, 20, "both members ALIVE")
        ws = await trio_websocket.connect_websocket_url(
            nursery, serve.worker_url, subprotocols=["pulse.worker.v1"],
            extra_headers=[(b"authorization", f"Bearer {token_factory('worker')}".encode())])
        worker = RawWorker(ws)
        await worker.register("billing", capacity=8)
        http, producer = Http(serve.http_port), token_factory("producer", ("billing",))

        async def post(**fields) -> None:  # each on a fresh connection: either member may answer
            await http.post("/v1/tasks", token=producer, json_body={"queue": "billing", "kind": "k", **fields})

        yield worker, post
        await ws.aclose()
    finally:
        await trio.to_thread.run_sync(serve.stop)
        client.close()


async def test_a_submit_to_any_member_reaches_the_worker_on_another_at_once(db, token_factory, nursery):
    """One worker, two members, a poll of 5 s: a submit answered by either member is offered within a second."""
    async with _slow_polling_group_with_one_worker(db, token_factory, nursery) as (worker, post):
        for n in range(8):
            await post()
            with trio.fail_after(1):
                await worker.next_assignment()


async def test_work_a_timer_makes_due_on_any_member_reaches_the_worker_on_another_at_once(db, token_factory,
                                                                                        nursery):
    """Delayed tasks are promoted by whichever member's timers tick first; with a poll of 5 s, the
    worker's member hears of them from the other at once (a tick is at most 1 s apart)."""
    async with _slow_polling_group_with_one_worker(db, token_factory, nursery) as (worker, post):
        for n in range(6):  # one at a time: each promoted by either member's tick
            await post(delay=0.2)
            with trio.fail_after(2.5):  # due in 0.2 s, promoted within a tick of 1 s, then offered
                await worker.next_assignment()


async def test_a_keyed_finish_that_frees_waiting_work_reaches_the_worker_on_another_member_at_once(
        db, token_factory, nursery):
    """Key "k" at its limit holds its second task set aside; the holder (on one member) stops taking
    work and finishes; the only worker with room is on the other member, which polls every 20 s: it
    is told at once, as for a submit."""
    from http_support import Http

    client = Client(db)
    serve = await trio.to_thread.run_sync(
        ServeProcess(db, extra_args=("--processes", "2", "--poll-interval", "20")).start)
    try:
        await trio.to_thread.run_sync(wait_until, lambda: len(client.nodes()) == 2, 20, "both members ALIVE")
        workers = []
        for name in ("a", "b"):
            ws = await trio_websocket.connect_websocket_url(
                nursery, serve.worker_url, subprotocols=["pulse.worker.v1"],
                extra_headers=[(b"authorization", f"Bearer {token_factory('worker')}".encode())])
            worker = RawWorker(ws)
            await worker.register("billing", capacity=1, name=name, keys=True)
            workers.append(worker)
        nodes = {w["node_id"] for w in client.workers()}
        assert len(nodes) == 2, "one worker on each member"
        http, producer = Http(serve.http_port), token_factory("producer", ("billing",))
        for _ in range(2):
            reply = await http.post("/v1/tasks", token=producer,
                                    json_body={"queue": "billing", "kind": "k", "concurrency_key": "k"})
            assert reply.status == 201, reply.body
        with trio.fail_after(5):  # the first is offered at once, to whichever worker; the second meets the limit
            async with trio.open_nursery() as race:
                async def first_offer(worker, scope=race.cancel_scope):
                    while not worker.assigned:
                        await worker.receive()
                    scope.cancel()
                for worker in workers:
                    race.start_soon(first_offer, worker)
        holder = next(w for w in workers if w.assigned)
        other = next(w for w in workers if w is not holder)
        await holder.request("worker.capacity", {"sequence": "2", "capacity": 0, "drain": False})
        # Let every pass the submits woke end first: one still under way after the finish would find the
        # freed task by itself, and the test would pass without anyone telling the other member.
        await trio.sleep(1)
        lease = holder.assigned.pop(0)["lease"]
        command = {"task_id": lease["task_id"], "lease_id": lease["lease_id"], "lease_secret": lease["lease_secret"],
                   "revision": lease["revision"]}
        command["revision"] = (await holder.request("task.start", command))["lease"]["revision"]
        await holder.request("task.finish", {**command, "status": "SUCCEEDED", "result": {}})
        with trio.fail_after(3):  # well within the 20 s poll
            offered = await other.next_assignment()
        assert offered["task"]["concurrency_key"] == "k"
        for worker in workers:
            await worker.ws.aclose()
    finally:
        await trio.to_thread.run_sync(serve.stop)
        client.close()


async def test_a_wake_reaches_every_other_member_and_none_is_lost_to_a_member_not_yet_listening():
    from pulse_trio.group.wake import SiblingWake

    group = os.urandom(4).hex()
    members = [SiblingWake(group, 3, index) for index in range(3)]
    woken = [0, 0, 0]
    async with trio.open_nursery() as nursery:
        for index, member in enumerate(members):
            nursery.start_soon(member.listen, lambda index=index: woken.__setitem__(index, woken[index] + 1))
        await trio.sleep(0.05)
        members[0].notify()
        with trio.fail_after(2):
            while woken[1:] != [1, 1]:
                await trio.sleep(0.01)
        assert woken[0] == 0  # not itself
        nursery.cancel_scope.cancel()
    members[2].close()
    members[1].notify()  # member 2 is gone: dropped, no error
    for member in members[:2]:
        member.close()


def test_the_members_run_the_parents_code_not_a_pulse_trio_package_in_the_working_directory(db, tmp_path):
    """The first process runs as the console script (no working directory on its sys.path); a member started
    with ``python -m`` would import a ``pulse_trio`` folder in the working directory (another version's checkout,
    anyone's file in /tmp) and run it with the service's rights and database password."""
    planted = tmp_path / "pulse_trio"
    planted.mkdir()
    (planted / "__init__.py").write_text("")
    marker = tmp_path / "ran-the-planted-package"
    (planted / "__main__.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise SystemExit(3)\n")
    worktree = str(Path(__file__).resolve().parents[2])
    console_script = [sys.executable, "-c", f"import sys; sys.path[0] = {worktree!r}; from pulse_trio.cli import main; "
                                            "sys.exit(main())"]
    with _group_of_two(db, console_script, cwd=tmp_path, stderr=subprocess.DEVNULL) as process:
        assert not marker.exists(), "a member imported pulse_trio from the working directory"
        assert process.poll() is None, process.returncode
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def test_a_group_serves_https_and_wss_on_the_sockets_it_inherits(db, tls):
    """With --tls-cert the members wrap the inherited sockets: HTTPS answers, a WSS upgrade is judged (401)."""
    cert, key, context = tls
    worker_port, http_port = free_port(), free_port()
    client = Client(db)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pulse_trio", "serve", "--processes", "2", "--database-url", db.url(redact=False),
         "--worker-listen", f"127.0.0.1:{worker_port}", "--http-listen", f"127.0.0.1:{http_port}",
         "--tls-cert", str(cert), "--tls-key", str(key), "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: len(client.nodes()) == 2, 30, "both members ALIVE")

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{http_port}/healthz", timeout=5,
                                            context=context) as reply:
                    return reply.status == 200
            except OSError:
                return False

        wait_until(healthy, 30, "the HTTPS API answering")
        for _ in range(2):  # one connection to each member
            with context.wrap_socket(socket.create_connection(("127.0.0.1", worker_port), timeout=5),
                                     server_hostname="127.0.0.1") as tls:
                tls.sendall(b"GET /v1/worker HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                            b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                            b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: pulse.worker.v1\r\n\r\n")
                assert tls.recv(4096).startswith(b"HTTP/1.1 401 ")  # no token: refused over TLS, as one process does
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        client.close()
