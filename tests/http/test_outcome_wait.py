"""``GET /v1/tasks/{id}/outcome?wait=S``: a long-poll the finish wakes, on this serve process or another."""

from __future__ import annotations

import time

import trio
import trio_websocket

from http_support import RawWorker
from pulse_trio.http.outcomes import OutcomeWatch
from pulse_trio.serve_process import ServeProcess
from pulse_trio.store.engine.trio_bridge import Store
from token_support import revoke_token


def waiting(nursery: trio.Nursery, http, task_id: str, token: str, *, wait: int) -> list:
    """Start a long-poll for ``task_id`` in ``nursery``; the list gets its reply."""
    answered: list = []

    async def wait_for_it() -> None:
        answered.append(await http.get(f"/v1/tasks/{task_id}/outcome?wait={wait}", token=token))

    nursery.start_soon(wait_for_it)
    return answered


async def submit(http, token, queue="billing") -> str:
    reply = await http.post("/v1/tasks", token=token, json_body={"queue": queue, "kind": "k"})
    assert reply.status == 201, reply.body
    return reply.json()["task_id"]


async def test_the_wait_answers_when_a_worker_finishes_the_task(http, tokens, open_worker, nursery):
    task_id = await submit(http, tokens["producer"])
    started = time.monotonic()
    answered = waiting(nursery, http, task_id, tokens["producer"], wait=30)
    await trio.sleep(0.3)  # the request waits
    worker = await open_worker(tokens["worker"], "billing")
    await worker.run_one({"paid": True})
    with trio.fail_after(10):
        while not answered:
            await trio.sleep(0.01)
    reply = answered[0]
    assert reply.status == 200 and time.monotonic() - started < 10
    body = reply.json()
    assert body["done"] is True and body["state"] == "SUCCEEDED" and body["outcome"]["result"] == {"paid": True}


async def test_the_wait_times_out_with_the_task_as_it_is(http, tokens):
    task_id = await submit(http, tokens["producer"])
    started = time.monotonic()
    reply = await http.get(f"/v1/tasks/{task_id}/outcome?wait=0.6", token=tokens["producer"])
    assert time.monotonic() - started >= 0.6
    assert reply.status == 200 and reply.json()["done"] is False and reply.json()["state"] == "READY"
    now = await http.get(f"/v1/tasks/{task_id}/outcome", token=tokens["producer"])  # wait=0: no waiting
    assert now.json()["done"] is False


async def test_a_cancel_through_the_api_wakes_the_wait(http, tokens, token_factory, nursery):
    task_id = await submit(http, tokens["producer"])
    answered = waiting(nursery, http, task_id, tokens["producer"], wait=30)
    await trio.sleep(0.2)
    granted = token_factory("producer", ("billing",), allow=("cancel",))
    assert (await http.post(f"/v1/tasks/{task_id}/cancel", token=granted)).status == 200
    with trio.fail_after(5):
        while not answered:
            await trio.sleep(0.01)
    assert answered[0].json()["state"] == "CANCELLED" and answered[0].json()["done"] is True


async def test_a_token_revoked_while_it_waits_gets_401_not_the_result(http, token_factory, db, open_worker,
                                                                       nursery):
    """The token is checked again when the wait ends (docs/http-api.md, Waiting for an outcome)."""
    producer = token_factory("producer", ("billing",))
    task_id = await submit(http, producer)
    answered = waiting(nursery, http, task_id, producer, wait=30)
    await trio.sleep(0.3)  # the request waits
    revoke_token(db, producer)
    worker = await open_worker(token_factory("worker", ("billing",)), "billing")
    await worker.run_one({"secret_result": 42})
    with trio.fail_after(10):
        while not answered:
            await trio.sleep(0.01)
    assert answered[0].status == 401 and answered[0].error["code"] == "unauthenticated", answered[0].body
    assert b"secret_result" not in answered[0].body


async def test_bad_waits_are_refused_like_the_rest_of_the_api(http, tokens):
    task_id = await submit(http, tokens["producer"])
    foreign = await submit(http, tokens["operator"], queue="mail")
    for query, status in (("wait=61", 400), ("wait=-1", 400), ("wait=x", 400), ("wait=1&wait=2", 400),
                          ("other=1", 400)):
        reply = await http.get(f"/v1/tasks/{task_id}/outcome?{query}", token=tokens["producer"])
        assert reply.status == status and reply.error["code"] == "invalid_request", (query, reply.body)
    assert (await http.get(f"/v1/tasks/{foreign}/outcome?wait=5", token=tokens["producer"])).status == 404
    assert (await http.get("/v1/tasks/tsk_nope/outcome?wait=5", token=tokens["producer"])).status == 404
    assert (await http.get(f"/v1/tasks/{task_id}/outcome", token=tokens["worker"])).status == 403
    assert (await http.get(f"/v1/tasks/{task_id}/outcome")).status == 401


async def test_a_finish_on_another_serve_process_wakes_the_wait(db, http, tokens, nursery):
    """The worker is on a separate `pulse-trio serve` process: only the shared probe can see its finish."""
    task_id = await submit(http, tokens["producer"])
    answered = waiting(nursery, http, task_id, tokens["producer"], wait=30)
    other = await trio.to_thread.run_sync(ServeProcess(db).start)
    try:
        ws = await trio_websocket.connect_websocket_url(
            nursery, other.worker_url, subprotocols=["pulse.worker.v1"],
            extra_headers=[(b"authorization", f"Bearer {tokens['worker']}".encode())])
        worker = RawWorker(ws)
        await worker.register("billing")
        await worker.run_one("done elsewhere")
        finished = time.monotonic()
        with trio.fail_after(10):
            while not answered:
                await trio.sleep(0.01)
        assert time.monotonic() - finished < 5  # within a probe interval or so, not the wait's 30 s
        assert answered[0].json()["done"] is True and answered[0].json()["outcome"]["result"] == "done elsewhere"
        await ws.aclose()
    finally:
        await trio.to_thread.run_sync(other.stop)


async def _thousand_tasks(http, tokens, prefix: str) -> list[str]:
    """A thousand READY tasks of billing, submitted in one batch: their ids."""
    batch = (await http.post("/v1/tasks/batch", token=tokens["producer"], json_body={
        "tasks": [{"queue": "billing", "kind": "k", "idempotency_key": f"{prefix}-{n}"} for n in range(1000)]})).json()
    return [t["task_id"] for t in batch["tasks"]]


async def _waiter(watch: OutcomeWatch, task_id: str, wait: float, woken: list[str]) -> None:
    """Await ``task_id``'s end for up to ``wait`` seconds; noted in ``woken`` if it came."""
    with watch.watching(task_id) as ended:
        with trio.move_on_after(wait):
            await ended.wait()
        if ended.is_set():
            woken.append(task_id)


async def test_a_thousand_waiters_cost_one_probe_per_interval(db, http, tokens):
    """The probe count follows time, not waiters: 1 000 waiters on 1 000 tasks, one statement per interval."""
    ids = await _thousand_tasks(http, tokens, "w")
    store = Store(db, pool_size=2)
    watch = OutcomeWatch(store, interval=0.05)
    woken: list[str] = []
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch.run)
            async with trio.open_nursery() as waiters:
                for task_id in ids:
                    waiters.start_soon(_waiter, watch, task_id, 0.5, woken)
            nursery.cancel_scope.cancel()
    finally:
        store.close()
    assert woken == []
    assert 1 <= watch.probes <= 0.5 / 0.05 + 2  # ~one per interval, whatever the number of waiters


async def test_a_stopping_server_answers_its_waiters_at_once(start_service, token_factory, nursery):
    from http_support import Http

    service = await start_service()
    http, token = Http(service.http_port), token_factory("producer")
    task_id = await submit(http, token)
    answered = waiting(nursery, http, task_id, token, wait=30)
    with trio.fail_after(10):  # the long-poll is parked on the server (its gauge says so) before the stop
        while "pulse_http_outcome_waiters 1\n" not in (await http.get("/metrics")).body.decode():
            await trio.sleep(0.02)
    service.stop()
    with trio.fail_after(5):  # not the wait's 30 s
        while not answered:
            await trio.sleep(0.01)
    assert answered[0].status == 200 and answered[0].json()["done"] is False


async def test_a_wait_that_times_out_answers_the_task_as_it_is_then(http, tokens, open_worker, nursery):
    """"After S seconds, the task as it is": started meanwhile, it is RUNNING at its first attempt."""
    task_id = await submit(http, tokens["producer"])
    answered = waiting(nursery, http, task_id, tokens["producer"], wait=3)
    await trio.sleep(0.5)  # the request has read the task (READY) and waits
    worker = await open_worker(tokens["worker"], "billing")
    with trio.fail_after(10):
        lease = (await worker.next_assignment())["lease"]
        await worker.request("task.start", {"task_id": task_id, "lease_id": lease["lease_id"],
                                            "lease_secret": lease["lease_secret"], "revision": lease["revision"]})
        while not answered:
            await trio.sleep(0.05)
    body = answered[0].json()
    assert (body["done"], body["state"], body["attempt"]) == (False, "RUNNING", 1)


async def test_a_long_poll_whose_client_went_away_releases_its_waiter(http, tokens, service):
    """A client that hangs up mid-wait leaves no waiter, handler or connection behind for the rest of it."""
    import socket

    task_id = await submit(http, tokens["producer"])

    def waiters() -> float:
        with socket.create_connection(("127.0.0.1", service.http_port), timeout=5) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        (line,) = [x for x in data.decode().splitlines() if x.startswith("pulse_http_outcome_waiters ")]
        return float(line.split()[1])

    poll = socket.create_connection(("127.0.0.1", service.http_port), timeout=5)
    try:
        poll.sendall(f"GET /v1/tasks/{task_id}/outcome?wait=60 HTTP/1.1\r\nHost: x\r\n"
                     f"Authorization: Bearer {tokens['producer']}\r\n\r\n".encode())
        with trio.fail_after(5):
            while await trio.to_thread.run_sync(waiters) != 1:
                await trio.sleep(0.05)
    finally:
        poll.close()
    with trio.fail_after(5):
        while await trio.to_thread.run_sync(waiters):
            await trio.sleep(0.1)


async def test_a_wait_that_is_no_number_is_refused(http, tokens):
    """Decimal alone reads "0_5" as 5: the request would be held 5 s instead of refused."""
    task_id = await submit(http, tokens["producer"])
    for text in ("0_5", "Infinity", "NaN", "0x1"):
        reply = await http.get(f"/v1/tasks/{task_id}/outcome?wait={text}", token=tokens["producer"])
        assert (reply.status, reply.error["code"]) == (400, "invalid_request"), (text, reply.status)


async def test_a_hint_probes_its_own_task_not_every_awaited_one(db, http, tokens):
    """Each end this process commits asks about its own task: with many waiters it is one look-up, not one each.

    Probing every awaited id on each hint made a busy process (a producer awaiting all its tasks while
    they finish or retry here) read waiters x finishes rows, back to back; the waiters of other
    processes' ends are the periodic probe's, and it alone reads them all.
    """
    ids = await _thousand_tasks(http, tokens, "h")
    cancelled = ids[0]
    store = Store(db, pool_size=2)
    watch = OutcomeWatch(store, interval=60)  # no periodic probe here: only the hints can wake anyone
    woken: list[str] = []
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch.run)
            async with trio.open_nursery() as waiters:
                for task_id in ids:
                    waiters.start_soon(_waiter, watch, task_id, 5, woken)
                await trio.sleep(0.1)
                for task_id in ids[1:41]:  # ends here that scheduled a retry: each hint is a probe
                    watch.hint(task_id)
                    await trio.sleep(0.01)
                granted = await http.post(f"/v1/tasks/{cancelled}/cancel", token=tokens["operator"])
                assert granted.json()["state"] == "CANCELLED"
                started = time.monotonic()
                watch.hint(cancelled)
                with trio.fail_after(3):
                    while not woken:
                        await trio.sleep(0.01)
                assert woken == [cancelled] and time.monotonic() - started < 3
                waiters.cancel_scope.cancel()
            nursery.cancel_scope.cancel()
    finally:
        store.close()
    assert watch.probes >= 2  # the hints were probed at once (none waited for the minute's probe)
    assert watch.probed_ids <= 41 + 2, watch.probed_ids  # each probe asked for the hinted task alone
