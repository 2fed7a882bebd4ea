"""`pulse-trio worker run` as a user runs it: a subprocess, the example registry, SIGTERM to drain."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
import trio
import trustme

from sdk_support import in_thread, url_of, wait_state

from pulse_trio.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("target, options", [
    ("examples.billing_worker:registry", []),  # asyncio, the default
    ("examples.billing_worker:registry", ["--backend", "asyncio", "--uvloop"]),
    ("examples.billing_worker_trio:registry", ["--backend", "trio"]),
], ids=["asyncio", "uvloop", "trio"])
async def test_worker_run_executes_the_example_and_drains_on_sigterm(start_service, token_factory, client, target,
                                                                     options):
    service = await start_service()
    token = token_factory("worker", ["billing"])
    command = [sys.executable, "-m", "pulse_trio", "worker", "run", target,
               "--url", url_of(service), "--capacity", "2", *options]
    env = dict(os.environ, PULSE_WORKER_TOKEN=token)
    async with trio.open_nursery() as nursery:
        process = await nursery.start(lambda task_status: trio.run_process(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False,
            task_status=task_status))
        stderr = b""
        task = await in_thread(client.submit, "billing", "invoice.send", {"invoice": 991})
        view = await wait_state(client, task["task_id"], "SUCCEEDED", timeout=30)
        assert view["outcome"]["result"]["message_id"] == "msg-991"
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            rc = await process.wait()
        stderr = await process.stderr.receive_some(1 << 20) if process.stderr else b""
    text = stderr.decode()
    assert rc == 0, text
    assert "connected to" in text and f"task {task['task_id']}" in text and "SUCCEEDED" in text
    assert "drained" in text
    backend = "trio" if "--backend" in options and "trio" in options else "asyncio"
    assert f"({backend}{' with uvloop' if '--uvloop' in options else ''})" in text


async def test_worker_run_drains_on_sighup(start_service, token_factory, client):
    """A closed terminal sends SIGHUP: a drain, exit 0, as SIGTERM is (docs/worker.md §9.1), not death."""
    service = await start_service()
    command = [sys.executable, "-m", "pulse_trio", "worker", "run", "examples.billing_worker:registry",
               "--url", url_of(service)]
    env = dict(os.environ, PULSE_WORKER_TOKEN=token_factory("worker", ["billing"]))
    async with trio.open_nursery() as nursery:
        process = await nursery.start(lambda task_status: trio.run_process(
            command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False,
            task_status=task_status))
        with trio.fail_after(20):
            while not await in_thread(client.workers):
                await trio.sleep(0.02)
        process.send_signal(signal.SIGHUP)
        with trio.fail_after(20):
            rc = await process.wait()
        text = (await process.stderr.receive_some(1 << 20)).decode() if process.stderr else ""
    assert rc == 0 and "SIGHUP: draining" in text, text


NAPPING_REGISTRY = """
import anyio
from pulse_trio.sdk import Registry

registry = Registry()


@registry.handler("billing", "nap")
async def nap(task):
    await anyio.sleep(0.8)
    return {"napped": True}
"""

#: `worker run`, its counts line every 0.1 s instead of every 10 (the interval is a constant of the module).
FAST_PROGRESS = ("import sys; import pulse_trio.cli.worker as w; w.PROGRESS_INTERVAL_S = 0.1; "
                 "from pulse_trio.cli import main; sys.exit(main(sys.argv[1:]))")


def _read_until(fd: int, text: bytes, timeout: float) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while text not in seen and time.monotonic() < deadline:
        if select.select([fd], [], [], 0.05)[0]:
            seen += os.read(fd, 65536)
    assert text in seen, seen.decode(errors="replace")
    return seen


async def test_a_closed_terminal_drains_the_worker_started_in_it(start_service, token_factory, client, tmp_path):
    """Its terminal closed, the worker gets SIGHUP and drains: its running task finishes and reports, exit 0.

    Its stderr is that dead terminal now: a counts line or the last summary that cannot be written must not
    end the drain, which would leave the task RUNNING until its lease lapses.
    """
    service = await start_service()
    (tmp_path / "napping_worker.py").write_text(NAPPING_REGISTRY)
    command = [sys.executable, "-c", FAST_PROGRESS, "worker", "run", f"{tmp_path / 'napping_worker.py'}:registry",
               "--url", url_of(service)]
    env = dict(os.environ, PULSE_WORKER_TOKEN=token_factory("worker", ["billing"]))
    terminal, its_end = pty.openpty()
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdin=its_end, stdout=its_end, stderr=its_end,
                               start_new_session=True,  # the terminal is the worker's own, as a login shell's is
                               preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
    os.close(its_end)
    try:
        await in_thread(_read_until, terminal, b"connected to", 20)
        task = await in_thread(client.submit, "billing", "nap", {})
        await in_thread(_read_until, terminal, b"running", 20)  # started, and a counts line says so
        os.close(terminal)  # the window closes: SIGHUP, and nothing can be written there any more
        terminal = -1
        with trio.fail_after(20):
            rc = await in_thread(process.wait)
        assert rc == 0
        assert (await wait_state(client, task["task_id"], {"SUCCEEDED", "UNKNOWN", "FAILED"}))["state"] == "SUCCEEDED"
    finally:
        if terminal >= 0:
            os.close(terminal)
        if process.poll() is None:
            process.kill()
            process.wait()


LINGERING_REGISTRY = """
import anyio
from pulse_trio.sdk import Registry

registry = Registry()


@registry.handler("billing", "linger")
async def linger(task):
    try:
        await anyio.sleep(60)
    finally:
        with anyio.CancelScope(shield=True):  # what it started, finished even when stopped at once
            await anyio.sleep(1.5)
"""


async def test_a_third_ctrl_c_while_a_stopped_worker_winds_down_exits_130_without_a_traceback(
        start_service, token_factory, client, tmp_path):
    """Ctrl-C pressed again while `worker run --backend trio` ends after its stop: exit 130, no traceback.

    Its signal watcher is gone by then, so Trio raises the KeyboardInterrupt in its nursery, which
    groups it: a command must exit 130 on that group as on a bare Ctrl-C (docs/operations.md §7.1).
    """
    service = await start_service()
    (tmp_path / "lingering_worker.py").write_text(LINGERING_REGISTRY)
    command = [sys.executable, "-m", "pulse_trio", "worker", "run", f"{tmp_path / 'lingering_worker.py'}:registry",
               "--url", url_of(service), "--backend", "trio"]
    env = dict(os.environ, PULSE_WORKER_TOKEN=token_factory("worker", ["billing"]))
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    try:
        err = process.stderr.fileno()
        await in_thread(_read_until, err, b"connected to", 20)
        task = await in_thread(client.submit, "billing", "linger", {})
        await wait_state(client, task["task_id"], "RUNNING")
        process.send_signal(signal.SIGINT)
        await in_thread(_read_until, err, b"draining", 20)
        process.send_signal(signal.SIGINT)
        await in_thread(_read_until, err, b"stopping now", 20)
        await trio.sleep(0.3)  # the handler lingers; the watcher has ended
        process.send_signal(signal.SIGINT)
        with trio.fail_after(20):
            rc = await in_thread(process.wait)
        text = (await in_thread(process.stderr.read)).decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert (rc, "Traceback" in text) == (130, False), text


def test_an_unknown_backend_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["worker", "run", "examples.billing_worker:registry", "--token", "t", "--backend", "curio"])
    assert exit.value.code == 2 and "invalid choice: 'curio'" in capsys.readouterr().err


def test_bad_targets_exit_2(capsys):
    assert main(["worker", "run", "no_such_module:registry", "--token", "t"]) == 2
    assert main(["worker", "run", "examples.billing_worker:nothing", "--token", "t"]) == 2
    assert main(["worker", "run", "examples.billing_worker", "--token", "t"]) == 2
    assert main(["worker", "run", "examples.billing_worker:registry"]) == 2  # no token
    assert main(["worker", "run", "examples.billing_worker:registry", "--token", "t", "--backend", "trio",
                 "--uvloop"]) == 2
    err = capsys.readouterr().err
    assert "--uvloop goes with --backend asyncio" in err
    assert "cannot import" in err and "not a pulse_trio.sdk.Registry" in err and "token is required" in err


def test_a_ca_file_with_a_ws_url_exits_2(tmp_path):
    """The CA file says TLS was meant, yet ws:// would send the token in the clear: refused before any connect."""
    trustme.CA().cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    done = subprocess.run(
        [sys.executable, "-m", "pulse_trio", "worker", "run", "examples.billing_worker:registry", "--token", "pt_x",
         "--url", "ws://127.0.0.1:1/v1/worker", "--ca-file", str(tmp_path / "ca.pem")],
        cwd=ROOT, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2 and "in the clear" in done.stderr and "Traceback" not in done.stderr, done.stderr
