"""Abuse that the server must shrug off: slow-loris handshakes, guessed leases, replays after finish."""

from __future__ import annotations

import json

import trio
import trio_websocket

from pulse_trio.client import Client


async def _session(port: int, token: str, nursery: trio.Nursery):
    ws = await trio_websocket.connect_websocket(
        nursery, "127.0.0.1", port, "/v1/worker", use_ssl=False, subprotocols=["pulse.worker.v1"],
        extra_headers=[(b"authorization", f"Bearer {token}".encode())])
    await ws.send_message(json.dumps({"protocol_version": "1", "type": "worker.hello", "id": "h",
                                      "body": {"worker_name": "abuse", "subscriptions": [{"queue": "q"}]}}))
    welcome = json.loads(await ws.get_message())
    return ws, welcome["session_id"]


async def test_slow_loris_handshakes_are_dropped_and_others_keep_working(start_service, token_factory, nursery):
    service = await start_service(hello_timeout=0.5)
    token = token_factory("worker")
    streams = []
    for _ in range(20):  # each sends half a request line, then nothing
        stream = await trio.open_tcp_stream("127.0.0.1", service.worker_port)
        await stream.send_all(b"GET /v1/worker HTTP/1.1\r\nHost: x\r\n")
        streams.append(stream)
    ws, session_id = await _session(service.worker_port, token, nursery)  # a real worker still gets in
    with trio.fail_after(10):
        for stream in streams:
            while await stream.receive_some(4096):
                pass  # the server closes each one: receive_some returns b"" at EOF
    await ws.send_message(json.dumps({"protocol_version": "1", "type": "worker.capacity", "id": "c",
                                      "session_id": session_id,
                                      "body": {"sequence": "1", "capacity": 0, "drain": False}}))
    assert json.loads(await ws.get_message())["type"] == "ack"


async def test_guessed_lease_ids_and_replays_after_finish_change_nothing(db, start_service, token_factory, nursery):
    service = await start_service()
    ws, sid = await _session(service.worker_port, token_factory("worker"), nursery)
    await ws.send_message(json.dumps({"protocol_version": "1", "type": "worker.capacity", "id": "c",
                                      "session_id": sid, "body": {"sequence": "1", "capacity": 1, "drain": False}}))
    await ws.get_message()
    with Client(db) as client:
        task = client.submit("q", "k")
    offer = json.loads(await ws.get_message())["body"]["lease"]
    ids = {k: offer[k] for k in ("task_id", "lease_id", "lease_secret")}

    async def command(type_, frame_id, body):
        await ws.send_message(json.dumps({"protocol_version": "1", "type": type_, "id": frame_id,
                                          "session_id": sid, "body": body}))
        return json.loads(await ws.get_message())

    guessed = dict(ids, lease_secret="A" * 42 + "E")
    assert (await command("task.start", "g1", {**guessed, "revision": "1"}))["error"]["code"] == "lease_not_found"
    started = await command("task.start", "s1", {**ids, "revision": "1"})
    finish = {**ids, "revision": started["body"]["lease"]["revision"], "status": "SUCCEEDED", "result": {"ok": 1}}
    assert "lease" not in (await command("task.finish", "f1", finish))["body"]
    replay = await command("task.finish", "f2", finish)
    assert replay["body"]["receipt"]["duplicate"] is True and "lease" not in replay["body"]
    renew = await command("task.renew", "r1", {**ids, "revision": finish["revision"]})
    assert renew["type"] == "error"  # a receipt never revives execution
    other = await command("task.finish", "f3", {**finish, "result": {"ok": 2}})
    assert other["error"]["code"] == "revision_conflict"
    with Client(db) as client:
        shown = client.get(task["task_id"])
    assert shown["state"] == "SUCCEEDED" and shown["outcome"]["result"] == {"ok": 1}


async def test_the_same_command_sent_twice_at_once_is_answered_twice_and_applied_once(db, start_service,
                                                                                     token_factory, nursery):
    # Both copies can reach the command batcher together; one batch never holds
    # two commands of one lease, so the second is answered from the receipt.
    service = await start_service()
    ws, sid = await _session(service.worker_port, token_factory("worker"), nursery)
    await ws.send_message(json.dumps({"protocol_version": "1", "type": "worker.capacity", "id": "c",
                                      "session_id": sid, "body": {"sequence": "1", "capacity": 1, "drain": False}}))
    await ws.get_message()
    with Client(db) as client:
        client.submit("q", "k")
    offer = json.loads(await ws.get_message())["body"]["lease"]
    body = {k: offer[k] for k in ("task_id", "lease_id", "lease_secret")} | {"revision": "1"}
    for frame_id in ("s1", "s2"):
        await ws.send_message(json.dumps({"protocol_version": "1", "type": "task.start", "id": frame_id,
                                          "session_id": sid, "body": body}))
    answers = {}
    with trio.fail_after(10):
        while len(answers) < 2:
            frame = json.loads(await ws.get_message())
            answers[frame["reply_to"]] = frame
    receipts = sorted(a["body"]["receipt"]["duplicate"] for a in answers.values())
    assert receipts == [False, True]
    assert {a["body"]["lease"]["revision"] for a in answers.values()} == {"2"}
