"""Protocol fuzzing against a live server.

Random and mutated frames go to a real instance over a real socket. For
each one the server must answer with an error code from the spec, an ack,
or a close with a defined close code — never crash, never hang — and a
bystander session on the same instance must keep working throughout.
The generator is seeded, so a failure is reproducible.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import trio
import trio_websocket

from pulse_trio.contract.errors import ERROR_CODES

DEFINED_CLOSE_CODES = {1000, 1001, 1003, 1007, 1008, 1009}
RANDOM_FRAMES = 400
SEED = 20261202

HELLO = {"protocol_version": "1", "type": "worker.hello", "id": "h1",
         "body": {"worker_name": "fuzz", "subscriptions": [{"queue": "q"}]}}
TYPES = ["worker.hello", "worker.capacity", "worker.resume", "task.start", "task.renew", "task.finish",
         "ack", "error", "task.assign", "", "bogus"]
ODD_VALUES = [None, 0, -1, 1.0, 1e308, True, "", "0", "01", "18446744073709551616", "x" * 70, [], {}, "\u0000"]


def random_json(rng: random.Random, depth: int = 0):
    kind = rng.randrange(7 if depth < 4 else 4)
    if kind == 0:
        return rng.choice(ODD_VALUES)
    if kind == 1:
        return rng.randint(-(2**70), 2**70)
    if kind == 2:
        return rng.random() * 10 ** rng.randint(-5, 30)
    if kind == 3:
        return "".join(chr(rng.randint(32, 0x2FFF)) for _ in range(rng.randint(0, 12)))
    if kind == 4:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(["task_id", "lease_id", "revision", "status", "result", "capacity", "queue", "k"]):
            random_json(rng, depth + 1) for _ in range(rng.randint(0, 5))}


SID = "@session@"  # replaced by the live session id when the frame is sent


def nasty_frames(rng: random.Random) -> list[str | bytes]:
    """The cases the issue names (bad JSON, depth, duplicates, surrogates, binary, …), then mutants."""
    base = {"protocol_version": "1", "type": "worker.capacity", "id": "c1", "session_id": SID,
            "body": {"sequence": "1", "capacity": 1, "drain": False}}
    frames: list[str | bytes] = [
        "", "{", "null", "[]", '"x"', "1e999", "[" * 40 + "]" * 40, '{"a":1,"a":2}', '{"x":"\\ud800"}', "NaN",
        json.dumps({**base, "protocol_version": "2"}), json.dumps({**base, "reply_to": ""}),
        json.dumps({**base, "body": {**base["body"], "capacity": 10001}}),
        json.dumps({**base, "body": {**base["body"], "sequence": "01"}}),
        json.dumps(HELLO), b"\x00\x01binary", "x" * (512 * 1024 + 1),
    ]
    for i in range(RANDOM_FRAMES):
        frame = json.loads(json.dumps(base))
        frame["id"] = f"r{i}"
        frame["type"] = rng.choice(TYPES)
        for _ in range(rng.randint(1, 3)):
            frame[rng.choice(["type", "id", "body", "protocol_version", "extra", "session_id"])] = \
                random_json(rng)
        if rng.random() < 0.3:
            frame["body"] = random_json(rng)
        frames.append(json.dumps(frame))
    return frames


class Peer:
    def __init__(self, nursery: trio.Nursery, port: int, token: str) -> None:
        self.nursery, self.port, self.token = nursery, port, token

    async def register(self) -> tuple[trio_websocket.WebSocketConnection, str]:
        ws = await trio_websocket.connect_websocket(
            self.nursery, "127.0.0.1", self.port, "/v1/worker", use_ssl=False,
            subprotocols=["pulse.worker.v1"], extra_headers=[(b"authorization", f"Bearer {self.token}".encode())])
        await ws.send_message(json.dumps(HELLO))
        welcome = json.loads(await ws.get_message())
        assert welcome["type"] == "worker.welcome"
        return ws, welcome["session_id"]


async def verdict(ws: trio_websocket.WebSocketConnection) -> tuple[str, bool]:
    """('error:<code>' | 'ack' | 'closed:<code>', connection-ended)."""
    try:
        with trio.fail_after(5):  # a hang fails the test
            frame = json.loads(await ws.get_message())
    except trio_websocket.ConnectionClosed as closed:
        code = closed.reason.code if closed.reason else None
        assert code in DEFINED_CLOSE_CODES, f"undefined close code {code}"
        return f"closed:{code}", True
    if frame["type"] == "error":
        assert frame["error"]["code"] in ERROR_CODES, frame
        return f"error:{frame['error']['code']}", frame["error"]["fatal"]
    assert frame["type"] == "ack", frame
    return "ack", False


async def bystander_works(ws: trio_websocket.WebSocketConnection, session_id: str, seq: int) -> None:
    await ws.send_message(json.dumps({"protocol_version": "1", "type": "worker.capacity", "id": f"b{seq}",
                                      "session_id": session_id,
                                      "body": {"sequence": str(seq), "capacity": 0, "drain": False}}))
    with trio.fail_after(5):
        reply = json.loads(await ws.get_message())
    assert reply["type"] == "ack" and reply["reply_to"] == f"b{seq}"


async def test_random_and_mutated_frames_get_defined_answers(start_service, token_factory, nursery):
    service = await start_service()
    peer = Peer(nursery, service.worker_port, token_factory("worker"))
    bystander, bystander_session = await peer.register()
    ws, session_id = await peer.register()
    rng = random.Random(SEED)
    seen: Counter[str] = Counter()
    frames = nasty_frames(rng)
    for tried, frame in enumerate(frames, 1):
        await ws.send_message(frame.replace(SID, session_id) if isinstance(frame, str) else frame)
        outcome, ended = await verdict(ws)
        seen[outcome] += 1
        if ended:
            with trio.move_on_after(1):
                await ws.aclose()
            ws, session_id = await peer.register()
        if tried % 50 == 0:
            await bystander_works(bystander, bystander_session, tried)
    await bystander_works(bystander, bystander_session, len(frames) + 1)
    print(f"\nfuzz: {len(frames)} frames tried; {dict(seen)}")
    assert sum(seen.values()) == len(frames)
    assert seen["error:invalid_frame"] and seen["error:invalid_json"] and any(k.startswith("closed") for k in seen)


async def test_a_flood_of_requests_is_answered_in_full_and_others_keep_working(start_service, token_factory,
                                                                               nursery):
    service = await start_service()
    peer = Peer(nursery, service.worker_port, token_factory("worker"))
    bystander, bystander_session = await peer.register()
    ws, session_id = await peer.register()
    count = 1500
    lease = {"task_id": "tsk_01ARZ3NDEKTSV4RRFFQ69G5FAV", "lease_id": "lse_01ARZ3NDEKTSV4RRFFQ69G5FAV",
             "lease_secret": "A" * 43, "revision": "1"}

    async def flood() -> None:
        for i in range(count):
            await ws.send_message(json.dumps({"protocol_version": "1", "type": "task.start", "id": f"f{i}",
                                              "session_id": session_id, "body": lease}))

    answered: Counter[str] = Counter()
    async with trio.open_nursery() as inner:
        inner.start_soon(flood)
        await bystander_works(bystander, bystander_session, 1)
        while sum(answered.values()) < count:
            with trio.fail_after(10):
                frame = json.loads(await ws.get_message())
            answered[frame["error"]["code"]] += 1
    assert answered == Counter({"lease_not_found": count})
    await bystander_works(bystander, bystander_session, 2)
