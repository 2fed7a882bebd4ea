"""The same contract over WSS (a trustme CA, the server's cert and key given to the service)."""

from __future__ import annotations

import pytest

import harness


@pytest.fixture
async def wss(start_service, tls):
    cert, key, context = tls
    service = await start_service(tls_cert=cert, tls_key=key)
    return service, context


async def test_refusals_over_tls_are_plain_http(wss, worker_token):
    service, context = wss
    assert (await harness.rejected(service.worker_port, None, ssl_context=context)).status_code == 401
    assert (await harness.rejected(service.worker_port, worker_token, ssl_context=context,
                                   subprotocols=())).status_code == 400
    assert (await harness.rejected(service.worker_port, worker_token, ssl_context=context,
                                   path="/nope")).status_code == 404


async def test_plain_ws_to_a_wss_endpoint_gets_no_http_answer(wss, worker_token):
    """The endpoint speaks TLS only: a cleartext upgrade request is never answered in HTTP."""
    import trio

    service, _ = wss
    stream = await trio.open_tcp_stream("127.0.0.1", service.worker_port)
    await stream.send_all(f"GET {harness.PATH} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
                          f"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                          f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {harness.SUBPROTOCOL}\r\n"
                          f"Authorization: Bearer {worker_token}\r\n\r\n".encode())
    received = b""
    with trio.move_on_after(0.5):
        try:
            while chunk := await stream.receive_some(4096):
                received += chunk
        except trio.BrokenResourceError:
            pass  # reset: no answer either
    assert not received.startswith(b"HTTP/"), received
    await stream.aclose()


async def test_drop_and_resume_over_wss(wss, connect, worker_token, client):
    service, context = wss
    old = await connect(service, worker_token, name="old", ssl_context=context)
    await old.register(["billing"], capacity=1)
    client.submit("billing", "invoice.send", {"payload": "x" * 200_000})
    held = await old.expect_assign()
    assert len(held.task["payload"]["payload"]) == 200_000
    await old.ok(old.start(held))
    await old.drop()
    new = await connect(service, worker_token, name="new", ssl_context=context)
    await new.register(["billing"], capacity=1)
    await new.ok(new.resume(old, held))
    await new.ok(new.finish(new.live[held.lease_id], result={"r": "y" * 200_000}))
    assert client.get(held.task_id)["state"] == "SUCCEEDED"


@pytest.mark.parametrize("frame, code", [(b"\x00binary", 1003), ("x" * (512 * 1024 + 1), 1009)])
async def test_transport_closes_over_wss(wss, connect, worker_token, frame, code):
    service, context = wss
    w = await connect(service, worker_token, ssl_context=context)
    await w.register(["billing"])
    await w.send_text(frame, answer_id=None)
    await w.expect_close(code)


async def test_fatal_protocol_error_over_wss(wss, connect, worker_token):
    service, context = wss
    w = await connect(service, worker_token, ssl_context=context)
    await w.register(["billing"])
    await w.send_text('{"protocol_version":"1","id":"a","id":"b"}', answer_id=None)
    await w.expect_error("invalid_json", fatal=True, reply_to=harness.ABSENT)
    await w.expect_close(1007)
