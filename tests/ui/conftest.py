"""Fixtures for the browser tests: a real `pulse-trio serve`, real workers, Debian's Chromium.

The service runs as its own process on a database of its own (the per-test
``db`` reset would pull rows from under a running service), shared by the
tests of this folder; each test keeps to queues of its own. Chromium is
launched once through Playwright from ``/usr/bin/chromium`` (nothing is
downloaded); each test gets a fresh context, so nothing in sessionStorage
leaks between tests, and fails if its page raised an error or opened a
dialog it did not expect.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from token_support import make_token
from ui_support import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, Api, wait_for

from pulse_trio.dburl import DatabaseConfig, drop_database
from pulse_trio.serve_process import ServeProcess
from pulse_trio.store.schema.migrate import migrate

_HERE = Path(__file__).resolve().parent  # the workers run ui_worker.py from here, by path


@dataclasses.dataclass
class Service:
    db: DatabaseConfig
    http_port: int
    worker_port: int
    api: Api

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def token(self, role: str, *queues: str) -> str:
        return make_token(self.db, role, queues, label=f"ui-{role}")


@pytest.fixture(scope="package")
def service(database_server: DatabaseConfig) -> Iterator[Service]:
    """One `pulse-trio serve` for the folder (``ServeProcess``: ports it chose, started again if one was taken)."""
    config = database_server.with_database(f"pulse_ui_{secrets.token_hex(4)}")
    migrate(config)
    try:
        with ServeProcess(config) as serve:
            service = Service(config, serve.http_port, serve.worker_port, Api(serve.http_port))
            probe = service.token("operator")
            wait_for(lambda: _answers(service.api, probe) or _serve_exited(serve),
                     "pulse-trio serve to answer", timeout=30)
            yield service
    finally:
        drop_database(config)


def _answers(api: Api, token: str) -> bool:
    try:
        return api.request("GET", "/v1/whoami", token).status == 200
    except OSError:
        return False


def _serve_exited(serve: ServeProcess) -> bool:
    assert serve.process is not None
    if serve.process.poll() is not None:
        raise AssertionError(f"pulse-trio serve exited with {serve.process.returncode}:\n{serve.log_tail()}")
    return False


def _exited(process: subprocess.Popen, log: Path) -> bool:
    if process.poll() is not None:
        raise AssertionError(f"pulse-trio worker exited with {process.returncode}:\n{log.read_text()[-2000:]}")
    return False


@pytest.fixture
def start_worker(service: Service, tmp_path: Path):
    """``instance = start_worker("failing", name)``: a `pulse-trio worker run` process, once it is registered."""
    processes: list[subprocess.Popen] = []

    def start(registry: str, name: str, queue: str) -> dict[str, Any]:
        operator = service.token("operator")
        log = tmp_path / f"worker-{len(processes)}.log"
        with log.open("wb") as out:
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "pulse_trio", "worker", "run", f"{_HERE / 'ui_worker.py'}:{registry}",
                 "--url", f"ws://127.0.0.1:{service.worker_port}/v1/worker", "--token",
                 service.token("worker", queue), "--name", name, "--quiet"],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}))

        def registered() -> dict[str, Any] | None:
            _exited(processes[-1], log)
            workers = service.api.request("GET", "/v1/workers", operator).doc["workers"]
            return next((w for w in workers if w["worker_name"] == name and w["capacity"] > 0), None)

        return wait_for(registered, f"worker {name!r} to register")

    yield start
    for process in processes:
        process.terminate()
    for process in processes:
        process.wait(timeout=20)


@pytest.fixture(scope="package")
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@dataclasses.dataclass
class Watched:
    """What the page did besides rendering: dialogs it opened and errors it raised."""

    dialogs: list[str] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)


@pytest.fixture
def watched() -> Watched:
    return Watched()


@pytest.fixture
def page(chromium: Any, service: Service, watched: Watched) -> Iterator[Any]:
    """A fresh browser context and page on the dashboard's origin; dialogs are dismissed and recorded."""
    context = chromium.new_context(viewport=VIEWPORT, base_url=service.url, locale="en-GB",
                                   timezone_id="UTC", service_workers="block")
    context.set_default_timeout(10_000)
    page = context.new_page()

    def dialog(d: Any) -> None:
        watched.dialogs.append(f"{d.type}: {d.message}")
        d.dismiss()

    page.on("dialog", dialog)
    page.on("pageerror", lambda error: watched.errors.append(str(error)))
    try:
        yield page
    finally:
        context.close()
    assert watched.dialogs == [], f"the page opened dialogs: {watched.dialogs}"
    assert watched.errors == [], f"the page raised errors: {watched.errors}"
