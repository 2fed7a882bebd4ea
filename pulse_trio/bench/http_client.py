"""The bench's view of an instance's HTTP surface: submit, /readyz, /metrics.

Standard library only, over one kept-alive connection, so a submit costs
what it costs any producer that reuses its connection (no TCP handshake per
task) and the bench adds no dependency.
"""

from __future__ import annotations

import http.client
import json
import time

from pulse_trio.bench.measure import ms


class InstanceHttp:
    """One keep-alive HTTP/1.1 connection to ``127.0.0.1:port``; reconnects if the server closed it."""

    def __init__(self, port: int, token: str | None = None, timeout: float = 30.0) -> None:
        self.port = port
        self.token = token
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(self, method: str, path: str, body: object = None) -> tuple[int, bytes]:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        for attempt in (1, 2):
            if self._conn is None:
                self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            try:
                self._conn.request(method, path, data, headers)
                response = self._conn.getresponse()
                return response.status, response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # The keep-alive timeout closed an idle connection: once more on a new one.
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def submit(self, queue: str, kind: str) -> str:
        """POST /v1/tasks; the new task's id."""
        status, data = self.request("POST", "/v1/tasks", {"queue": queue, "kind": kind})
        if status != 201:
            raise RuntimeError(f"POST /v1/tasks answered {status}: {data[:200]!r}")
        return json.loads(data)["task_id"]

    def task_state(self, task_id: str) -> str:
        status, data = self.request("GET", f"/v1/tasks/{task_id}")
        if status != 200:
            raise RuntimeError(f"GET /v1/tasks/{task_id} answered {status}: {data[:200]!r}")
        return json.loads(data)["state"]

    def ready(self) -> tuple[int, float]:
        """GET /readyz: its status and how long it took to answer (ms)."""
        started = time.perf_counter()
        status, _ = self.request("GET", "/readyz")
        return status, ms(time.perf_counter() - started)

    def gauge(self, name: str) -> float | None:
        """One unlabelled gauge from GET /metrics (None if absent)."""
        status, data = self.request("GET", "/metrics")
        if status != 200:
            return None
        for line in data.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None
