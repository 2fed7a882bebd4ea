"""The HTTP API holds a bounded number of connections: a flood leaves the process's descriptors to the rest.

A real ``pulse-trio serve`` runs under a lowered open-file limit (set in
the child before it starts), and real sockets flood its HTTP port; the
worker endpoint of the same process must still take a worker at once.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys

import pytest
import trio
import trio_websocket

from http_support import Http, RawWorker
from pulse_trio.http.connections import HTTP_SHARE_OF_FILES, WAITS_SHARE_OF_CONNECTIONS
from pulse_trio.ports import free_port
from token_support import make_token

pytestmark = pytest.mark.live

#: The child's open-file limit: low, so that a flood a test can make reaches it.
FILES = 128
#: More connections than the child has descriptors.
FLOOD = 160


def _lower_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILES, FILES))


async def _serve(db, log) -> tuple[trio.Process, int, int]:
    """``serve`` under the lowered limit, once both endpoints accept: ``(process, worker_port, http_port)``."""
    worker_port, http_port = free_port(), free_port()
    command = [sys.executable, "-m", "pulse_trio", "serve", "--database-url", db.url(redact=False),
               "--worker-listen", f"127.0.0.1:{worker_port}", "--http-listen", f"127.0.0.1:{http_port}"]
    process = await trio.lowlevel.open_process(command, stdout=subprocess.DEVNULL, stderr=log,
                                               preexec_fn=_lower_files,
                                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    with trio.fail_after(30):
        for port in (worker_port, http_port):
            while True:
                assert process.poll() is None, "serve exited"
                try:
                    await (await trio.open_tcp_stream("127.0.0.1", port)).aclose()
                    break
                except OSError:
                    await trio.sleep(0.05)
    return process, worker_port, http_port


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def test_a_flood_of_long_polls_leaves_the_worker_endpoint_its_descriptors(db, nursery, tmp_path):
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        process, worker_port, http_port = await _serve(db, log)
    producer, worker_token = make_token(db, "producer"), make_token(db, "worker")
    flood: list[socket.socket] = []
    try:
        submitted = await Http(http_port).post("/v1/tasks", token=producer, json_body={"queue": "billing",
                                                                                    "kind": "k"})
        task_id = submitted.json()["task_id"]
        poll = (f"GET /v1/tasks/{task_id}/outcome?wait=60 HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: Bearer {producer}\r\n\r\n").encode()
        for n in range(FLOOD):
            s = socket.create_connection(("127.0.0.1", http_port))
            if n % 2 == 0:
                s.sendall(poll)  # a long-poll; every other connection stays idle
            flood.append(s)
        with trio.move_on_after(5):  # the server has taken all it will take
            while _open_fds(process.pid) < FILES * HTTP_SHARE_OF_FILES:
                await trio.sleep(0.05)
        await trio.sleep(0.5)
        assert _open_fds(process.pid) < FILES - 16  # room left for workers and the database

        with trio.fail_after(3):  # at once, not when some descriptor happens to come free
            ws = await trio_websocket.connect_websocket_url(
                nursery, f"ws://127.0.0.1:{worker_port}/v1/worker", subprotocols=["pulse.worker.v1"],
                extra_headers=[(b"authorization", f"Bearer {worker_token}".encode())])
            await RawWorker(ws).register("billing")
        await ws.aclose()
        assert process.poll() is None

        for s in flood:
            s.close()
        flood.clear()
        with trio.fail_after(10):  # the waiting connections are served once the flood has gone
            assert (await Http(http_port).get("/healthz")).status == 200
    finally:
        await _end(process, flood)
    assert b"EMFILE" not in log_path.read_bytes()


async def _end(process: trio.Process, flood: list[socket.socket]) -> None:
    """Close the flood's sockets, then stop serve (SIGTERM; SIGKILL if it has not ended in 10 s)."""
    for s in flood:
        s.close()
    process.terminate()
    with trio.move_on_after(10):
        await process.wait()
    if process.poll() is None:
        process.kill()


def _answer_now(s: socket.socket) -> bytes:
    """What the server has answered on ``s`` so far, b"" while it still holds the request."""
    try:
        return s.recv(65536, socket.MSG_DONTWAIT)
    except BlockingIOError:
        return b""


async def test_waits_beyond_their_bound_are_refused_503_and_leave_the_api_answering(db, tmp_path):
    """More long-polls than the API holds connections: the ones beyond the wait bound are 503, a health check
    and a submit are still answered at once."""
    polls = int(FILES * HTTP_SHARE_OF_FILES) + 8
    waits = int(FILES * HTTP_SHARE_OF_FILES * WAITS_SHARE_OF_CONNECTIONS)
    with open(tmp_path / "serve.log", "wb") as log:
        process, _, http_port = await _serve(db, log)
    producer = make_token(db, "producer")
    http = Http(http_port)
    flood: list[socket.socket] = []
    try:
        task_id = (await http.post("/v1/tasks", token=producer, json_body={"queue": "billing", "kind": "k"})
                   ).json()["task_id"]
        poll = (f"GET /v1/tasks/{task_id}/outcome?wait=60 HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: Bearer {producer}\r\n\r\n").encode()
        for _ in range(polls):
            s = socket.create_connection(("127.0.0.1", http_port))
            s.sendall(poll)
            flood.append(s)
        with trio.fail_after(3):
            assert (await http.get("/healthz")).status == 200
            submitted = await http.post("/v1/tasks", token=producer, json_body={"queue": "billing", "kind": "k"})
            assert submitted.status == 201
        await trio.sleep(0.5)  # every refusal is sent by now: the health check came after them
        answers = [_answer_now(s) for s in flood]
        refused = [a for a in answers if a]
        assert len(refused) == polls - waits
        for answer in refused:
            assert answer.startswith(b"HTTP/1.1 503") and b'"too_many_waits"' in answer, answer[:300]
            assert b"retry-after: 1\r\n" in answer.lower() and b"connection: close\r\n" in answer.lower()
        # Only a request that will wait takes a wait: an ended task's outcome is answered though every wait is held.
        ended = (await http.post("/v1/tasks", token=producer, json_body={"queue": "billing", "kind": "k"})
                 ).json()["task_id"]
        assert (await http.post(f"/v1/tasks/{ended}/cancel", token=make_token(db, "operator"))).status == 200
        with trio.fail_after(3):
            outcome = await http.get(f"/v1/tasks/{ended}/outcome?wait=60", token=producer)
        assert outcome.status == 200 and outcome.json()["state"] == "CANCELLED", outcome.body[:300]
    finally:
        await _end(process, flood)


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_clients_wait_refused_too_many_waits_asks_again_after_a_pause(db, tmp_path, kind):
    """http-api.md: a wait beyond the bound is answered 503 ``too_many_waits``, and the Python clients'
    ``wait()`` asks again after it. Every wait of a real serve is held; the client's wait is refused, the
    task is cancelled meanwhile, and the wait ends with the task's own outcome on its next ask, after the
    pause (an ask that had been held would have been woken at once)."""
    from pulse_trio.producer import AsyncClient, Client, TaskCancelled
    from pulse_trio.producer.calls import RETRY_PAUSE_S

    waits = int(FILES * HTTP_SHARE_OF_FILES * WAITS_SHARE_OF_CONNECTIONS)
    with open(tmp_path / "serve.log", "wb") as log:
        process, _, http_port = await _serve(db, log)
    producer, http = make_token(db, "producer"), Http(http_port)
    flood: list[socket.socket] = []
    client: AsyncClient | Client | None = None
    try:
        task_id = (await http.post("/v1/tasks", token=producer, json_body={"queue": "billing", "kind": "k"})
                   ).json()["task_id"]
        poll = (f"GET /v1/tasks/{task_id}/outcome?wait=60 HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: Bearer {producer}\r\n\r\n").encode()
        for _ in range(waits + 1):
            s = socket.create_connection(("127.0.0.1", http_port))
            s.sendall(poll)
            flood.append(s)
        with trio.fail_after(5):  # every wait is held once the one beyond them is refused
            while not (refused := [a for a in map(_answer_now, flood) if a]):
                await trio.sleep(0.05)
        assert len(refused) == 1 and b'"too_many_waits"' in refused[0], refused

        url = f"http://127.0.0.1:{http_port}"
        client = AsyncClient(url, producer) if kind == "async" else Client(url, producer)
        raised: list[BaseException] = []

        async def wait() -> None:
            try:
                if isinstance(client, AsyncClient):
                    await client.wait(task_id, timeout=10)
                else:
                    await trio.to_thread.run_sync(client.wait, task_id, 10)
            except Exception as exc:  # noqa: BLE001 (the test judges what it was)
                raised.append(exc)

        async with trio.open_nursery() as nursery:
            started = trio.current_time()
            nursery.start_soon(wait)
            await trio.sleep(0.3)
            assert not raised, raised  # refused, it did not give up
            cancelled = await http.post(f"/v1/tasks/{task_id}/cancel", token=make_token(db, "operator"))
            assert cancelled.status == 200, cancelled.body[:300]
            with trio.fail_after(RETRY_PAUSE_S + 3):
                while not raised:
                    await trio.sleep(0.02)
        took = trio.current_time() - started
        assert isinstance(raised[0], TaskCancelled), repr(raised[0])
        assert took >= RETRY_PAUSE_S * 0.9, took
    finally:
        if isinstance(client, AsyncClient):
            await client.aclose()
        elif client is not None:
            client.close()
        await _end(process, flood)
