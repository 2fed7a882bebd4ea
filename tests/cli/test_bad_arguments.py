"""Bad input is one line on stderr and exit 2, never a traceback (docs/operations.md §7.1).

Database URLs, `worker run`'s flags and the managed database's port: each
is refused before anything starts, so a service manager that skips restarts
on exit 2 (the units' RestartPreventExitStatus) does not restart a command
that can never work.
"""

from __future__ import annotations

import pytest

from cli_support import run

EXIT_USAGE = 2

REGISTRY = """
from pulse_trio.sdk import Registry

registry = Registry()


@registry.handler("billing", "charge")
async def charge(task):
    return {}
"""


def _assert_usage_error(done) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == EXIT_USAGE, done
    assert done.stderr.count("\n") == 1, done.stderr


@pytest.mark.parametrize("url", [
    "mysql://u:p@127.0.0.1:1/pulse?connect_timeout=0",
    "mysql://u:p@127.0.0.1:1/pulse?connect_timeout=-1",
    "mysql://u:p@127.0.0.1:1/pulse?connect_timeout=nan",
    "mysql://u:p@[::1/pulse",
], ids=["timeout-zero", "timeout-negative", "timeout-nan", "unclosed-ipv6-bracket"])
def test_a_malformed_database_url_is_a_bad_argument(url):
    done = run("nodes", "--database-url", url)
    _assert_usage_error(done)


def test_a_malformed_database_url_in_the_environment_is_a_bad_argument_for_serve(monkeypatch):
    """serve.env's PULSE_DATABASE_URL: exit 2 keeps systemd from restarting it forever (RestartPreventExitStatus=2)."""
    monkeypatch.setenv("PULSE_DATABASE_URL", "mysql://u:p@127.0.0.1:1/pulse?connect_timeout=0")
    done = run("serve", "--worker-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0")
    _assert_usage_error(done)


@pytest.mark.parametrize(("name", "value"), [("PULSE_CANCEL_GRACE", "30s"), ("PULSE_POLL_INTERVAL", "50ms"),
                                           ("PULSE_POLL_INTERVAL", "1e-400"), ("PULSE_PING_INTERVAL", "1e400"),
                                           ("PULSE_PURGE_BUSY_SHARE", "1e-400"), ("PULSE_MANAGED_DB_PORT", "0"),
                                           ("PULSE_LOG_LEVEL", "loud"), ("PULSE_LOG_FORMAT", "xml")])
def test_a_bad_serve_variable_is_a_bad_argument_for_serve_and_names_the_variable(monkeypatch, name, value):
    """Judged when serve runs (the other commands leave serve's variables alone), before anything starts.

    The database URL is refused when serve reads it: a variable let through would stop serve there instead.
    """
    monkeypatch.setenv(name, value)
    done = run("serve", "--database-url", "mysql://u:p@127.0.0.1:1/pulse?connect_timeout=0",
               "--worker-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0")
    _assert_usage_error(done)
    assert f"{name}: " in done.stderr and repr(value) in done.stderr, done.stderr


def test_a_missing_ca_file_is_a_bad_argument(tmp_path):
    (tmp_path / "billing_worker.py").write_text(REGISTRY)
    done = run("worker", "run", f"{tmp_path / 'billing_worker.py'}:registry", "--token", "pt_x",
               "--url", "wss://127.0.0.1:1/v1/worker", "--ca-file", str(tmp_path / "missing-ca.pem"), timeout=30)
    _assert_usage_error(done)


@pytest.mark.parametrize("name", ["n" * 200, "tab\there"], ids=["too-long", "control-character"])
def test_an_invalid_worker_name_is_a_bad_argument(tmp_path, name):
    (tmp_path / "billing_worker.py").write_text(REGISTRY)
    done = run("worker", "run", f"{tmp_path / 'billing_worker.py'}:registry", "--token", "pt_x",
               "--url", "ws://127.0.0.1:1/v1/worker", "--name", name, timeout=30)
    _assert_usage_error(done)


@pytest.mark.parametrize("port", ["0", "70000"])
def test_a_managed_database_port_out_of_range_is_a_bad_argument(port):
    """Port 0 makes mariadbd take 3306 (the system MariaDB's), 70000 is clamped to 65535: both silently."""
    done = run("migrate", "--managed-db-port", port)
    _assert_usage_error(done)


@pytest.mark.parametrize("url", [
    "ws://127.0.0.1:99999/v1/worker",
    "ws://127.0.0.1:74x0/v1/worker",
    "ws://[::1/v1/worker",
    "ws://",
    "ws://127.0.0.1:0/v1/worker",
], ids=["port-out-of-range", "port-not-a-number", "unclosed-ipv6-bracket", "no-host", "port-zero"])
def test_worker_run_with_a_malformed_url_is_a_bad_argument(tmp_path, url):
    """A URL no connect can ever use: one line naming it, not a traceback or reconnecting forever."""
    (tmp_path / "billing_worker.py").write_text(REGISTRY)
    done = run("worker", "run", f"{tmp_path / 'billing_worker.py'}:registry", "--token", "pt_x",
               "--url", f"ws://127.0.0.1:1/v1/worker,{url}", timeout=30)
    _assert_usage_error(done)
    assert repr(url) in done.stderr, done.stderr


def test_worker_run_with_a_token_ending_in_a_carriage_return_is_one_line(tmp_path, monkeypatch):
    """A worker.env saved with CRLF: no handshake can carry the token, and the line never shows the secret."""
    (tmp_path / "billing_worker.py").write_text(REGISTRY)
    secret = "pt_" + "s" * 43
    for token in (secret + "\r", secret + "\n", secret + "é", " " + secret):
        monkeypatch.setenv("PULSE_WORKER_TOKEN", token)
        done = run("worker", "run", f"{tmp_path / 'billing_worker.py'}:registry",
                   "--url", "ws://127.0.0.1:1/v1/worker", timeout=30)
        _assert_usage_error(done)
        assert "s" * 43 not in done.stderr, done.stderr


def _worker_run(target: str, cwd: str) -> object:
    return run("worker", "run", target, "--token", "pt_x", "--url", "ws://127.0.0.1:1/v1/worker", timeout=30, cwd=cwd)


def test_worker_run_with_a_handler_module_that_does_not_compile_is_one_line(tmp_path):
    """The line names the module, SyntaxError and where: what the traceback would have said, without it."""
    source = REGISTRY + "\n\ndef broken(:\n    pass\n"
    (tmp_path / "billing_worker.py").write_text(source)
    line = source.splitlines().index("def broken(:") + 1
    for target in ("billing_worker:registry", f"{tmp_path / 'billing_worker.py'}:registry"):
        done = _worker_run(target, str(tmp_path))
        _assert_usage_error(done)
        assert "billing_worker" in done.stderr and "SyntaxError" in done.stderr, done.stderr
        assert "billing_worker.py" in done.stderr and f"line {line}" in done.stderr, done.stderr


@pytest.mark.parametrize(("source", "target", "expected"), [
    (REGISTRY + "\nraise RuntimeError('BILLING_API_KEY is not set')\n", "billing_worker:registry",
     ("billing_worker", "RuntimeError", "BILLING_API_KEY is not set")),
    ("import json\n", "json:loads", ("json:loads", "Registry")),
    ("def registry():\n    raise LookupError('no handlers configured')\n", "billing_worker:registry",
     ("billing_worker:registry", "LookupError", "no handlers configured")),
    # sys.exit() is a SystemExit raised: its own exit code (say 3) would have the unit restart it for ever
    ("import sys\nsys.exit('BILLING_API_KEY is not set')\n", "billing_worker:registry",
     ("billing_worker", "SystemExit", "BILLING_API_KEY is not set")),
    ("raise SystemExit(3)\n", "billing_worker:registry", ("billing_worker", "SystemExit: 3")),
    ("import sys\n\ndef registry():\n    sys.exit('no config')\n", "billing_worker:registry",
     ("billing_worker:registry", "SystemExit", "no config")),
], ids=["raises-on-import", "a-function-that-is-not-a-factory", "a-factory-that-raises", "exits-on-import",
        "exits-3-on-import", "a-factory-that-exits"])
def test_worker_run_with_a_handler_module_that_raises_or_names_no_registry_is_one_line(tmp_path, source, target,
                                                                                      expected):
    (tmp_path / "billing_worker.py").write_text(source)
    done = _worker_run(target, str(tmp_path))
    _assert_usage_error(done)
    for text in expected:
        assert text in done.stderr, done.stderr
