"""What an instance logs while its database is away: one line when it goes, one when it is back.

The instance reaches the real database through a TCP relay in this test:
cutting the relay (every link dropped, every new one closed at once) is
the outage, as a stopped or unreachable server looks to PyMySQL.
"""

from __future__ import annotations

import dataclasses
import logging

import trio

from pulse_trio.config import Settings
from pulse_trio.serve import serve

OUTAGE_S = 4.0  # several polls' passes, each failing after the store's retries


class DatabaseRelay:
    """A TCP relay to the test database that can be cut and restored."""

    def __init__(self, db) -> None:
        self.db = db
        self.port = 0
        self.down = False
        self._links: set[trio.CancelScope] = set()

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self)
        await trio.serve_listeners(self._link, listeners)

    def cut(self) -> None:
        self.down = True
        for scope in list(self._links):
            scope.cancel()

    def restore(self) -> None:
        self.down = False

    async def _upstream(self) -> trio.abc.Stream:
        if self.db.unix_socket:
            return await trio.open_unix_socket(self.db.unix_socket)
        return await trio.open_tcp_stream(self.db.host, self.db.port)

    async def _link(self, client: trio.SocketStream) -> None:
        if self.down:
            await trio.aclose_forcefully(client)
            return
        upstream = await self._upstream()
        with trio.CancelScope() as scope:
            self._links.add(scope)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, client, upstream, scope)
                    nursery.start_soon(self._pump, upstream, client, scope)
            finally:
                self._links.discard(scope)
        await trio.aclose_forcefully(client)
        await trio.aclose_forcefully(upstream)

    @staticmethod
    async def _pump(source: trio.abc.Stream, sink: trio.abc.Stream, scope: trio.CancelScope) -> None:
        try:
            while data := await source.receive_some(65536):
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()


async def _outage(db, nursery, connect, token, caplog, logger: str, check_away, back: int) -> list:
    """``logger``'s records through an outage of ``OUTAGE_S`` under one idle worker: ``check_away(records)``
    checks those of the outage before the database is back; returns the ``back`` (or more) that follow
    once it is (waited for, and half a second more)."""
    caplog.set_level(logging.INFO, logger=logger)
    relay = await nursery.start(DatabaseRelay(db).serve)
    relayed = dataclasses.replace(db, host="127.0.0.1", port=relay.port, unix_socket=None, hosts=())
    settings = Settings(worker_listen=("127.0.0.1", 0), http_listen=("127.0.0.1", 0))
    service = await nursery.start(lambda task_status: serve(settings, relayed, handle_signals=False,
                                                            task_status=task_status))

    def lines() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == logger]

    try:
        worker = await connect(service, token)
        await worker.register(["billing"], capacity=1)  # hungry: every poll's pass asks the database
        probes = service.dispatcher.probes
        with trio.fail_after(10):  # the pass its capacity woke is over: the poll's passes ask which queues have work
            while service.dispatcher.probes < probes + 2:
                await trio.sleep(0.01)
        assert not lines(), _said(lines())
        relay.cut()
        await trio.sleep(OUTAGE_S)
        away = lines()
        check_away(away)
        relay.restore()
        with trio.fail_after(10):
            while len(lines()) < len(away) + back:
                await trio.sleep(0.05)
        await trio.sleep(0.5)
        return lines()[len(away):]
    finally:
        relay.restore()
        service.stop()
        with trio.move_on_after(10):
            while service.connections:
                await trio.sleep(0.01)


def _said(records: list[logging.LogRecord]) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in records]


def _once_each(away: list[logging.LogRecord], parts: int) -> None:
    """Each failing part said so once, as an error with its traceback."""
    assert len(away) == parts and len({r.getMessage() for r in away}) == parts, _said(away)
    assert all(r.levelno == logging.ERROR and r.exc_info is not None for r in away), _said(away)


async def test_the_dispatcher_says_once_that_the_database_is_away_and_once_that_it_is_back(
        db, nursery, connect, worker_token, caplog):
    back = await _outage(db, nursery, connect, worker_token, caplog, "pulse_trio.dispatcher",
                         lambda away: _once_each(away, 1), 1)
    assert [r.levelno for r in back] == [logging.INFO], _said(back)


async def test_the_timers_say_once_that_the_database_is_away_and_once_that_it_is_back(
        db, nursery, connect, worker_token, caplog):
    """Every tick fails through an outage (the sweep for lost nodes does not run yet: a new node sweeps
    only once its own heartbeats have been on time for a whole lapse)."""
    back = await _outage(db, nursery, connect, worker_token, caplog, "pulse_trio.timers",
                         lambda away: _once_each(away, 1), 1)
    assert [r.levelno for r in back] == [logging.INFO], _said(back)
