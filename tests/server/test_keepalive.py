"""Keepalive (docs/protocol.md §1.4): pings each interval, in the connection's slot, written whole between frames."""

from __future__ import annotations

import json

import trio
from websockets.frames import Frame, Opcode

import harness
from pulse_trio.store.engine.writer import connect as db_connect
from sql_support import rows

PING = b"\x89\x00"  # a server's ping: unmasked, no payload
MASKED_EMPTY_PONG = b"\x8a\x80\x01\x02\x03\x04"


async def test_an_answering_peer_is_pinged_every_interval_and_kept(start_service, worker_token):
    """Each ping is the two-byte frame; a peer that answers every one outlives many intervals."""
    interval = 0.1
    service = await start_service(ping_interval=interval, hello_timeout=30)
    stream, buffer = await harness.raw_upgrade(service.worker_port, worker_token)
    pings = 0
    with trio.fail_after(10):
        while pings < 8:  # more than the three intervals after which an unanswered ping closes
            if not buffer.startswith(PING):
                buffer += await stream.receive_some(4096)
            assert not buffer.startswith(b"\x88"), f"closed: {buffer!r}"
            while buffer.startswith(PING):
                buffer = buffer[len(PING):]
                pings += 1
                await stream.send_all(MASKED_EMPTY_PONG)
            assert buffer == b"" or PING.startswith(buffer), buffer
    assert len(service.connections) == 1
    await stream.aclose()


async def test_pings_never_land_inside_a_frame(start_service, connect, worker_token, client):
    """Large assigns leave while pings are due at every turn; the client's codec reads every frame whole."""
    service = await start_service(ping_interval=0.05)
    w = await connect(service, worker_token)
    await w.register(["billing"], capacity=8)
    payload = "x" * 250_000
    for _ in range(24):
        client.submit("billing", "invoice.send", {"payload": payload})
    with trio.fail_after(60):
        for _ in range(24):
            held = await w.expect_assign()
            assert held.task["payload"]["payload"] == payload
            await w.ok(w.start(held))
            await w.ok(w.finish(held))
    assert (await w.capacity_ok(8))["capacity"] == 8
    assert len(service.connections) == 1


async def test_many_connections_share_the_slots_and_all_are_pinged(start_service, connect, worker_token):
    """More connections than slots; each is pinged (its pong keeps it) and survives past three intervals."""
    interval = 0.1
    service = await start_service(ping_interval=interval)
    workers = [await connect(service, worker_token, name=f"w{i}") for i in range(25)]
    for w in workers:
        await w.register(["billing"])
    await trio.sleep(5 * interval)
    assert len(service.connections) == 25
    for w in workers:
        assert (await w.capacity_ok(1))["capacity"] == 1


async def test_pings_over_tls_go_through_the_writer(start_service, connect, worker_token, tls):
    """Under TLS the ping cannot be written to the socket directly; the session still lives on its pongs."""
    cert, key, context = tls
    interval = 0.05
    service = await start_service(tls_cert=cert, tls_key=key, ping_interval=interval)
    w = await connect(service, worker_token, ssl_context=context)
    await w.register(["billing"])
    with trio.fail_after(10):
        for _ in range(10):
            await trio.sleep(interval)
            await w.capacity_ok(1)
    assert len(service.connections) == 1


async def test_a_silent_registered_peer_is_dropped_after_the_missing_pong_close(start_service, worker_token, db):
    """A frozen worker whose kernel still ACKs: it answers no ping and never echoes the close frame.

    The close begins in the keepalive, not in the reader, which waits for the
    next chunk with no deadline once registered: the closing's 2 s must reach it.
    """
    interval = 0.1
    service = await start_service(ping_interval=interval)
    stream, buffer = await harness.raw_upgrade(service.worker_port, worker_token)
    hello = {"protocol_version": "1", "type": "worker.hello", "id": "h1",
             "body": {"worker_name": "silent", "subscriptions": [{"queue": "billing"}]}}
    await stream.send_all(Frame(Opcode.TEXT, json.dumps(hello).encode()).serialize(mask=True))
    with trio.fail_after(10):
        while b"worker.welcome" not in buffer:
            buffer += await stream.receive_some(65536)
    close_seen_at = eof_at = None
    with trio.move_on_after(3 * interval + 2.0 + 5.0):
        while True:
            chunk = await stream.receive_some(65536)
            if not chunk:
                eof_at = trio.current_time()
                break
            if close_seen_at is None and b"\x88" in chunk:  # the server's close frame
                close_seen_at = trio.current_time()
    await stream.aclose()
    assert close_seen_at is not None, "no close frame after three unanswered pings"
    assert eof_at is not None and eof_at - close_seen_at <= 2.0 + 1.0, "the socket outlived the close's 2 s"
    with trio.fail_after(5):
        while rows(db, "SELECT state FROM worker_instances WHERE worker_name = 'silent'") != [("DISCONNECTED",)]:
            await trio.sleep(0.05)


async def test_a_peer_that_answers_every_ping_is_kept_while_its_request_waits_in_the_store(start_service, connect,
                                                                                         worker_token, db):
    """While the reader waits on the store it reads no pong: none of those is missing.

    Another connection holds the session's row, so the ``worker.capacity``
    waits ten intervals; the peer (trio-websocket) answers every ping meanwhile.
    """
    interval = 0.1
    service = await start_service(ping_interval=interval)
    w = await connect(service, worker_token)
    await w.register(["billing"], capacity=1)
    holder = await trio.to_thread.run_sync(db_connect, db)
    replies = []
    try:
        await trio.to_thread.run_sync(holder.cursor().execute,
                                      "SELECT state FROM worker_instances WHERE session_id = %s FOR UPDATE",
                                      (w.session_id,))
        async with trio.open_nursery() as nursery:

            async def capacity():
                replies.append(await w.capacity(2))

            nursery.start_soon(capacity)
            await trio.sleep(10 * interval)
            await trio.to_thread.run_sync(holder.rollback)
    finally:
        await trio.to_thread.run_sync(holder.close)
    assert replies and replies[0]["type"] == "ack", replies
    assert (await w.capacity_ok(3))["capacity"] == 3
