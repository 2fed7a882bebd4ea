"""`pulse-trio worker run` refused by the service: one line naming the cause, exit 1.

docs/worker.md §13: the refusals reconnecting cannot fix end the command
with one line on stderr, never a traceback.
"""

from __future__ import annotations

from cli_support import run, serve
from token_support import make_token, revoke_token

REGISTRY = """
from pulse_trio.sdk import Registry

registry = Registry()


@registry.handler("billing", "charge")
async def charge(task):
    return {}
"""


def _assert_one_line(done, *expected: str) -> None:
    assert done.returncode == 1, done
    lines = [line for line in done.stderr.splitlines() if line.startswith("pulse-trio: ")]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr and "ExceptionGroup" not in done.stderr, done.stderr
    for text in expected:
        assert text in lines[0], lines[0]


def test_refusals_print_one_line_naming_the_cause(db, tmp_path):
    (tmp_path / "billing_worker.py").write_text(REGISTRY)
    target = f"{tmp_path / 'billing_worker.py'}:registry"
    mail_only = make_token(db, "worker", ("mail",))
    revoked = make_token(db, "worker", ("billing",))
    revoke_token(db, revoked)
    with serve(db) as (worker_port, http_port):
        url = f"ws://127.0.0.1:{worker_port}/v1/worker"

        def worker(token: str, at: str = url):
            return run("worker", "run", target, "--token", token, "--url", at, timeout=30)

        _assert_one_line(worker(mail_only), "token does not allow queue 'billing'", "it allows: ['mail']")
        _assert_one_line(worker(revoked), "HTTP 401", "unknown, revoked or not a worker token")
        _assert_one_line(worker("pt_" + "x" * 43), "HTTP 401", "unknown, revoked")
        _assert_one_line(worker(mail_only, f"ws://127.0.0.1:{worker_port}/v2/worker"), "HTTP 404",
                         "workers connect to /v1/worker")
        _assert_one_line(worker(mail_only, f"ws://127.0.0.1:{http_port}/v1/worker"),
                         "not a pulse-trio worker endpoint", "--worker-listen")
