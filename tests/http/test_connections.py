"""A refused or stalled request never holds a server socket: counted from /proc, on real connections."""

from __future__ import annotations

import logging
import socket
import time

import pytest
import trio

from socket_support import open_server_sockets, settle_to

OVERSIZED = 600 * 1024


def _oversized_post(port: int, token: str) -> bytes:
    """A 600 KiB body with Content-Length, sent in full; the answer, read until the server closes."""
    head = (f"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {token}\r\nContent-Length: {OVERSIZED}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head)
        try:
            s.sendall(b"x" * OVERSIZED)
        except OSError:
            pass  # the server answered and closed before taking it all
        answer = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            answer += chunk
        return answer


async def test_oversized_bodies_are_refused_and_their_connections_closed(http, tokens, caplog):
    caplog.set_level(logging.INFO, logger="pulse_trio.http.access")
    baseline = open_server_sockets(http.port)
    async with trio.open_nursery() as nursery:
        answers: list[bytes] = []

        async def one() -> None:
            answers.append(await trio.to_thread.run_sync(_oversized_post, http.port, tokens["operator"]))

        for _ in range(10):
            nursery.start_soon(one)
    assert len(answers) == 10
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert b"connection: close" in answer.lower() and b'"request_too_large"' in answer
    assert await settle_to(http.port, baseline, within=5) == baseline
    refused = [r for r in caplog.records if r.name == "pulse_trio.http.access" and getattr(r, "status", 0) == 413]
    assert len(refused) == 10


def _read_until_closed(s: socket.socket) -> bytes:
    answer = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            return answer
        answer += chunk
    return answer


@pytest.fixture
async def quick(start_service):
    """A service whose HTTP timeouts are short, so that the bounds are seen quickly."""
    return await start_service(http_idle_timeout=0.5, http_body_timeout=0.5)


async def test_a_body_that_stalls_is_answered_408_and_its_connection_closed(quick, token_factory):
    token = token_factory("operator")
    port = quick.http_port
    baseline = open_server_sockets(port)

    def stalled() -> tuple[bytes, float]:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(f"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      f"Authorization: Bearer {token}\r\nContent-Length: 100\r\n\r\n{{\"queue\"".encode())
            started = time.monotonic()
            answer = _read_until_closed(s)
            return answer, time.monotonic() - started

    answer, took = await trio.to_thread.run_sync(stalled)
    assert answer.startswith(b"HTTP/1.1 408") and b'"request_timeout"' in answer, answer[:300]
    assert b"connection: close" in answer.lower()
    assert took < 5, took
    assert await settle_to(port, baseline, within=3) == baseline


async def test_a_body_that_trickles_is_cut_off_at_the_body_timeout(quick, token_factory):
    token = token_factory("operator")
    port = quick.http_port

    def trickle() -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(f"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      f"Authorization: Bearer {token}\r\nContent-Length: 1000\r\n\r\n".encode())
            s.settimeout(0.1)
            for _ in range(100):  # a byte every 0.1 s: never silent for long, never done
                try:
                    s.sendall(b" ")
                    answer = s.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return b""
                s.settimeout(10)
                return answer + _read_until_closed(s)
            return b"no answer"

    answer = await trio.to_thread.run_sync(trickle)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:300]
    assert await settle_to(port, 0, within=3) == 0


async def test_headers_that_never_end_are_cut_off_at_the_idle_timeout(quick):
    port = quick.http_port

    def slowloris() -> float:
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            s.settimeout(0.1)
            for n in range(100):  # one header line every 0.1 s, never the blank line
                try:
                    s.sendall(b"X-Slow-%d: 1\r\n" % n)
                    if s.recv(65536) == b"":
                        return time.monotonic() - started
                except TimeoutError:
                    continue
                except OSError:
                    return time.monotonic() - started
        return float("inf")

    took = await trio.to_thread.run_sync(slowloris)
    assert took < 3, took
    assert await settle_to(port, 0, within=3) == 0


async def test_an_idle_keep_alive_connection_is_closed_at_the_idle_timeout(quick):
    port = quick.http_port

    def idle() -> tuple[bytes, float]:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            first = s.recv(65536)
            started = time.monotonic()
            rest = _read_until_closed(s)  # nothing more is asked: the server ends it
            return first + rest, time.monotonic() - started

    answer, took = await trio.to_thread.run_sync(idle)
    assert answer.startswith(b"HTTP/1.1 200") and took < 3, (answer[:100], took)
    assert await settle_to(port, 0, within=3) == 0


async def test_a_request_whose_body_was_read_keeps_its_connection(http, tokens):
    """Closing is for answers given before the body arrived: a normal request keeps keep-alive."""

    def two_on_one() -> list[int]:
        import http.client as httpclient
        conn = httpclient.HTTPConnection("127.0.0.1", http.port, timeout=10)
        statuses = []
        try:
            for _ in range(2):
                conn.request("POST", "/v1/tasks", body=b'{"queue":"billing","kind":"k"}',
                             headers={"Authorization": f"Bearer {tokens['operator']}",
                                      "Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                assert response.getheader("connection") is None
                statuses.append(response.status)
            return statuses
        finally:
            conn.close()

    assert await trio.to_thread.run_sync(two_on_one) == [201, 201]


async def test_a_request_refused_before_its_body_is_read_ends_the_connection(http):
    """401 (no token) on a POST with an unread body: the same close as 413."""
    baseline = open_server_sockets(http.port)
    answers = await trio.to_thread.run_sync(lambda: [_oversized_post(http.port, "") for _ in range(3)])
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 401") and b"connection: close" in answer.lower(), answer[:200]
    assert await settle_to(http.port, baseline, within=3) == baseline


async def test_a_tls_connection_that_never_says_hello_is_closed_at_the_idle_timeout(start_service, tls):
    """Over HTTPS the idle clock runs from the accept too: silence before the TLS handshake is idle as well."""
    cert, key, _ = tls
    service = await start_service(http_idle_timeout=0.5, http_body_timeout=0.5, tls_cert=cert, tls_key=key)
    port = service.http_port

    def silent() -> float:
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            try:
                s.recv(65536)  # nothing is sent: the server ends it
            except (ConnectionResetError, TimeoutError):
                pass
        return time.monotonic() - started

    took = await trio.to_thread.run_sync(silent)
    assert took < 3, took
    assert await settle_to(port, 0, within=3) == 0


def _h2_get(port: int, path: bytes, token: str) -> bytes | None:
    """One HTTP/2 GET over cleartext (prior knowledge), ``path`` sent as raw octets: the status, or None if the
    connection ended without an answer."""
    import h2.config
    import h2.connection
    import h2.events

    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding=None))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        conn.initiate_connection()
        conn.send_headers(1, [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"127.0.0.1"),
                              (b":path", path), (b"authorization", f"Bearer {token}".encode())], end_stream=True)
        s.sendall(conn.data_to_send())
        status = None
        while chunk := s.recv(65536):
            for event in conn.receive_data(chunk):
                if isinstance(event, h2.events.ResponseReceived):
                    status = dict(event.headers)[b":status"]
                elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                    return status
            s.sendall(conn.data_to_send())
        return None


async def test_an_http2_path_outside_ascii_ends_its_connection_not_the_server(http, tokens, caplog):
    """HTTP/2 carries ``:path`` as octets and hypercorn reads it as ASCII: the failure is the connection's own.

    It once went up through the accept loop and ended the serve process: one unauthenticated request.
    """
    caplog.set_level(logging.WARNING, logger="pulse_trio.http")
    token = tokens["operator"]
    for _ in range(2):
        assert await trio.to_thread.run_sync(_h2_get, http.port, b"/v1/tasks/tsk_\xff", token) is None
        assert await trio.to_thread.run_sync(_h2_get, http.port, b"/v1/tasks", token) == b"200"
        assert (await http.get("/healthz")).status == 200
    assert any("connection failed below the API" in r.getMessage() for r in caplog.records)
    # The query string is bytes to hypercorn: raw UTF-8 there reaches the API, which reads it as UTF-8.
    raw = "/v1/tasks?idempotency_key=café".encode()
    assert await trio.to_thread.run_sync(_h2_get, http.port, raw, token) == b"200"


async def test_producer_clients_share_one_default_tls_context_and_it_still_verifies(start_service, tls, token_factory):
    """docs/worker.md ("verify="): a client left to verify with the default CA store takes the process's one
    context, which still refuses a certificate that store does not vouch for; a context given is used as given."""
    import httpx

    from pulse_trio.producer import Client
    from pulse_trio.producer.clients import default_tls

    cert, key, trusting = tls
    service = await start_service(tls_cert=cert, tls_key=key)
    url = f"https://127.0.0.1:{service.http_port}"
    token = token_factory("producer", ["billing"])

    def calls() -> dict:
        with Client(url, token) as first, Client(url, token) as second:
            assert first._http._transport._pool._ssl_context is second._http._transport._pool._ssl_context
            assert first._http._transport._pool._ssl_context is default_tls()
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                first.list(queue="billing")
        with Client(url, token, verify=trusting) as trusted:
            assert trusted._http._transport._pool._ssl_context is trusting
            return trusted.list(queue="billing")

    assert (await trio.to_thread.run_sync(calls))["tasks"] == []
