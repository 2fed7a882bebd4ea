"""Helpers for the dashboard's browser tests: a blocking HTTP client, waiting, signing in, screenshots.

Imported by name (``import ui_support``): this folder is on the ``pythonpath`` of pyproject.toml.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: Set to a folder (docs/dashboard) to have the tests save their screenshots there.
SCREENSHOTS = os.environ.get("PULSE_UI_SCREENSHOTS")
VIEWPORT = {"width": 1280, "height": 800}
#: Headless Debian Chromium, talking to nothing but the service under test.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@dataclasses.dataclass
class Answer:
    status: int
    doc: Any


class Api:
    """The HTTP API over a real socket, from the test's side (submit, read, revoke...)."""

    def __init__(self, port: int) -> None:
        self.port = port

    def request(self, method: str, path: str, token: str, body: Any = None) -> Answer:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            headers = {"Authorization": f"Bearer {token}"}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            text = response.read()
            return Answer(response.status, json.loads(text) if text else None)
        finally:
            conn.close()

    def submit(self, token: str, **fields: Any) -> dict[str, Any]:
        answer = self.request("POST", "/v1/tasks", token, fields)
        assert answer.status == 201, answer
        return answer.doc

    def task(self, token: str, task_id: str) -> dict[str, Any]:
        answer = self.request("GET", f"/v1/tasks/{task_id}", token)
        assert answer.status == 200, answer
        return answer.doc


def wait_for(probe: Callable[[], T | None], what: str, timeout: float = 15.0) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def screenshot(page: Any, name: str, *, full_page: bool = False) -> None:
    """Save the page as ``$PULSE_UI_SCREENSHOTS/<name>.png`` when that is set (docs/dashboard.md)."""
    if SCREENSHOTS:
        folder = Path(SCREENSHOTS)
        folder.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(folder / f"{name}.png"), full_page=full_page)


def sign_in(page: Any, token: str, route: str = "") -> None:
    """Open the dashboard (at ``route``, e.g. ``#/tasks``), paste the token, wait until signed in."""
    page.goto(f"/ui/{route}")
    page.fill("#token", token)
    page.click("#signin-form button[type=submit]")
    page.wait_for_selector("#who:not([hidden])")
    page.evaluate("() => { window.__sameDocument = true; }")  # gone after any reload


def still_same_document(page: Any) -> bool:
    """True while no reload happened since :func:`sign_in`."""
    return page.evaluate("() => window.__sameDocument === true")
