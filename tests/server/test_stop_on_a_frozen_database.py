"""A stop while the database hangs waits its graces at the same time, not one after the other.

The instance reaches the database through a relay that can freeze: every
link stays open and nothing more is passed on, as a frozen host looks to
PyMySQL. An HTTP request then waits on the store when the instance is
stopped. Its node's STOPPED gives up at its bound; the HTTP API's wait
for that request and the store's grace then run together, so the store is
cut short at its grace, not after the HTTP API's grace is over too.
"""

from __future__ import annotations

import dataclasses

import pytest
import trio

from pulse_trio.config import Settings
from pulse_trio.serve import serve
from pulse_trio.server.service import BESIDE_GRACE_S, STORE_GRACE_S

pytestmark = pytest.mark.live

#: The URL's connect_timeout here: the STOPPED's connection, and one being opened, give up within it.
CONNECT_TIMEOUT_S = 1.0


class FreezingRelay:
    """A TCP relay to the test database; :meth:`freeze` stops passing bytes on, every link left open."""

    def __init__(self, db) -> None:
        self.db = db
        self.port = 0
        self.thawed = trio.Event()
        self.thawed.set()

    def freeze(self) -> None:
        self.thawed = trio.Event()

    def thaw(self) -> None:
        self.thawed.set()

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self)
        await trio.serve_listeners(self._link, listeners)

    async def _link(self, client: trio.SocketStream) -> None:
        await self.thawed.wait()  # a frozen host accepts, and never greets
        if self.db.unix_socket:
            upstream = await trio.open_unix_socket(self.db.unix_socket)
        else:
            upstream = await trio.open_tcp_stream(self.db.host, self.db.port)
        async with client, upstream, trio.open_nursery() as nursery:
            nursery.start_soon(self._pump, client, upstream, nursery.cancel_scope)
            nursery.start_soon(self._pump, upstream, client, nursery.cancel_scope)

    async def _pump(self, source: trio.abc.Stream, sink: trio.abc.Stream, scope: trio.CancelScope) -> None:
        try:
            while data := await source.receive_some(65536):
                await self.thawed.wait()
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()


async def test_a_stop_on_a_frozen_database_cuts_the_http_apis_store_work_at_the_store_grace(db, token_factory):
    token = token_factory(role="producer", queues=("billing",))
    async with trio.open_nursery() as outer:
        relay = await outer.start(FreezingRelay(db).serve)
        relayed = dataclasses.replace(db, host="127.0.0.1", port=relay.port, unix_socket=None, hosts=(),
                                      connect_timeout=CONNECT_TIMEOUT_S)
        settings = Settings(worker_listen=("127.0.0.1", 0), http_listen=("127.0.0.1", 0))
        async with trio.open_nursery() as instance:
            service = await instance.start(lambda task_status: serve(settings, relayed, handle_signals=False,
                                                                     task_status=task_status))
            relay.freeze()
            request = await trio.open_tcp_stream("127.0.0.1", service.http_port)
            await request.send_all(f"GET /v1/tasks?queue=billing HTTP/1.1\r\nHost: pulse\r\n"
                                   f"Authorization: Bearer {token}\r\n\r\n".encode())
            with trio.fail_after(5):  # the request waits on the store
                while not service.store.threads_busy():
                    await trio.sleep(0.01)
            stopped_at = trio.current_time()
            service.stop()
        took = trio.current_time() - stopped_at
        relay.thaw()
        await request.aclose()
        outer.cancel_scope.cancel()
    # The STOPPED's bound, then the store's grace while the HTTP API waits, then a connection being opened:
    # less than the two graces one after the other, which alone took longer than this.
    assert took < BESIDE_GRACE_S + STORE_GRACE_S, took
