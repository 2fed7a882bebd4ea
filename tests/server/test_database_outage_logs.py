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

OUTAGE_S = 4.0  # after every loop has said so: several polls' passes, each failing after the store's retries


class DatabaseRelay:
    """A TCP relay to the test database that can be cut and restored."""

    def __init__(self, db) -> None:
        self.db = db
        self.port = 0
        self.down = False
        self._links: set[trio.CancelScope] = set()
        self._open = 0  # links whose sockets are not closed yet

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self)
        await trio.serve_listeners(self._link, listeners)

    def cut(self) -> None:
        self.down = True
        for scope in list(self._links):
            scope.cancel()

    async def cut_through(self) -> None:
        """:meth:`cut`, then wait until every link's sockets are closed: until then a statement already on its
        way could still be answered through a link whose cancel has not run yet."""
        self.cut()
        with trio.fail_after(10):
            while self._open:
                await trio.sleep(0.01)

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
        self._open += 1
        upstream = None
        try:
            upstream = await self._upstream()
            if self.down:  # cut while it connected
                return
            with trio.CancelScope() as scope:
                self._links.add(scope)
                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._pump, client, upstream, scope)
                        nursery.start_soon(self._pump, upstream, client, scope)
                finally:
                    self._links.discard(scope)
        finally:
            await trio.aclose_forcefully(client)
            if upstream is not None:
                await trio.aclose_forcefully(upstream)
            self._open -= 1

    @staticmethod
    async def _pump(source: trio.abc.Stream, sink: trio.abc.Stream, scope: trio.CancelScope) -> None:
        try:
            while data := await source.receive_some(65536):
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()


#: The loops that ask the database during the outage, by logger, and the level each says it at. (The sweep
#: for lost nodes does not run yet: a new node sweeps only once its own heartbeats have been on time for a
#: whole lapse.)
LOOPS = {"pulse_trio.dispatcher": logging.ERROR, "pulse_trio.timers": logging.ERROR,
         "pulse_trio.schedules": logging.ERROR, "pulse_trio.liveness": logging.ERROR,
         "pulse_trio.queues": logging.WARNING, "pulse_trio.settings": logging.WARNING,
         "pulse_trio.retention": logging.WARNING}


async def test_every_loop_says_once_that_the_database_is_away_and_once_that_it_is_back(
        db, nursery, connect, worker_token, caplog):
    """Through an outage lasting ``OUTAGE_S`` past every loop's first word of it, under one hungry worker (every
    poll's pass asks the database), each loop says once, with its traceback, that its database work fails, then
    once that it works again: not one traceback per pass, tick, firing, heartbeat or re-read, for as long as the
    outage lasts."""
    caplog.set_level(logging.INFO, logger="pulse_trio")
    relay = await nursery.start(DatabaseRelay(db).serve)
    relayed = dataclasses.replace(db, host="127.0.0.1", port=relay.port, unix_socket=None, hosts=())
    # Heartbeats every second and a retention pass every half second, so the outage holds several of each too.
    settings = Settings(worker_listen=("127.0.0.1", 0), http_listen=("127.0.0.1", 0),
                        purge_interval=0.5).override(node_heartbeat=1.0)
    service = await nursery.start(lambda task_status: serve(settings, relayed, handle_signals=False,
                                                            task_status=task_status))

    def said(logger: str) -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == logger]

    try:
        worker = await connect(service, worker_token)
        await worker.register(["billing"], capacity=1)
        probes = service.dispatcher.probes
        with trio.fail_after(10):  # the pass its capacity woke is over: the poll's passes ask which queues have work
            while service.dispatcher.probes < probes + 2:
                await trio.sleep(0.01)
        before = {logger: len(said(logger)) for logger in LOOPS}
        relay.cut()
        with trio.fail_after(30):  # on a loaded machine a loop's first failing pass may take seconds to come
            while any(len(said(logger)) == before[logger] for logger in LOOPS):
                await trio.sleep(0.05)
        await trio.sleep(OUTAGE_S)  # then the outage lasts: every pass in it must stay silent
        away = {logger: said(logger)[before[logger]:] for logger in LOOPS}
        for logger, level in LOOPS.items():
            assert [(r.levelno, r.exc_info is not None) for r in away[logger]] == [(level, True)], \
                (logger, _said(away[logger]))
        relay.restore()
        with trio.fail_after(10):
            while any(len(said(logger)) < before[logger] + 2 for logger in LOOPS):
                await trio.sleep(0.05)
        await trio.sleep(0.5)
        for logger in LOOPS:
            back = said(logger)[before[logger] + 1:]
            assert [r.levelno for r in back] == [logging.INFO], (logger, _said(back))
    finally:
        relay.restore()
        service.stop()
        with trio.move_on_after(10):
            while service.connections:
                await trio.sleep(0.01)


def _said(records: list[logging.LogRecord]) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in records]


async def test_workers_refused_while_the_database_is_away_write_one_line_not_one_each(db, nursery, worker_token,
                                                                                       caplog):
    """docs/operations.md §6: a handshake refused because the database is away (503) is counted and said once
    for its cause, with no warning of its own per handshake: the outage is in the log already."""
    import harness

    caplog.set_level(logging.INFO, logger="pulse_trio")
    relay = await nursery.start(DatabaseRelay(db).serve)
    relayed = dataclasses.replace(db, host="127.0.0.1", port=relay.port, unix_socket=None, hosts=())
    settings = Settings(worker_listen=("127.0.0.1", 0), http_listen=("127.0.0.1", 0))
    service = await nursery.start(lambda task_status: serve(settings, relayed, handle_signals=False,
                                                            task_status=task_status))
    try:
        await relay.cut_through()
        before = len(caplog.records)
        for _ in range(3):  # workers reconnecting while the database is away
            assert (await harness.rejected(service.worker_port, worker_token)).status_code == 503
        said = [r for r in caplog.records[before:]
                if r.name == "pulse_trio.connection" and r.levelno >= logging.WARNING]
        assert [r.getMessage() for r in said] == [f"worker handshake refused: storage_unavailable from {said[0].peer}"]
    finally:
        relay.restore()
        service.stop()
