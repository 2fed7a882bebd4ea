"""Hold many idle, registered worker sessions open (a child of `bench connections`).

``python -m pulse_trio.bench.idle_sessions --url ws://… --sessions N``, with
the worker token in ``PULSE_WORKER_TOKEN``. Every session is a real
WebSocket connection that offers ``pulse.worker.v1``, sends
``worker.hello``, waits for ``worker.welcome``, declares its capacity with
``worker.capacity`` (unless ``--capacity 0``) and waits for the ack; then
it stays idle: the SDK's own WebSocket client (``pulse_trio.sdk.websocket``,
no task of its own) reads and answers the server's pings, nothing else is
sent. The frames are written by hand from docs/protocol.md §4.1-§4.3, so
the holder is as cheap as a client can be and the server is what is
measured.

Talks to its parent on stdio, one JSON object per line: ``{"ready": true}``
once imported; it starts connecting on a ``go`` line; ``{"registered": …}``
when every session is registered (or failed); it then holds them until
stdin closes or says ``stop``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import anyio
import trio

from pulse_trio.sdk.websocket import ClientSocket, HandshakeRejected, SocketClosed, connect

MAX_ERRORS_KEPT = 5


def _frame(**fields: object) -> str:
    return json.dumps({"protocol_version": "1", **fields}, separators=(",", ":"))


def _hello(name: str, queue: str) -> str:
    return _frame(type="worker.hello", id="h1", body={
        "worker_name": name, "subscriptions": [{"queue": queue}],
        "cancellation_notifications": False, "concurrency_keys": False,
        "client": {"name": "pulse-trio-bench-idle", "version": "1"}})


def _expect(text: str | bytes, kind: str, reply_to: str) -> dict:
    frame = json.loads(text)
    if frame.get("type") != kind or frame.get("reply_to") != reply_to:
        error = frame.get("error") or {}
        raise RuntimeError(f"expected {kind}, got {frame.get('type')}: {error.get('code')} {error.get('message')}")
    return frame


class Holder:
    def __init__(self, args: argparse.Namespace, token: str) -> None:
        self.args = args
        self.headers = [("Authorization", f"Bearer {token}")]
        self.registered = 0
        self.failed = 0
        self.errors: list[str] = []
        self.durations: list[float] = []
        self.all_done = trio.Event()
        self._limit = trio.CapacityLimiter(args.in_flight)

    def _settled(self) -> None:
        if self.registered + self.failed == self.args.sessions:
            self.all_done.set()

    async def session(self, index: int) -> None:
        """Register one session, then hold it until the holder is cancelled."""
        try:
            async with self._limit:
                started = time.perf_counter()
                ws = await self._open(index)
        except (OSError, RuntimeError, HandshakeRejected, SocketClosed, trio.TooSlowError, ValueError) as exc:
            self.failed += 1
            if len(self.errors) < MAX_ERRORS_KEPT:
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self._settled()
            return
        self.durations.append(time.perf_counter() - started)
        self.registered += 1
        self._settled()
        try:
            while True:  # idle: nothing is expected; pings are answered, the server ending the session ends this
                await ws.receive()
                if ws.pending:
                    await ws.flush()
        except SocketClosed:
            pass
        finally:  # the holder is stopping (or the server ended it): drop the connection, as a killed worker would
            await anyio.aclose_forcefully(ws.stream)

    async def _open(self, index: int) -> ClientSocket:
        args = self.args
        with trio.fail_after(args.timeout):
            ws = await connect(args.url, self.headers, ssl_context=None, timeout=args.timeout)
            try:
                await _send(ws, _hello(f"{args.name}-{index}", args.queue))
                welcome = _expect(await _next_message(ws), "worker.welcome", "h1")
                if args.capacity:
                    await _send(ws, _frame(
                        type="worker.capacity", id="c1", session_id=welcome["session_id"],
                        body={"sequence": "1", "capacity": args.capacity, "drain": False}))
                    _expect(await _next_message(ws), "ack", "c1")
            except BaseException:
                await ws.close(2)
                raise
        return ws

    async def run(self) -> None:
        _say({"ready": True})
        if await _read_line() != "go":
            return
        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for index in range(self.args.sessions):
                nursery.start_soon(self.session, index)
            if self.args.sessions == 0:
                self.all_done.set()
            await self.all_done.wait()
            _say({"registered": self.registered, "failed": self.failed, "seconds": time.perf_counter() - started,
                  "errors": self.errors, "durations": [round(d, 5) for d in self.durations]})
            while await _read_line() not in ("", "stop"):
                pass
            nursery.cancel_scope.cancel()


async def _send(ws: ClientSocket, text: str) -> None:
    ws.send_text(text.encode())
    await ws.flush()


async def _next_message(ws: ClientSocket) -> bytes:
    """The next text message (pongs to pings that came first are written on the way)."""
    while True:
        messages = await ws.receive()
        if ws.pending:
            await ws.flush()
        if messages:
            ws.unread(messages[1:])
            return messages[0]


def _say(value: object) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


async def _read_line() -> str:
    """One line from stdin ('' at end of file), without blocking the event loop."""
    return (await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)).strip()


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pulse_trio.bench.idle_sessions")
    parser.add_argument("--url", required=True, help="ws://HOST:PORT/v1/worker")
    parser.add_argument("--sessions", type=int, required=True)
    parser.add_argument("--capacity", type=int, default=1, help="declared per session; 0 sends no worker.capacity")
    parser.add_argument("--queue", default="bench.idle", help="the one queue each session subscribes to")
    parser.add_argument("--name", default=f"idle-{os.getpid()}", help="worker_name prefix")
    parser.add_argument("--in-flight", type=int, default=32, help="registrations under way at once")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds one registration may take")
    args = parser.parse_args(argv)
    token = os.environ.get("PULSE_WORKER_TOKEN")
    if not token:
        parser.error("PULSE_WORKER_TOKEN is not set")
    raise_fd_limit()
    trio.run(Holder(args, token).run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
