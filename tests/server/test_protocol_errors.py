"""Frame-level errors: JSON, version, session id, message ids, sizes, binary frames, repeated invalid frames."""

from __future__ import annotations

import json

import pytest
import trio
from websockets.frames import Frame, Opcode

import harness

OTHER_SESSION = "ses_01KBFEY3G0B1BKY7SP31HF1KWB"


async def registered(start_service, connect, worker_token, **settings):
    service = await start_service(**settings)
    w = await connect(service, worker_token)
    await w.register(["billing"])
    return w


@pytest.mark.parametrize("text", [
    '{"protocol_version":"1","type":"worker.capacity","id":"c1","id":"c2"}',  # duplicate key
    '{"protocol_version":"1","type":"worker.capacity","id":"c1","body":{"capacity":NaN}}',
    '{"protocol_version":"1","type":"worker.capacity","id":"c1","body":{"capacity":Infinity}}',
    '{"protocol_version":"1","type":"worker.capacity","id":"\\ud800"}',  # lone surrogate
    '{"protocol_version":"1","type":"worker.capacity","id":"c1","body":' + "[" * 32 + "]" * 32 + "}",  # depth 33
    '{"protocol_version":"1",',
    "[]x",
    "",
    '"just a string"  extra',
])
async def test_invalid_json_is_fatal_without_reply_to_and_closes(start_service, connect, worker_token, text):
    w = await registered(start_service, connect, worker_token)
    await w.send_text(text, answer_id=None)
    frame = await w.expect_error("invalid_json", fatal=True, reply_to=harness.ABSENT)
    assert frame["session_id"] == w.session_id
    await w.expect_close(1007)


async def test_invalid_json_before_hello_has_no_session_id(start_service, connect, worker_token):
    service = await start_service()
    w = await connect(service, worker_token)
    await w.send_text('{"a":1,"a":2}', answer_id=None)
    frame = await w.expect_error("invalid_json", fatal=True, reply_to=harness.ABSENT)
    assert "session_id" not in frame
    await w.expect_close(1007)


@pytest.mark.parametrize("text", ["[]", "1", '"x"', "null", "{}"])
async def test_json_that_is_not_a_versioned_object_is_unsupported_version(start_service, connect, worker_token,
                                                                          text):
    """docs/protocol.md §9.3: "not the string 1" is read literally, ahead of invalid_frame."""
    w = await registered(start_service, connect, worker_token)
    await w.send_text(text, answer_id=None)
    await w.expect_error("unsupported_version", fatal=True, reply_to=harness.ABSENT)
    await w.expect_close(1008)


@pytest.mark.parametrize("version", [None, 1, "1.0", "2"])
async def test_a_missing_or_other_version_is_unsupported_version_with_reply_to(start_service, connect,
                                                                               worker_token, version):
    w = await registered(start_service, connect, worker_token)
    frame = w.frame("worker.capacity", {"sequence": "1", "capacity": 1, "drain": False}, id="v2")
    if version is None:
        del frame["protocol_version"]
    else:
        frame["protocol_version"] = version
    await w.send_text(json.dumps(frame))
    await w.expect_error("unsupported_version", fatal=True, reply_to="v2")
    await w.expect_close(1008)


@pytest.mark.parametrize("session_id", [None, OTHER_SESSION])
async def test_session_mismatch_is_fatal(start_service, connect, worker_token, session_id):
    w = await registered(start_service, connect, worker_token)
    frame = w.frame("worker.capacity", {"sequence": "1", "capacity": 1, "drain": False}, id="c9",
                    session_id=session_id)
    await w.send_text(json.dumps(frame))
    error = await w.expect_error("session_mismatch", fatal=True, reply_to="c9")
    assert error["session_id"] == w.session_id
    await w.expect_close(1008)


async def test_session_mismatch_wins_over_a_schema_violation(start_service, connect, worker_token):
    w = await registered(start_service, connect, worker_token)
    bad = {"protocol_version": "1", "type": "worker.capacity", "id": "c9", "session_id": OTHER_SESSION,
           "body": {"capacity": "lots"}}
    await w.send_text(json.dumps(bad))
    await w.expect_error("session_mismatch", fatal=True, reply_to="c9")
    await w.expect_close(1008)


async def test_duplicate_message_id_while_pending_and_reuse_after_the_answer(start_service, connect, worker_token,
                                                                            client):
    service = await start_service()
    w = await connect(service, worker_token)
    await w.register(["billing"], capacity=1)
    client.submit("billing", "invoice.send", {})
    held = await w.expect_assign()
    # Two lease commands with one id, sent back to back: the second arrives while the first is pending.
    await w.send(w.frame("task.start", held.body(), id="dup"))
    await w.send(w.frame("task.renew", held.body(), id="dup"))
    answers = [await w.reply("dup"), await w.reply("dup")]
    kinds = sorted(a["type"] for a in answers)
    assert kinds == ["ack", "error"], answers
    error = next(a for a in answers if a["type"] == "error")
    assert (error["error"]["code"], error["error"]["fatal"]) == ("duplicate_message_id", False)
    # Once answered, the id may be used again.
    reply = await w.request("task.renew", held.body(), id="dup")
    assert reply["type"] == "ack", reply


async def test_binary_frame_closes_with_1003(start_service, connect, worker_token):
    w = await registered(start_service, connect, worker_token)
    await w.send_text(b'{"protocol_version":"1"}', answer_id=None)
    await w.expect_close(1003)


async def test_frame_over_512_kib_closes_with_1009(start_service, connect, worker_token):
    w = await registered(start_service, connect, worker_token)
    await w.send_text("x" * (512 * 1024 + 1), answer_id=None)
    await w.expect_close(1009)


async def test_frame_over_512_kib_of_utf8_but_fewer_characters_closes_with_1009(start_service, connect,
                                                                                worker_token, client):
    w = await registered(start_service, connect, worker_token)
    frame = w.frame("worker.capacity", {"sequence": "1", "capacity": 1, "drain": False}, id="big")
    text = json.dumps(frame, ensure_ascii=False)[:-1] + ',"pad":"' + "é" * (300 * 1024) + '"}'
    assert len(text) < 512 * 1024 < len(text.encode())
    await w.send_text(text, answer_id=None)
    await w.expect_close(1009)


async def test_a_frame_of_exactly_512_kib_is_read(start_service, connect, worker_token):
    w = await registered(start_service, connect, worker_token)
    frame = w.frame("worker.capacity", {"sequence": "1", "capacity": 1, "drain": False}, id="edge")
    head = json.dumps(frame)[:-1] + ',"pad":"'
    text = head + "x" * (512 * 1024 - len(head) - 2) + '"}'
    assert len(text.encode()) == 512 * 1024
    await w.send_text(text)
    await w.expect_error("invalid_frame", fatal=False, reply_to="edge")  # read, parsed, and refused by schema


async def test_more_than_ten_invalid_frames_become_fatal(start_service, connect, worker_token):
    w = await registered(start_service, connect, worker_token)
    for i in range(10):
        frame = w.frame("worker.capacity", {"sequence": "1", "capacity": -1, "drain": False}, id=f"bad{i}")
        await w.send_text(json.dumps(frame))
        await w.expect_error("invalid_frame", fatal=False, reply_to=f"bad{i}")
    ack = await w.capacity_ok(1)  # valid frames in between do not reset the count, and still work
    assert ack["capacity"] == 1
    frame = w.frame("worker.capacity", {"sequence": "9", "capacity": -1, "drain": False}, id="bad10")
    await w.send_text(json.dumps(frame))
    await w.expect_error("invalid_frame", fatal=True, reply_to="bad10")
    await w.expect_close(1008)


@pytest.mark.parametrize("mutate", [
    lambda f: f.update(type="worker.goodbye"),
    lambda f: f.update(extra=1),
    lambda f: f.update(id="-bad"),
    lambda f: f.update(id="x" * 65),
    lambda f: f.pop("body"),
    lambda f: f["body"].update(lease_secret="A" * 44),
    lambda f: f["body"].update(lease_secret="AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQF"),  # not canonical
    lambda f: f["body"].update(task_id="tsk_01KBFEY3G0XBZ69EGN1CRY6PPI"),  # I is not Crockford
    lambda f: f["body"].update(revision="1e0"),
])
async def test_schema_and_grammar_violations_are_non_fatal_invalid_frame(start_service, connect, worker_token,
                                                                         mutate):
    w = await registered(start_service, connect, worker_token)
    frame = w.frame("task.renew", {"task_id": "tsk_01KBFEY3G0XBZ69EGN1CRY6PPB",
                                   "lease_id": "lse_01KBFEY3G05SYNQT44FQ3AKSZY",
                                   "lease_secret": "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE", "revision": "1"},
                    id="g1")
    mutate(frame)
    readable = harness.validator("messageId").is_valid(frame["id"])
    await w.send_text(json.dumps(frame), answer_id=frame["id"] if readable else None)
    error = await w.expect_error("invalid_frame", fatal=False)
    if readable:
        assert error["reply_to"] == frame["id"]
    else:
        assert "reply_to" not in error
    assert (await w.capacity_ok(1))["capacity"] == 1


async def test_pings_are_answered_and_the_session_survives(start_service, connect, worker_token):
    w = await registered(start_service, connect, worker_token, ping_interval=0.05)
    with trio.fail_after(5):
        for _ in range(10):
            await trio.sleep(0.05)
            await w.capacity_ok(1)


async def test_a_peer_that_never_answers_pings_is_dropped(start_service, worker_token):
    """A raw handshake on a socket nobody reads from afterwards: no pongs come back."""
    service = await start_service(ping_interval=0.1)
    stream, _ = await harness.raw_upgrade(service.worker_port, worker_token)
    with trio.fail_after(10):
        while len(service.connections) == 0:
            await trio.sleep(0.01)
        # Read and discard (pings arrive) but never answer; the server gives up on us.
        while True:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            if b"\x88" in chunk:  # a close frame
                break
    await stream.aclose()
    with trio.fail_after(10):
        while service.connections:
            await trio.sleep(0.01)


async def test_a_peer_that_pings_but_never_reads_is_dropped_before_its_pongs_pile_up(start_service, worker_token):
    """Each ping read queues a pong while the writer waits on a full socket; past ``CONTROL_FRAMES``, a drop."""
    from pulse_trio.server.wire import CONTROL_FRAMES, CONTROL_PAYLOAD_BYTES, RECEIVE_CHUNK

    service = await start_service()
    peer = _PeerThatNeverClosesBack(*await harness.raw_upgrade(service.worker_port, worker_token))
    with trio.fail_after(10):
        await peer.request({"protocol_version": "1", "type": "worker.hello", "id": "h1",
                            "body": {"worker_name": "flood", "subscriptions": [{"queue": "billing"}]}})
    (connection,) = service.connections
    largest = 2 + CONTROL_PAYLOAD_BYTES
    bound = (CONTROL_FRAMES + RECEIVE_CHUNK // largest + 1) * largest  # checked after each chunk read
    burst = _masked(Opcode.PING, b"p" * CONTROL_PAYLOAD_BYTES) * 4096  # about 0.5 MiB of pings a write
    most = 0
    with trio.move_on_after(20):
        try:
            for _ in range(256):  # up to 128 MiB; the peer never reads a byte
                await peer.stream.send_all(burst)
                most = max(most, sum(len(chunk) for chunk in connection.ws.writes))
                if most > bound:
                    break
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
    assert most <= bound, f"the server holds {most} bytes of unsent pongs"
    with trio.fail_after(5):
        while service.connections:
            await trio.sleep(0.02)
    await peer.stream.aclose()


def _masked(opcode: Opcode, payload: bytes, *, fin: bool = True) -> bytes:
    """One client frame, masked as a client must, by ``websockets``' own serializer."""
    return Frame(opcode, payload, fin=fin).serialize(mask=True)


async def test_invalid_utf8_in_a_text_frame_closes_with_1007(start_service, connect, worker_token):
    w = await registered(start_service, connect, worker_token)
    await w.stream.send_all(_masked(Opcode.TEXT, b'{"protocol_version":"1","type":"\xff\xfe"}'))
    await w.expect_close(1007)


async def test_unsupported_version_wins_over_hello_required(start_service, connect, worker_token):
    service = await start_service()
    w = await connect(service, worker_token)
    frame = {"protocol_version": "2", "type": "worker.capacity", "id": "c1", "body": {}}
    await w.send_text(json.dumps(frame))
    error = await w.expect_error("unsupported_version", fatal=True, reply_to="c1")
    assert "session_id" not in error
    await w.expect_close(1008)


async def test_hello_with_a_session_id_is_invalid_frame(start_service, connect, worker_token):
    service = await start_service()
    w = await connect(service, worker_token)
    hello = {"protocol_version": "1", "type": "worker.hello", "id": "h0", "session_id": OTHER_SESSION,
             "body": {"worker_name": "x", "subscriptions": [{"queue": "billing"}]}}
    await w.send_text(json.dumps(hello))
    await w.expect_error("invalid_frame", fatal=False, reply_to="h0")
    await w.register(["billing"])


@pytest.mark.parametrize("subscriptions", [
    [{"queue": "billing"}] * 65,
    [{"queue": "Billing"}],
    [{"queue": "billing", "kinds": []}],
    [{"queue": "billing", "kinds": ["a", "a"]}],
    [{"queue": "billing", "extra": True}],
])
async def test_bad_subscriptions_are_invalid_frame(start_service, connect, worker_token, subscriptions):
    service = await start_service()
    w = await connect(service, worker_token)
    hello = {"protocol_version": "1", "type": "worker.hello", "id": "h0",
             "body": {"worker_name": "x", "subscriptions": subscriptions}}
    await w.send_text(json.dumps(hello))
    await w.expect_error("invalid_frame", fatal=False, reply_to="h0")


async def test_result_problems_win_over_other_schema_violations_but_not_over_session_mismatch(
        start_service, connect, worker_token):
    w = await registered(start_service, connect, worker_token)
    body = {"task_id": "tsk_01KBFEY3G0XBZ69EGN1CRY6PPB", "lease_id": "lse_01KBFEY3G05SYNQT44FQ3AKSZY",
            "lease_secret": "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE", "revision": "1",
            "status": "SUCCEEDED", "result": None, "surprise": 1}
    await w.send_text(json.dumps(w.frame("task.finish", body, id="n1")))
    await w.expect_error("invalid_result", fatal=False, reply_to="n1")
    big = body | {"result": "x" * (300 * 1024), "revision": "01"}
    await w.send_text(json.dumps(w.frame("task.finish", big, id="n2")))
    await w.expect_error("result_too_large", fatal=False, reply_to="n2")
    await w.send_text(json.dumps(w.frame("task.finish", body, id="n3", session_id=OTHER_SESSION)))
    await w.expect_error("session_mismatch", fatal=True, reply_to="n3")
    await w.expect_close(1008)


async def test_an_unmasked_client_frame_closes_with_1002(start_service, connect, worker_token):
    w = await registered(start_service, connect, worker_token)
    await w.stream.send_all(b"\x81\x02{}")  # RFC 6455 §5.1: a client MUST mask
    await w.expect_close(1002)


def _capacity_frame(w, capacity: int) -> dict:
    w.sequence += 1
    return w.frame("worker.capacity", {"sequence": str(w.sequence), "capacity": capacity, "drain": False})


async def test_fragments_and_a_ping_between_them_reach_the_session_a_few_bytes_at_a_time(
        start_service, connect, worker_token):
    """After the handshake plain frames are cut beside the codec; a fragmented message still goes through it."""
    service = await start_service()
    w = await connect(service, worker_token)
    await w.register(["billing"])
    assert [c.frames.cutting for c in service.connections] == [True]
    frame = _capacity_frame(w, 3)
    w._expect_answer(frame["id"], frame["type"], frame["body"])
    text = json.dumps(frame).encode()
    third = len(text) // 3
    wire = (_masked(Opcode.TEXT, text[:third], fin=False) + _masked(Opcode.PING, b"between")
            + _masked(Opcode.CONT, text[third:2 * third], fin=False) + _masked(Opcode.CONT, text[2 * third:]))
    for at in range(0, len(wire), 7):
        await w.stream.send_all(wire[at:at + 7])
        await trio.sleep(0)
    reply = await w.reply(frame["id"])
    assert reply["type"] == "ack" and reply["body"]["capacity"] == 3, reply
    # Two plain frames in one write, then the session still answers as usual.
    first, second = _capacity_frame(w, 4), _capacity_frame(w, 5)
    for f in (first, second):
        w._expect_answer(f["id"], f["type"], f["body"])
    await w.stream.send_all(_masked(Opcode.TEXT, json.dumps(first).encode()) + _masked(Opcode.TEXT, json.dumps(second).encode()))
    assert (await w.reply(first["id"]))["body"]["capacity"] == 4
    assert (await w.reply(second["id"]))["body"]["capacity"] == 5
    assert (await w.capacity_ok(6))["capacity"] == 6
    assert [c.frames.cutting for c in service.connections] == [True]


async def test_a_message_cut_into_many_empty_fragments_costs_the_server_no_more_than_its_frames(
        start_service, connect, worker_token):
    """Empty continuation frames add nothing to a message's size, so the codec lets any number of them through.

    Joining each to the fragments so far by copying them all made 100 000 of
    them (600 KB on the wire) hold the instance's event loop for seconds.
    """
    w = await registered(start_service, connect, worker_token, ping_interval=600)  # no ping crosses our write
    frame = _capacity_frame(w, 2)
    w._expect_answer(frame["id"], frame["type"], frame["body"])
    text = json.dumps(frame).encode()
    wire = (_masked(Opcode.TEXT, text[:1], fin=False) + _masked(Opcode.CONT, b"", fin=False) * 100_000
            + _masked(Opcode.CONT, text[1:]))
    with trio.fail_after(5):
        await w.stream.send_all(wire)
        reply = await w.reply(frame["id"])
    assert reply["type"] == "ack" and reply["body"]["capacity"] == 2, reply


class _PeerThatNeverClosesBack:
    """A hand-made WebSocket client that reads the server's close frame and never echoes it."""

    def __init__(self, stream: trio.SocketStream, received: bytes) -> None:
        self.stream, self.buffer = stream, received

    async def frame(self) -> tuple[int, bytes]:
        """The server's next frame (unmasked) as (opcode, payload)."""
        while True:
            if len(self.buffer) >= 2:
                size, head = self.buffer[1] & 0x7F, 2
                if size == 126:
                    size, head = int.from_bytes(self.buffer[2:4], "big"), 4
                elif size == 127:
                    size, head = int.from_bytes(self.buffer[2:10], "big"), 10
                if len(self.buffer) >= head + size:
                    opcode, payload = self.buffer[0] & 0x0F, self.buffer[head:head + size]
                    self.buffer = self.buffer[head + size:]
                    return opcode, payload
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                raise EOFError
            self.buffer += chunk

    async def request(self, frame: dict) -> dict:
        await self.stream.send_all(_masked(Opcode.TEXT, json.dumps(frame).encode()))
        while True:
            opcode, payload = await self.frame()
            if opcode == Opcode.TEXT:
                return json.loads(payload)

    async def ended(self, within: float, *, ping_every: float | None) -> bool:
        """Whether the server ends the connection within ``within`` seconds (the peer pinging meanwhile)."""
        with trio.move_on_after(within):
            try:
                while True:
                    if ping_every is not None:
                        await self.stream.send_all(_masked(Opcode.PING, b"still here"))
                    with trio.move_on_after(ping_every if ping_every is not None else within):
                        while await self.stream.receive_some(65536):
                            pass
                        return True
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return True
        return False


async def _closed_by_the_server(service, token: str) -> tuple[_PeerThatNeverClosesBack, str]:
    """A registered session (capacity 1) that commits a fatal error; the server's close frame has been read."""
    peer = _PeerThatNeverClosesBack(*await harness.raw_upgrade(service.worker_port, token))
    with trio.fail_after(10):
        welcome = await peer.request({"protocol_version": "1", "type": "worker.hello", "id": "h1",
                                      "body": {"worker_name": "stale", "subscriptions": [{"queue": "billing"}]}})
        session_id = welcome["session_id"]
        capacity = {"sequence": "1", "capacity": 1, "drain": False}
        ack = await peer.request({"protocol_version": "1", "type": "worker.capacity", "id": "c1",
                                  "session_id": session_id, "body": capacity})
        assert ack["type"] == "ack", ack
        error = await peer.request({"protocol_version": "1", "type": "worker.capacity", "id": "c2",
                                    "session_id": OTHER_SESSION, "body": {**capacity, "sequence": "2"}})
        assert error["error"]["code"] == "session_mismatch" and error["error"]["fatal"], error
        while (await peer.frame())[0] != Opcode.CLOSE:
            pass
    return peer, session_id


@pytest.mark.parametrize("ping_every", [None, 0.3], ids=["silent", "pinging"])
async def test_a_peer_that_never_answers_the_close_is_dropped_after_the_close_timeout(start_service, worker_token,
                                                                                     ping_every):
    """The wait for the peer's close is bounded from the server's close frame, whatever the peer sends after it."""
    from pulse_trio.server.wire import CLOSE_TIMEOUT_S

    service = await start_service()
    peer, _ = await _closed_by_the_server(service, worker_token)
    assert await peer.ended(CLOSE_TIMEOUT_S + 2, ping_every=ping_every), "the server still holds the connection"
    with trio.fail_after(5):
        while service.connections:
            await trio.sleep(0.02)
    await peer.stream.aclose()


async def test_a_session_the_server_is_closing_is_offered_no_work(start_service, connect, worker_token, client, db):
    """Once the server has begun to close a session, no claim offers it work: a task submitted meanwhile
    waits for a session that can take it, not for its offer's start timeout."""
    from sql_support import rows

    service = await start_service(poll_interval=0.05)
    healthy = await connect(service, worker_token, name="healthy")
    await healthy.register(["billing"])  # capacity 0 for now
    peer, session_id = await _closed_by_the_server(service, worker_token)
    task = client.submit("billing", "invoice.send", {})
    await trio.sleep(0.5)  # ten dispatcher polls while the closing session waits for our close
    offered = rows(db, "SELECT lease_id FROM leases WHERE task_id = %s", (task["task_id"],))
    assert offered == [], f"offered to the closing session {session_id}"
    await healthy.capacity_ok(1)
    held = await healthy.expect_assign(timeout=5)
    assert held.task_id == task["task_id"]
    await peer.stream.aclose()
