"""Refused worker handshakes are counted by reason in /metrics and logged, bounded, without the token.

docs/operations.md §6 (the counter) and protocol.md §1.1 (the reasons): an
operator sees a fleet with a stale or revoked token, or someone guessing
tokens, without the log growing with the flood.
"""

from __future__ import annotations

import hashlib
import logging

import trio

import harness
from http_support import Http
from metrics_support import exposition_samples
from pulse_trio.server.handshake_refusals import LOG_INTERVAL_S, HandshakeRefusals
from sql_support import rows

FAMILY = "pulse_worker_handshakes_refused_total"
GUESSES = 12
OUTAGE_HANDSHAKES = 3


def _refused(samples) -> dict[str, float]:
    return {dict(labels)["reason"]: value for (name, labels), value in samples.items() if name == FAMILY}


def _lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "pulse_trio.connection" and "handshake refused" in r.getMessage()]


async def _raw(port: int, request: bytes) -> bytes:
    """Send ``request`` on a plain TCP connection; what the server answers before it closes."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        answer = b""
        with trio.fail_after(harness.DEFAULT_TIMEOUT):
            while chunk := await stream.receive_some(65536):
                answer += chunk
        return answer


async def test_each_refusal_is_counted_by_its_reason_and_logged_once_without_the_token(
        start_service, connect, token_factory, revoke, worker_token, db, caplog):
    caplog.set_level(logging.INFO, logger="pulse_trio")
    service = await start_service()
    port = service.worker_port
    producer = token_factory("producer", ["billing"])
    revoked = token_factory("worker", ["billing"])
    revoke(revoked)
    guesses = [f"pt_guess{n:02d}" + "x" * 35 for n in range(GUESSES)]
    before = len(caplog.records)
    for guess in guesses:  # a flood of one reason
        assert (await harness.rejected(port, guess)).status_code == 401
    flood = [r for r in caplog.records[before:] if r.levelno >= logging.INFO]
    assert [r.getMessage() for r in flood] == [_lines(caplog)[0].getMessage()]  # ours, once; not the codec's each
    assert (await harness.rejected(port, None)).status_code == 401
    assert (await harness.rejected(port, None, headers=[(b"authorization", b"Basic dXNlcjpwYXNz")])).status_code == 401
    assert (await harness.rejected(port, producer)).status_code == 401
    assert (await harness.rejected(port, revoked)).status_code == 401
    assert (await harness.rejected(port, worker_token, path="/v1/other")).status_code == 404
    assert (await harness.rejected(port, worker_token, subprotocols=())).status_code == 400
    assert await _raw(port, b"NOT HTTP AT ALL\r\n\r\n") == b""  # the codec closes without an answer
    plain_get = (f"GET /v1/worker HTTP/1.1\r\nHost: x\r\nSec-WebSocket-Protocol: {harness.SUBPROTOCOL}\r\n"
                 f"Authorization: Bearer {worker_token}\r\n\r\n").encode()
    assert (await _raw(port, plain_get)).startswith(b"HTTP/1.1 426")  # a live token, but no upgrade
    rows(db, "RENAME TABLE api_tokens TO api_tokens_away")
    try:
        before = len(caplog.records)
        for _ in range(OUTAGE_HANDSHAKES):  # a lookup that fails, the database answering: not an outage
            assert (await harness.rejected(port, worker_token)).status_code == 503
        said = [r for r in caplog.records[before:] if r.levelno >= logging.WARNING]
        errors = [r for r in said if r.getMessage() == "worker token not checked"]
        assert len(errors) == OUTAGE_HANDSHAKES  # each says what failed, with its traceback
        assert all(r.exc_info and "api_tokens" in str(r.exc_info[1]) for r in errors)
        assert [r.getMessage() for r in said if r not in errors] == [_lines(caplog)[-1].getMessage()]
    finally:
        rows(db, "RENAME TABLE api_tokens_away TO api_tokens")
    accepted = await connect(service, worker_token)  # an accepted handshake is neither counted nor logged
    assert (await accepted.hello(["billing"]))["type"] == "worker.welcome"

    samples = exposition_samples((await Http(service.http_port).get("/metrics")).body)
    assert _refused(samples) == {"unknown_token": GUESSES, "no_token": 2, "other_role": 1, "revoked_token": 1,
                                 "wrong_path": 1, "no_subprotocol": 1, "bad_request": 2,
                                 "storage_unavailable": OUTAGE_HANDSHAKES}

    lines = _lines(caplog)
    by_reason = {r.reason: r for r in lines}
    assert len(lines) == len(by_reason) == 8, [r.getMessage() for r in lines]  # one per reason, however many came
    for record in lines:
        assert record.peer.startswith("127.0.0.1:") and record.peer in record.getMessage()
        assert record.reason in record.getMessage()
    everything = caplog.text + "".join(repr(vars(r)) for r in caplog.records)
    for token in [*guesses, producer, revoked, worker_token]:
        assert token not in everything
        assert token[3:20] not in everything
        assert hashlib.sha256(token.encode()).hexdigest()[:16] not in everything


def test_a_flood_gets_one_line_per_reason_per_interval_and_the_next_says_how_many_it_left_out(caplog):
    caplog.set_level(logging.INFO, logger="pulse_trio")
    counted: list[str] = []
    refusals = HandshakeRefusals(counted.append)
    for n in range(50):
        refusals.refused("unknown_token", "10.0.0.7:5000", now=100.0 + n * 0.1)
    refusals.refused("no_token", "10.0.0.8:5000", now=101.0)  # another reason has its own interval
    assert counted == ["unknown_token"] * 50 + ["no_token"]
    assert [(r.reason, r.suppressed) for r in _lines(caplog)] == [("unknown_token", 0), ("no_token", 0)]
    refusals.refused("unknown_token", "10.0.0.9:5000", now=100.0 + LOG_INTERVAL_S)
    last = _lines(caplog)[-1]
    assert (last.reason, last.suppressed, last.peer) == ("unknown_token", 49, "10.0.0.9:5000")
    assert "49 more" in last.getMessage() and last.levelno == logging.WARNING
