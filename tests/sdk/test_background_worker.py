"""``BackgroundWorker`` (behind the ``pulse_worker`` fixture): a worker on its own loop in a thread."""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time

import pytest

from sdk_support import FAST_BACKOFF, in_thread, url_of

from pulse_trio.background_worker import BackgroundWorker
from pulse_trio.sdk import Registry

pytestmark = pytest.mark.live  # a thread with its own event loop, reconnecting on real sockets


def closed_port_url() -> str:
    """A worker URL nothing listens on: every connect is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"ws://127.0.0.1:{s.getsockname()[1]}/v1/worker"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_start_that_gives_up_leaves_no_thread_and_no_worker_behind(backend):
    """The worker never connects: start() raises, and its thread and reconnecting worker end with it."""
    registry = Registry()
    registry.add("billing", "invoice.send", lambda task: {})
    background = BackgroundWorker(closed_port_url(), "t", registry, backend=backend, backoff=FAST_BACKOFF)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="did not connect"):
        background.start(timeout=0.5)
    assert time.monotonic() - started < 5, "start() waited for the whole stop slack: the stop was not heard"
    assert not [t for t in threading.enumerate() if t.name == "pulse-background-worker"]
    tries = background.worker.stats.failed_connects
    time.sleep(0.5)
    assert background.worker.stats.failed_connects == tries, "the worker still reconnects"


class Interrupted(Exception):
    """What a signal handler raises in the main thread: a test's time cap (pytest-timeout), a Ctrl-C."""


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_bad_option_is_raised_as_itself_at_once_not_as_a_failed_connect(backend):
    """The Worker, made on the thread's own loop, refuses it: the caller sees that ValueError, not "did not
    connect within" after the whole start timeout."""
    registry = Registry()
    registry.add("billing", "invoice.send", lambda task: {})
    background = BackgroundWorker(closed_port_url(), "t", registry, backend=backend, connect_timeout=0)
    started = time.monotonic()
    with pytest.raises(ValueError, match="connect_timeout must be"):
        background.start(timeout=30)
    assert time.monotonic() - started < 5
    assert not [t for t in threading.enumerate() if t.name == "pulse-background-worker"]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_start_interrupted_while_it_waits_leaves_no_thread_and_no_worker_behind(backend):
    """An exception raised in start()'s wait for the first connection stops the worker before it goes on."""
    registry = Registry()
    registry.add("billing", "invoice.send", lambda task: {})
    background = BackgroundWorker(closed_port_url(), "t", registry, backend=backend, backoff=FAST_BACKOFF)

    def interrupt(signum, frame):
        raise Interrupted

    previous = signal.signal(signal.SIGUSR1, interrupt)
    timer = threading.Timer(0.3, signal.pthread_kill, (threading.main_thread().ident, signal.SIGUSR1))
    timer.start()
    try:
        with pytest.raises(Interrupted):
            background.start(timeout=30)
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
    assert not [t for t in threading.enumerate() if t.name == "pulse-background-worker"]
    tries = background.worker.stats.failed_connects
    time.sleep(0.5)
    assert background.worker.stats.failed_connects == tries, "the worker still reconnects"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_a_stop_that_cannot_end_the_worker_raises_instead_of_leaving_it_running(
        start_service, token_factory, client, backend):
    """An ``async def`` handler that blocks the worker's loop: the stop cannot end it and says so."""
    service = await start_service()
    called, release = threading.Event(), threading.Event()
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def blocks_the_loop(task):
        called.set()
        release.wait(60)  # a blocking call in an async handler: the whole loop stands still
        return {}

    background = BackgroundWorker(url_of(service), token_factory("worker", ("billing",)), registry, backend=backend)
    await in_thread(background.start)
    try:
        await in_thread(client.submit, "billing", "invoice.send", {})
        assert await in_thread(called.wait, 15), "the handler was never called"
        with pytest.raises(RuntimeError, match="did not stop"):
            await in_thread(background.stop, timeout=0.5)
    finally:
        release.set()
    await in_thread(background.stop)  # once the loop runs again, a stop ends it
    assert not [t for t in threading.enumerate() if t.name == "pulse-background-worker"]


async def test_a_worker_logged_at_debug_shows_no_token_on_either_end(start_service, token_factory, caplog):
    """pytest shows a failed test's captured log (``--log-level=DEBUG``): the handshake's header lines hide the token."""
    caplog.set_level(logging.DEBUG)
    service = await start_service()
    token = token_factory("worker", ("billing",))
    registry = Registry()
    registry.add("billing", "invoice.send", lambda task: {})
    background = BackgroundWorker(url_of(service), token, registry)
    await in_thread(background.start)
    await in_thread(background.stop)
    headers = [r for r in caplog.records if r.name.endswith("websocket") and "Authorization" in r.getMessage()]
    assert {r.getMessage()[0] for r in headers} == {">", "<"}, "the client's and the server's header lines"
    assert token not in caplog.text
