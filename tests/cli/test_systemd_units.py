"""The systemd units in deploy/systemd: verified by systemd itself, sandboxed, and the readiness they wait for.

``systemd-analyze verify`` reads each unit as systemd would load it (the
ExecStart binary must exist, so it is pointed at this checkout's
``pulse-trio``), and ``systemd-analyze security --offline`` scores the
sandboxing. Then real ``serve`` and ``worker run`` processes are started
with a ``NOTIFY_SOCKET`` of the test's own: ``READY=1`` must come when the
service is usable, ``STOPPING=1`` when SIGTERM begins the stop, and
``WATCHDOG=1`` only under a ``WATCHDOG_USEC``, while the service's event
loop (a group's: every member's) runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli_support import COMMAND, serve
from token_support import make_token

from pulse_trio.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
INSTALLED = "/opt/pulse-trio/venv/bin/pulse-trio"
ANALYZE = shutil.which("systemd-analyze") or "/usr/bin/systemd-analyze"  # scripts/bootstrap installs it


def _units() -> list[str]:
    return sorted(p.name for p in UNITS.glob("*.service"))


def _local(tmp_path: Path) -> list[Path]:
    """Each unit with ExecStart pointed at this checkout's pulse-trio; the worker template instantiated."""
    binary = str(Path(sys.executable).with_name("pulse-trio"))
    out = []
    for name in _units():
        text = (UNITS / name).read_text().replace(INSTALLED, binary)
        target = tmp_path / name.replace("@.service", "@billing.service")
        target.write_text(text)
        out.append(target)
    return out


def _directives(name: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in (UNITS / name).read_text().splitlines():
        if "=" in line and not line.lstrip().startswith(("#", "[")):
            key, value = line.split("=", 1)
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def test_the_units_are_there():
    assert _units() == ["pulse-trio-serve.service", "pulse-trio-worker@.service"]


def test_systemd_analyze_verify_accepts_every_unit_without_a_word(tmp_path):
    units = _local(tmp_path)
    done = subprocess.run([ANALYZE, "verify", "--man=no", *map(str, units)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert done.returncode == 0 and done.stderr == "" and done.stdout == "", done


def test_verify_is_a_real_check(tmp_path):
    """A unit with a misspelt directive or a missing binary is reported: the check above can fail."""
    (unit,) = [u for u in _local(tmp_path) if u.name == "pulse-trio-serve.service"]
    unit.write_text(unit.read_text().replace("TimeoutStopSec=", "TimeoutStopSecs=")
                    .replace(str(Path(sys.executable).with_name("pulse-trio")), "/nonexistent/pulse-trio"))
    done = subprocess.run([ANALYZE, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60)
    assert "TimeoutStopSecs" in done.stderr and "/nonexistent/pulse-trio" in done.stderr, done


@pytest.mark.parametrize("unit", ["pulse-trio-serve.service", "pulse-trio-worker@billing.service"])
def test_the_sandbox_scores_ok(tmp_path, unit):
    """Exposure at most 2.0 of 10 ("OK"); --threshold counts in tenths."""
    _local(tmp_path)
    done = subprocess.run([ANALYZE, "security", "--offline=yes", "--threshold=20", "--no-pager", unit],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr


@pytest.mark.parametrize("name", ["pulse-trio-serve.service", "pulse-trio-worker@.service"])
def test_each_unit_waits_for_readiness_stops_by_sigterm_restarts_and_reads_an_environment_file(name):
    d = _directives(name)
    assert d["Type"] == ["notify"] and d["NotifyAccess"] == ["main"]
    assert d["KillSignal"] == ["SIGTERM"] and int(d["TimeoutStopSec"][0]) >= 30
    assert d["Restart"] == ["on-failure"] and "2" in d["RestartPreventExitStatus"][0].split()
    assert d["EnvironmentFile"][0].startswith("/etc/pulse-trio/")
    for option in ("NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices",
                   "RestrictAddressFamilies", "SystemCallFilter", "CapabilityBoundingSet"):
        assert option in d, option
    assert d["ExecStart"][0].startswith(INSTALLED)


@pytest.mark.parametrize("name", ["pulse-trio-serve.service", "pulse-trio-worker@.service"])
def test_each_unit_restarts_a_process_whose_event_loop_hangs(name):
    """WatchdogSec= (docs/operations.md §12): tens of seconds, so a loop busy for a moment on a loaded
    machine is not taken for a hung one; the worker's no shorter than twice the default lease ttl."""
    from pulse_trio.config import Settings

    watchdog = float(_directives(name)["WatchdogSec"][0])
    assert watchdog >= 20, watchdog
    if "worker" in name:
        assert watchdog >= 2 * Settings().lease_ttl, watchdog


# -- readiness, as the units wait for it ------------------------------------------------------------

class NotifySocket:
    """What systemd does for a Type=notify unit: a datagram socket whose path the child gets."""

    def __init__(self, folder: Path) -> None:
        self.path = str(folder / "notify.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)

    def expect(self, key: str, proc: subprocess.Popen, timeout: float = 60) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert proc.poll() is None or key == "STOPPING=1", proc.communicate()
            self.sock.settimeout(0.2)
            try:
                message = self.sock.recv(4096).decode()
            except TimeoutError:
                continue
            fields = dict(line.split("=", 1) for line in message.splitlines())
            if key in message.splitlines():
                return fields
        raise AssertionError(f"no {key} within {timeout} s")

    def received_within(self, seconds: float) -> list[tuple[float, str]]:
        """Every message of the next ``seconds``, with when it came (monotonic)."""
        deadline, got = time.monotonic() + seconds, []
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                got.append((time.monotonic(), self.sock.recv(4096).decode()))
            except TimeoutError:
                break
        return got

    def pings_within(self, seconds: float) -> list[float]:
        """When each ``WATCHDOG=1`` of the next ``seconds`` came."""
        return [at for at, message in self.received_within(seconds) if "WATCHDOG=1" in message.splitlines()]

    def close(self) -> None:
        self.sock.close()


def _env(notify: NotifySocket, **extra: str) -> dict[str, str]:
    return {**os.environ, "NOTIFY_SOCKET": notify.path, **extra}


def test_serve_says_ready_once_it_answers_and_stopping_on_sigterm(db, tmp_path):
    notify = NotifySocket(tmp_path)
    worker_port, http_port = free_port(), free_port()
    proc = subprocess.Popen([*COMMAND, "serve", "--database-url", db.url(redact=False),
                             "--worker-listen", f"127.0.0.1:{worker_port}", "--http-listen", f"127.0.0.1:{http_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env(notify))
    try:
        ready = notify.expect("READY=1", proc)
        assert str(worker_port) in ready["STATUS"] and str(http_port) in ready["STATUS"]
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/readyz", timeout=5) as answer:
            assert json.load(answer)["status"] == "ready"  # at READY=1 a load balancer may send traffic
        assert notify.received_within(1.0) == []  # no WATCHDOG_USEC (no WatchdogSec=): no watchdog pings
        proc.send_signal(signal.SIGTERM)
        notify.expect("STOPPING=1", proc)
        assert proc.wait(timeout=30) == 0  # within the unit's TimeoutStopSec
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        notify.close()


def test_serve_under_a_watchdog_pings_it_at_half_the_interval(db, tmp_path):
    """sd_watchdog_enabled(3): WATCHDOG_USEC asks for pings, WATCHDOG_PID (systemd's main pid) names who pings."""
    notify = NotifySocket(tmp_path)
    interval = 1.0
    serve_command = shlex.join([*COMMAND, "serve", "--worker-listen", f"127.0.0.1:{free_port()}",
                              "--http-listen", f"127.0.0.1:{free_port()}"])
    # As systemd starts it: WATCHDOG_PID is the pid it exec'd, the service's main process.
    proc = subprocess.Popen(["sh", "-c", f'WATCHDOG_PID=$$ exec {serve_command}'],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=_env(notify, WATCHDOG_USEC=str(int(interval * 1e6)),
                                     PULSE_DATABASE_URL=db.url(redact=False)))
    try:
        notify.expect("READY=1", proc)
        pings = notify.pings_within(3.5)
        gaps = [later - earlier for earlier, later in zip(pings, pings[1:])]
        assert len(pings) >= 3 and max(gaps) < interval, (pings, gaps)  # every half interval, never a miss
        proc.send_signal(signal.SIGTERM)
        notify.expect("STOPPING=1", proc)
        # systemd disarms the watchdog at STOPPING=1 and a ping would arm it again, killing a long stop.
        assert notify.pings_within(2 * interval) == []
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        notify.close()


def test_serve_takes_a_bad_watchdog_interval_for_none_in_one_log_line(db, tmp_path):
    """A WATCHDOG_USEC that is no number of microseconds: no pings, one line saying so, never a failed start."""
    notify = NotifySocket(tmp_path)
    proc = subprocess.Popen([*COMMAND, "serve", "--database-url", db.url(redact=False), "--log-format", "text",
                             "--worker-listen", f"127.0.0.1:{free_port()}", "--http-listen", f"127.0.0.1:{free_port()}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=_env(notify, WATCHDOG_USEC="30s"))
    try:
        notify.expect("READY=1", proc)
        assert notify.pings_within(1.0) == []
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        said = [line for line in stderr.splitlines() if "WATCHDOG_USEC" in line]
        assert proc.returncode == 0 and len(said) == 1 and "'30s'" in said[0], stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        notify.close()


@contextlib.contextmanager
def _group_under_notify(db, tmp_path: Path, worker_port: int,
                        **environment: str) -> Iterator[tuple[subprocess.Popen, NotifySocket, Any]]:
    """``serve --processes 2`` as its unit starts it (a NOTIFY_SOCKET of its own, and ``environment``), with a
    Client on its database; killed if still running at the end."""
    from pulse_trio.client import Client

    notify = NotifySocket(tmp_path)
    proc = subprocess.Popen([*COMMAND, "serve", "--processes", "2", "--database-url", db.url(redact=False),
                             "--worker-listen", f"127.0.0.1:{worker_port}", "--http-listen", f"127.0.0.1:{free_port()}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=_env(notify, **environment))
    client = Client(db)
    try:
        yield proc, notify, client
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        notify.close()
        client.close()


def test_a_serve_group_says_ready_once_every_member_serves_and_its_members_say_nothing(db, tmp_path):
    worker_port = free_port()
    with _group_under_notify(db, tmp_path, worker_port) as (proc, notify, client):
        ready = notify.expect("READY=1", proc)
        assert "2 processes" in ready["STATUS"] and str(worker_port) in ready["STATUS"]
        assert [node["state"] for node in client.nodes()] == ["ALIVE", "ALIVE"]  # both serve at READY=1
        notify.sock.settimeout(1.0)
        with pytest.raises(TimeoutError):  # the members do not talk to systemd: no second READY=1
            notify.sock.recv(4096)
        proc.send_signal(signal.SIGTERM)
        notify.expect("STOPPING=1", proc)
        assert proc.wait(timeout=30) == 0


def _quiet_within(notify: NotifySocket, quiet: float, seconds: float) -> bool:
    """Whether ``quiet`` seconds with no ``WATCHDOG=1`` come within the next ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not notify.pings_within(quiet):
            return True
    return False


def test_a_serve_group_withholds_its_watchdog_ping_while_a_member_hangs(db, tmp_path):
    """The first process pings only while every member's loop has shown life within the interval: a member
    stopped (a deadlock, a held loop) makes the group miss its watchdog, and systemd restarts the group."""
    interval = 1.0
    with _group_under_notify(db, tmp_path, free_port(), WATCHDOG_USEC=str(int(interval * 1e6))) as (
            proc, notify, client):
        notify.expect("READY=1", proc)
        for _ in range(2):  # every member alive: pinged every half interval
            notify.expect("WATCHDOG=1", proc, timeout=interval)
        hung = client.nodes()[1]["pid"]
        os.kill(hung, signal.SIGSTOP)
        try:
            # Withheld once its last beat is older than the interval; systemd would stop the group there.
            assert _quiet_within(notify, 1.5 * interval, 6.0), "still pinging while a member is stopped"
        finally:
            os.kill(hung, signal.SIGCONT)
        notify.expect("WATCHDOG=1", proc, timeout=2 * interval)  # pinged again once the member runs
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 0
        withheld = [line for line in stderr.splitlines() if "withheld" in line]
        # Only for the stopped member: each member beats before it says it is ready, so none is missed at start.
        assert withheld and all(f"(pid {hung})" in line for line in withheld), stderr
        # The stopped member wrote its stacks when asked (at once, had its loop only been held): systemd's
        # SIGABRT would have reached the first process alone.
        assert "most recent call first" in stderr, stderr


REGISTRY = """
from pulse_trio.sdk import Registry

registry = Registry()


@registry.handler("billing", "charge")
async def charge(task):
    return {}
"""


def test_worker_says_ready_once_registered_and_drains_on_sigterm(db, tmp_path):
    (tmp_path / "billing_worker.py").write_text(REGISTRY)
    token = make_token(db, "worker", ("billing",))
    with serve(db) as (worker_port, _http_port):
        notify = NotifySocket(tmp_path)
        env = {**_env(notify), "PULSE_WORKER_TOKEN": token, "PULSE_WORKER_CAPACITY": "3",
               "PULSE_WORKER_NAME": "unit-test", "PULSE_WORKER_URL": f"ws://127.0.0.1:{worker_port}/v1/worker"}
        proc = subprocess.Popen([*COMMAND, "worker", "run", f"{tmp_path / 'billing_worker.py'}:registry"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        try:
            ready = notify.expect("READY=1", proc)
            assert "capacity 3" in ready["STATUS"]
            proc.send_signal(signal.SIGTERM)  # the unit's stop: drain, then exit 0
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
            notify.close()


HOLDING_REGISTRY = """
import time

from pulse_trio.sdk import Registry

registry = Registry()


@registry.handler("billing", "charge")
async def charge(task):
    time.sleep(task.payload["hold_s"])  # a blocking call on the loop: the bug the watchdog is for
    return {}
"""


def test_worker_under_a_watchdog_pings_while_its_loop_runs_and_not_while_a_handler_holds_it(db, tmp_path):
    from pulse_trio.client import Client

    (tmp_path / "billing_worker.py").write_text(HOLDING_REGISTRY)
    token = make_token(db, "worker", ("billing",))
    interval = 1.0
    client = Client(db)
    with serve(db) as (worker_port, _http_port):
        notify = NotifySocket(tmp_path)
        env = _env(notify, WATCHDOG_USEC=str(int(interval * 1e6)), PULSE_WORKER_TOKEN=token,
                   PULSE_WORKER_URL=f"ws://127.0.0.1:{worker_port}/v1/worker")
        proc = subprocess.Popen([*COMMAND, "worker", "run", f"{tmp_path / 'billing_worker.py'}:registry"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        try:
            notify.expect("READY=1", proc)
            for _ in range(2):
                notify.expect("WATCHDOG=1", proc, timeout=interval)
            client.submit("billing", "charge", {"hold_s": 4 * interval})
            assert _quiet_within(notify, 1.5 * interval, 4 * interval), "pinged while a handler held the loop"
            notify.expect("WATCHDOG=1", proc, timeout=4 * interval)  # the loop runs again
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
            notify.close()
            client.close()


CRASHING_REGISTRY = """
from pulse_trio.sdk import Registry

registry = Registry()


class Crash(BaseException):
    \"\"\"Not an Exception: a handler's task cannot hold it, so it ends the process.\"\"\"


@registry.handler("billing", "charge")
async def charge(task):
    raise Crash("the handler's library gave up")
"""


def test_a_worker_that_crashes_exits_with_a_code_its_unit_restarts(db, tmp_path):
    """A traceback is no refusal: its exit code is not one the unit leaves stopped (exit 1 is)."""
    from pulse_trio.client import Client

    (tmp_path / "billing_worker.py").write_text(CRASHING_REGISTRY)
    token = make_token(db, "worker", ("billing",))
    prevented = _directives("pulse-trio-worker@.service")["RestartPreventExitStatus"][0].split()
    client = Client(db)
    with serve(db) as (worker_port, _http_port):
        proc = subprocess.Popen([*COMMAND, "worker", "run", f"{tmp_path / 'billing_worker.py'}:registry",
                                 "--token", token, "--url", f"ws://127.0.0.1:{worker_port}/v1/worker"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            client.submit("billing", "charge", {})
            _, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
            client.close()
    assert "Crash: the handler's library gave up" in stderr and "Traceback" in stderr, stderr
    assert proc.returncode == 70 and str(proc.returncode) not in prevented, (proc.returncode, stderr[-2000:])


def test_a_serve_group_kills_a_hung_member_and_exits_0_within_the_units_stop_timeout(db, tmp_path):
    """The group's own bound on a member's stop (docs/operations.md §14: killed after 30 s) comes before systemd's.

    Else a member that hangs (here SIGSTOP: a deadlock, a database that answers nothing) turns every
    stop into systemd's kill of the whole unit, reported as a failed stop, instead of the group's
    orderly one that kills that member alone and exits 0.
    """
    from pulse_trio.group.parent import STOP_TIMEOUT_S

    timeout_stop = float(_directives("pulse-trio-serve.service")["TimeoutStopSec"][0])
    with _group_under_notify(db, tmp_path, free_port()) as (proc, notify, client):
        notify.expect("READY=1", proc)
        hung = client.nodes()[0]["pid"]
        os.kill(hung, signal.SIGSTOP)
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=timeout_stop + 30)
        took = time.monotonic() - began
        assert code == 0 and STOP_TIMEOUT_S <= took < timeout_stop, (code, took, timeout_stop)
