"""Helpers for the dashboard's browser tests: a blocking HTTP client, a database relay, waiting, signing in, screenshots.

Imported by name (``import ui_support``): this folder is on the ``pythonpath`` of pyproject.toml.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import socket
import threading
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


class DatabaseRelay:
    """A TCP relay to the test database that can be cut (every link dropped, each new one closed at once) and restored.

    A `serve` of a test's own reaches its database through it (``config``),
    so the test takes the database away from that process alone, as a
    stopped or unreachable server looks to PyMySQL (tests/server's
    outage tests do the same in Trio). One thread accepts, two relay
    each link; a link's sockets are closed by the last of its two.
    """

    def __init__(self, db: Any) -> None:
        self.db = db
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.port = self.listener.getsockname()[1]
        self.down = False
        self._links: dict[tuple[socket.socket, socket.socket], int] = {}  # (client, upstream) -> pumps still running
        self._lock = threading.Lock()
        self._stopping = False
        self._thread = threading.Thread(target=self._accept, name="database-relay", daemon=True)

    @property
    def config(self) -> Any:
        """The test database's login, through this relay."""
        return dataclasses.replace(self.db, host="127.0.0.1", port=self.port, unix_socket=None, hosts=())

    def __enter__(self) -> DatabaseRelay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping = True
        self._thread.join(timeout=10)
        self.cut()
        self.listener.close()

    def cut(self) -> None:
        with self._lock:
            self.down = True
            for link in self._links:
                for sock in link:
                    _shut(sock)  # wakes its pumps, which close it

    def restore(self) -> None:
        with self._lock:
            self.down = False

    def _upstream(self) -> socket.socket:
        if self.db.unix_socket:
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.db.unix_socket)
            return upstream
        return socket.create_connection((self.db.host, self.db.port))

    def _accept(self) -> None:
        while not self._stopping:
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            client.settimeout(None)
            try:
                upstream = None if self.down else self._upstream()
            except OSError:
                upstream = None
            with self._lock:
                if upstream is None or self.down:
                    client.close()
                    if upstream is not None:
                        upstream.close()
                    continue
                link = (client, upstream)
                self._links[link] = 2
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(link, source, sink), daemon=True).start()

    def _pump(self, link: tuple[socket.socket, socket.socket], source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        with self._lock:
            for sock in link:
                _shut(sock)
            self._links[link] -= 1
            if self._links[link]:
                return
            del self._links[link]
        for sock in link:
            sock.close()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


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
