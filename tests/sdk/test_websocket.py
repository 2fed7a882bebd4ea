"""The SDK's WebSocket (RFC 6455 on websockets' sans-IO codec) against a raw peer that writes any frame.

The peer is a real server socket on websockets' ``ServerProtocol``: it
fragments, pings, sends invalid UTF-8, binary and oversized messages,
closes, refuses the upgrade, speaks TLS, or stops answering pings.
"""

from __future__ import annotations

import ssl

import pytest
import trio

from raw_server import RawServer
from sdk_support import in_thread, wait_for, wait_state
from scripted_server import Peer, now

from pulse_trio.contract.grammar import new_secret
from pulse_trio.contract.limits import MAX_FRAME_BYTES, SUBPROTOCOL
from pulse_trio.sdk import Registry, TaskContext
from pulse_trio.sdk.websocket import ClientSocket, HandshakeRejected, SocketClosed, connect

TOKEN = [("Authorization", "Bearer t0ken")]


async def _open(server: RawServer, ssl_context: ssl.SSLContext | None = None):
    socket = await connect(server.url(), TOKEN, ssl_context=ssl_context, timeout=5)
    return socket, await server.next_peer()


async def _messages(socket: ClientSocket, count: int) -> list[bytes]:
    got: list[bytes] = []
    with trio.fail_after(5):
        while len(got) < count:
            got += await socket.receive()
    return got


async def _until_closed(socket: ClientSocket) -> list[bytes]:
    """Read until the socket ends; what was read on the way."""
    got: list[bytes] = []
    with trio.fail_after(5), pytest.raises(SocketClosed):
        while True:
            got += await socket.receive()
    return got


async def test_the_upgrade_offers_the_subprotocol_and_the_token(raw):
    socket, peer = await _open(raw)
    assert socket.subprotocol == SUBPROTOCOL
    assert socket.frames.cutting  # the response ended the handshake's bytes: plain frames are cut beside the codec
    assert peer.authorization == "Bearer t0ken" and peer.request.path == "/v1/worker"
    socket.send_text(b'{"n":1}')
    socket.send_text('{"é":2}'.encode())
    await socket.flush()  # both frames in one write
    with trio.fail_after(5):
        assert [await peer.get_message(), await peer.get_message()] == ['{"n":1}', '{"é":2}']
    await peer.send_message("back")
    assert await _messages(socket, 1) == [b"back"]
    await socket.close(2)


async def test_fragments_make_one_message_and_a_message_may_fill_the_limit(raw):
    socket, peer = await _open(raw)
    await peer.send_fragments(b'{"part":', '"é",'.encode(), b'"two"}')
    peer.send_raw_text(b"x" * MAX_FRAME_BYTES)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.flush)  # more than the socket buffers hold: sent while we read
        got = await _messages(socket, 2)
    assert got[0] == '{"part":"é","two"}'.encode() and got[1] == b"x" * MAX_FRAME_BYTES
    await socket.close(2)


async def test_pings_are_answered_and_our_pings_see_their_pong(raw):
    socket, peer = await _open(raw)
    peer.ping(b"anyone")
    await peer.flush()
    with trio.fail_after(5):
        while not socket.pending:  # the codec queued the pong; the writer sends it
            assert await socket.receive() == []
    await socket.flush()
    answered = socket.ping()
    await socket.flush()
    with trio.fail_after(5):
        while not answered.is_set():
            await socket.receive()
    assert peer.pongs == [b"anyone"] and peer.pings == 1
    await socket.close(2)


BAD = {
    "invalid_utf8": (lambda peer: peer.send_raw_text(b'{"x":"\xff"}'), 1007),
    "binary": (lambda peer: peer.send_binary(b"\x00\x01"), 1003),
    "too_big": (lambda peer: peer.send_raw_text(b"x" * (MAX_FRAME_BYTES + 1)), 1009),
}


@pytest.mark.parametrize("bad", sorted(BAD))
async def test_a_bad_message_closes_with_its_code_and_is_never_delivered(raw, bad):
    send, code = BAD[bad]
    socket, peer = await _open(raw)
    send(peer)
    peer.send_raw_text(b"after")  # nothing after the bad frame is read either
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.flush)
        assert await _until_closed(socket) == []
        assert str(code) in (socket.ended or "")
        await socket.close(2)  # reads (and drops) the rest until the server closes
    with trio.fail_after(5):
        await peer.gone.wait()
    assert peer.close_code == code


async def test_the_closing_handshake_from_either_side(raw):
    socket, peer = await _open(raw)
    with trio.fail_after(1):
        await socket.close(2)  # ours: 1000, and the server closes TCP at once
        await peer.gone.wait()
    assert peer.close_code == 1000

    socket, peer = await _open(raw)
    await peer.send_message("last")
    await peer.close(1001, "server_shutting_down")
    assert await _until_closed(socket) == [b"last"]  # what came before the close is still delivered
    assert socket.ended == "closed (1001): server_shutting_down"
    with trio.fail_after(1):
        await socket.close(2)  # echoes nothing more, waits for nothing: the handshake is done
        await peer.gone.wait()


async def test_closing_towards_a_vanished_peer_takes_the_close_timeout(raw):
    raw.silent = True
    socket, _ = await _open(raw)
    started = trio.current_time()
    with trio.CancelScope() as scope:
        scope.cancel()  # even a cancelled caller says goodbye, within the limit
        await socket.close(0.3)
    assert 0.25 <= trio.current_time() - started < 2


async def test_closing_a_socket_whose_peer_is_gone_takes_no_time(raw):
    raw.silent = True
    socket, _ = await _open(raw)
    socket.gone = True  # the owner's verdict: a ping went unanswered
    with trio.fail_after(0.5):
        await socket.close(30)  # no goodbye waits out its limit
    assert socket.ended == "closed by the worker"


async def test_the_upgrade_carries_one_authorization_the_token_s(raw):
    # User info in the URL makes the codec add a Basic one; a second Authorization is a 401 at the service.
    socket = await connect(raw.url().replace("://", "://ops:hunter2@"), TOKEN, ssl_context=None, timeout=5)
    peer = await raw.next_peer()
    assert peer.request.headers.get_all("Authorization") == ["Bearer t0ken"]
    await socket.close(2)


async def test_a_refused_upgrade_is_its_status_and_body(raw):
    raw.reject = (401, "a valid worker token is required\n")
    with pytest.raises(HandshakeRejected) as refused:
        await connect(raw.url(), TOKEN, ssl_context=None, timeout=5)
    assert refused.value.status == 401 and b"worker token" in refused.value.body


async def test_nothing_listening_is_a_closed_socket():
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()
    with pytest.raises(SocketClosed, match="cannot connect"):
        await connect(f"ws://127.0.0.1:{port}/v1/worker", TOKEN, ssl_context=None, timeout=5)


async def test_wss_goes_through_tls_and_checks_the_certificate(raw_tls, ca):
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    socket, peer = await _open(raw_tls, trusting)
    socket.send_text(b'{"over":"tls"}')
    await socket.flush()
    with trio.fail_after(5):
        assert await peer.get_message() == '{"over":"tls"}'
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.send_message, "x" * 100_000)
        assert await _messages(socket, 1) == [b"x" * 100_000]
    await socket.close(2)
    with pytest.raises(SocketClosed, match="handshake"):  # the system's CAs do not know this one
        await connect(raw_tls.url(), TOKEN, ssl_context=ssl.create_default_context(), timeout=5)


async def test_a_worker_drops_a_server_that_stops_answering_pings(raw, run_worker):
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext) -> dict:
        return {}

    worker = await run_worker(raw.url(), registry, token="t", wait=False)
    first = await raw.next_peer()
    first.answer_pings = False
    peer = Peer(first)  # type: ignore[arg-type]  # the same get_message/send_message pair
    hello = await peer.recv()
    body = peer.state()
    body.update(instance_id=body.pop("instance_id"), instance_secret=new_secret(), lease_ttl_ms=800,
                server_time=now())  # pings every 0.2 s, a pong due within 0.4 s
    await peer.send(peer.frame("worker.welcome", body, reply_to=hello["id"]))
    await peer.accept_capacity()
    second = await raw.next_peer(timeout=5)  # the worker gave up on the first and came back
    assert first.pings >= 1
    with trio.fail_after(5):
        await first.gone.wait()
    assert first.close_code is None and second is not first  # no goodbye to a peer that does not answer
    assert worker.stats.connects == 1  # the second session has not been welcomed


async def test_a_worker_runs_tasks_over_wss(start_service, run_worker, client, ca, tmp_path):
    cert = ca.issue_cert("localhost")
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    (tmp_path / "cert.pem").write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    service = await start_service(tls_cert=tmp_path / "cert.pem", tls_key=tmp_path / "key.pem")
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext) -> dict:
        return {"invoice": task.payload["invoice"], "blob": "y" * 100_000}

    worker = await run_worker(f"wss://localhost:{service.worker_port}/v1/worker", registry, ssl_context=trusting)
    tasks = [await in_thread(client.submit, "billing", "invoice.send", {"invoice": n}) for n in range(3)]
    for n, task in enumerate(tasks):
        view = await wait_state(client, task["task_id"], "SUCCEEDED")
        assert view["outcome"]["result"]["invoice"] == n
    # The row says SUCCEEDED once the finish committed; the worker counts it when the ack is read.
    await wait_for(lambda: worker.stats.succeeded == 3, what="the three finish acks read by the worker")
