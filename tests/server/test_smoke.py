"""The service answers the handshake and runs one task through offer, start and finish."""

from __future__ import annotations

import json

import trio_websocket

from pulse_trio.client import Client


async def _hello(ws, queues=("billing",)):
    await ws.send_message(json.dumps({"protocol_version": "1", "type": "worker.hello", "id": "h1", "body": {
        "worker_name": "smoke", "subscriptions": [{"queue": q} for q in queues]}}))
    return json.loads(await ws.get_message())


async def test_one_task_end_to_end(db, start_service, token_factory):
    service = await start_service()
    token = token_factory("worker", ["billing"])
    async with trio_websocket.open_websocket("127.0.0.1", service.worker_port, "/v1/worker", use_ssl=False,
                                             subprotocols=["pulse.worker.v1"],
                                             extra_headers=[(b"authorization", f"Bearer {token}".encode())]) as ws:
        welcome = await _hello(ws)
        assert welcome["type"] == "worker.welcome" and welcome["reply_to"] == "h1"
        sid = welcome["session_id"]
        await ws.send_message(json.dumps({"protocol_version": "1", "type": "worker.capacity", "id": "c1",
                                          "session_id": sid, "body": {"sequence": "1", "capacity": 1,
                                                                      "drain": False}}))
        assert json.loads(await ws.get_message())["body"]["capacity"] == 1
        with Client(db) as client:
            task = client.submit("billing", "invoice.send", {"invoice": 991})
        offer = json.loads(await ws.get_message())
        assert offer["type"] == "task.assign" and offer["body"]["task"]["task_id"] == task["task_id"]
        lease = offer["body"]["lease"]
        ids = {k: lease[k] for k in ("task_id", "lease_id", "lease_secret")}
        await ws.send_message(json.dumps({"protocol_version": "1", "type": "task.start", "id": "s1",
                                          "session_id": sid, "body": {**ids, "revision": "1"}}))
        started = json.loads(await ws.get_message())
        assert started["body"]["lease"]["state"] == "RUNNING"
        await ws.send_message(json.dumps({"protocol_version": "1", "type": "task.finish", "id": "f1",
                                          "session_id": sid, "body": {**ids, "revision": "2",
                                                                      "status": "SUCCEEDED",
                                                                      "result": {"sent": True}}}))
        finished = json.loads(await ws.get_message())
        assert finished["type"] == "ack" and "lease" not in finished["body"]
    with Client(db) as client:
        shown = client.get(task["task_id"])
    assert shown["state"] == "SUCCEEDED" and shown["outcome"]["result"] == {"sent": True}
