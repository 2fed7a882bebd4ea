"""The worker's account matches the service's: a lease is written off only when the service says so.

A finish still unanswered when the lease's local expiry passes is settled,
not counted lost: the worker waits for its answer, replays it after a
reconnect (a committed finish returns its receipt) and re-sends it after an
``internal`` answer, on the same connection. A handler is never called with
a sliver of lease left: the lease is renewed first.

The scripted peer plays the service where it must misbehave on cue (late
acks, storage failures); the last test runs the real service behind a proxy
that really drops the socket.
"""

from __future__ import annotations

import datetime as dt
import logging

import pytest
import trio

from scripted_server import ScriptedServer, later
from sdk_support import Gate, ack_of, in_thread, wait_for, wait_state

from pulse_trio.contract.grammar import format_time
from pulse_trio.sdk import Registry, TaskContext
from pulse_trio.sdk import lease as lease_module


@pytest.fixture
async def scripted():
    async with trio.open_nursery() as own:
        yield await own.start(ScriptedServer().serve)
        own.cancel_scope.cancel()


def _registry(calls: list[str], release: Gate | None = None) -> Registry:
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext) -> dict:
        calls.append(task.task_id)
        if release is not None:
            await release.wait()
        return {"sent": True}

    return registry


async def _session(scripted, run_worker, registry: Registry):
    worker = await run_worker(scripted.url, registry, token="t", wait=False)
    peer = await scripted.next_peer()
    await peer.welcome()
    await peer.accept_capacity()
    return worker, peer


def _ack(peer, request, expires_in: float, *, committed_ago: float = 0.0):
    ack = peer.command_result(request)
    ack["body"]["lease"]["expires_at"] = later(expires_in)
    if committed_ago:
        ack["body"]["receipt"]["committed_at"] = format_time(
            dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=committed_ago))
    return ack


def _internal(peer, request, retry_after_ms: int = 1000):
    return peer.frame("error", reply_to=request["id"], error={
        "code": "internal", "message": "storage failure; retry later", "fatal": False,
        "retry_after_ms": retry_after_ms})


def _same_command(first: dict, second: dict) -> bool:
    return (second["type"], second["body"]) == (first["type"], first["body"]) and second["id"] != first["id"]


async def _started(peer, expires_in: float) -> dict:
    """Offer one task, acknowledge its start with a lease of ``expires_in`` s; returns the next frame."""
    frame, _ = peer.offer()
    await peer.send(frame)
    start = await peer.recv()
    assert start["type"] == "task.start"
    await peer.send(_ack(peer, start, expires_in))
    return await peer.recv(timeout=3)


async def _renewal_for_a_sliver(peer) -> dict:
    """Offer one task and ack its start with 0.3 s left of a 3 s lease; returns what the worker sends next."""
    frame, _ = peer.offer()
    await peer.send(frame)
    start = await peer.recv()
    await peer.send(_ack(peer, start, 0.3, committed_ago=2.7))
    return await peer.recv(timeout=1)


async def test_a_finish_acknowledged_after_the_local_expiry_is_counted_as_finished(scripted, run_worker, caplog):
    caplog.set_level(logging.INFO, logger="pulse_trio.sdk")
    calls: list[str] = []
    worker, peer = await _session(scripted, run_worker, _registry(calls))
    finish = await _started(peer, 0.6)
    assert finish["type"] == "task.finish"
    await trio.sleep(1.0)  # the service commits it late (a slow database): past the worker's local expiry
    await peer.send(peer.command_result(finish, lease=False))
    await wait_for(lambda: worker.stats.succeeded == 1, timeout=5, what="the late finish ack to count")
    assert worker.stats.lost == 0 and worker.stats.unsettled == 0
    assert not any("lease lost" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("command", ["task.renew", "task.finish"])
async def test_an_internal_answer_is_retried_on_the_same_connection(scripted, run_worker, command):
    calls: list[str] = []
    release = Gate()
    worker, peer = await _session(scripted, run_worker, _registry(calls, release))
    if command == "task.finish":
        release.set()
    first = await _started(peer, 0.8)
    assert first["type"] == command
    answered = trio.current_time()
    await peer.send(_internal(peer, first, retry_after_ms=1000))
    again = await peer.recv(timeout=3)  # this connection, not a new one
    assert _same_command(first, again), (first, again)
    if command == "task.renew":
        # A renewal must land while the lease lasts: sooner than the server's advice when that is too late.
        assert trio.current_time() - answered < 0.6
        await peer.send(_ack(peer, again, 30))
        release.set()
        finish = await peer.recv()
        assert finish["type"] == "task.finish"
        await peer.send(peer.command_result(finish, lease=False))
    else:
        await peer.send(peer.command_result(again, lease=False))
    await wait_for(lambda: worker.stats.succeeded == 1, timeout=5, what="the finish")
    assert worker.stats.lost == 0 and worker.stats.connects == 1 and calls and len(calls) == 1


async def test_an_internal_answer_to_the_replayed_finish_is_asked_again_not_written_off(scripted, run_worker):
    calls: list[str] = []
    worker, peer = await _session(scripted, run_worker, _registry(calls))
    finish = await _started(peer, 30)
    assert finish["type"] == "task.finish"
    await peer.ws.aclose()  # the ack is lost with the connection
    peer.done.set()

    peer2 = await scripted.next_peer()
    await peer2.welcome()
    replay = await peer2.recv()
    assert replay["type"] == "task.finish" and replay["body"] == finish["body"]
    await peer2.send(_internal(peer2, replay, retry_after_ms=50))
    again = await peer2.recv()  # the same finish again, not a resume of a lease it may have finished
    assert _same_command(replay, again), again
    receipt = peer2.command_result(again, lease=False)
    receipt["body"]["receipt"]["duplicate"] = True
    await peer2.send(receipt)
    await peer2.accept_capacity()
    await wait_for(lambda: worker.stats.succeeded == 1, timeout=5, what="the replayed finish")
    assert worker.stats.lost == 0 and worker.stats.duplicates == 1 and worker.stats.resumed == 0


async def test_an_internal_answer_to_a_resume_is_retried(scripted, run_worker):
    calls: list[str] = []
    release = Gate()
    worker, peer = await _session(scripted, run_worker, _registry(calls, release))
    frame, lease = peer.offer()
    await peer.send(frame)
    start = await peer.recv()
    await peer.send(_ack(peer, start, 30))
    await wait_for(lambda: calls, what="the handler")
    await peer.ws.aclose()
    peer.done.set()

    peer2 = await scripted.next_peer()
    await peer2.welcome()
    resume = await peer2.recv()
    assert resume["type"] == "worker.resume"
    await peer2.send(_internal(peer2, resume, retry_after_ms=50))
    again = await peer2.recv()
    assert _same_command(resume, again), again
    body = {"lease_id": lease["lease_id"], "task_id": lease["task_id"], "revision": "3", "epoch": str(peer2.epoch),
            "state": "RUNNING", "expires_at": later(30)}
    await peer2.send(peer2.frame("ack", body, reply_to=again["id"]))
    await peer2.accept_capacity()
    release.set()
    finish = await peer2.recv()
    assert finish["type"] == "task.finish" and finish["body"]["revision"] == "3"
    await peer2.send(peer2.command_result(finish, lease=False))
    await wait_for(lambda: worker.stats.succeeded == 1, timeout=5, what="the finish")
    assert worker.stats.lost == 0 and worker.stats.resumed == 1


async def test_a_handler_is_not_called_with_a_sliver_of_lease_left(scripted, run_worker):
    calls: list[str] = []
    worker, peer = await _session(scripted, run_worker, _registry(calls))
    renew = await _renewal_for_a_sliver(peer)
    assert renew["type"] == "task.renew" and renew["body"]["revision"] == "2"
    assert calls == [], "the handler was called with 0.3 s of a 3 s lease left"
    await peer.send(_ack(peer, renew, 30))
    finish = await peer.recv()
    assert finish["type"] == "task.finish" and finish["body"]["revision"] == "3"
    assert len(calls) == 1
    await peer.send(peer.command_result(finish, lease=False))
    await wait_for(lambda: worker.stats.succeeded == 1, timeout=5, what="the finish")
    assert worker.stats.lost == 0 and worker.stats.renewals == 1


async def test_a_worker_back_after_the_expiry_replays_its_finish_and_counts_the_stored_outcome(
        start_service, proxy_for, run_worker, client, caplog):
    """The real service commits the finish; its ack is lost with the socket, and the worker cannot reconnect
    until its local lease expiry has passed (the service restarting, say). The replay returns the receipt."""
    caplog.set_level(logging.INFO, logger="pulse_trio.sdk")
    service = await start_service(lease_ttl=1.0)
    proxy = await proxy_for(service)
    calls: list[str] = []
    worker = await run_worker(proxy.url, _registry(calls))
    proxy.drop_when(ack_of("task.finish"), then_freeze=True)
    task = await in_thread(client.submit, "billing", "invoice.send", {})
    await wait_for(lambda: proxy.dropped_chunks, what="the finish ack to be lost")
    view = await wait_state(client, task["task_id"], "SUCCEEDED")
    await trio.sleep(1.5)  # past the worker's local expiry of the lease
    assert worker.stats.lost == 0 and worker.stats.succeeded == 0
    proxy.thaw()
    await wait_for(lambda: worker.stats.succeeded == 1, timeout=10, what="the replayed finish to count")
    assert worker.stats.lost == 0 and worker.stats.duplicates == 1 and worker.stats.unsettled == 0
    assert view["outcome"]["result"] == {"sent": True} and calls == [task["task_id"]]
    assert not any("lease lost" in r.getMessage() for r in caplog.records)


async def test_a_finish_never_answered_is_outcome_unknown_not_lost(scripted, run_worker, caplog, monkeypatch):
    """The service never answers the finish; the settling (a minute past the expiry) is shortened here."""
    monkeypatch.setattr(lease_module, "SETTLE_AFTER_EXPIRY_S", 1.0)
    caplog.set_level(logging.INFO, logger="pulse_trio.sdk")
    calls: list[str] = []
    worker, peer = await _session(scripted, run_worker, _registry(calls))
    finish = await _started(peer, 1.0)
    assert finish["type"] == "task.finish"
    asked = trio.current_time()
    with trio.fail_after(10):
        while not worker.stats.unsettled:
            await trio.sleep(0.05)
    assert trio.current_time() - asked >= 1.8  # the lease's expiry (1 s), then the settling time past it
    assert worker.stats.lost == 0 and worker.stats.succeeded == 0 and worker.stats.running == 0
    messages = [r.getMessage() for r in caplog.records]
    assert any("outcome unknown to this worker" in m and finish["body"]["task_id"] in m for m in messages)
    assert not any("lease lost" in m for m in messages)


async def test_a_start_answered_internal_past_its_offer_expiry_is_not_hammered(scripted, run_worker):
    """Before the offer's expiry the retries close in on it; after it, the plain backoff (here 1 s) applies."""
    calls: list[str] = []
    worker, peer = await _session(scripted, run_worker, _registry(calls))
    frame, _ = peer.offer()
    frame["body"]["lease"]["expires_at"] = later(0.3)
    await peer.send(frame)
    starts = 0
    with trio.move_on_after(2.5):
        while True:
            request = await peer.recv(timeout=5)
            assert request["type"] == "task.start"
            starts += 1
            await peer.send(_internal(peer, request, retry_after_ms=1000))
    assert 3 <= starts <= 12, starts
    assert calls == [] and worker.stats.started == 0


async def test_a_cancel_in_the_ack_of_the_renewal_before_the_handler_finishes_once(scripted, run_worker):
    """The renewal that replaces a sliver of lease comes back with a cancel: one CANCELLED finish, no crash."""
    calls: list[str] = []
    worker, peer = await _session(scripted, run_worker, _registry(calls))
    renew = await _renewal_for_a_sliver(peer)
    assert renew["type"] == "task.renew"
    ack = _ack(peer, renew, 30)
    ack["body"]["lease"]["cancel_requested_at"] = format_time(dt.datetime.now(dt.timezone.utc))
    await peer.send(ack)
    finish = await peer.recv()
    assert (finish["type"], finish["body"]["status"], finish["body"]["revision"]) == ("task.finish", "CANCELLED", "3")
    await peer.send(peer.command_result(finish, lease=False))
    await wait_for(lambda: worker.stats.cancelled == 1, timeout=5, what="the cancelled finish")
    assert calls == [] and worker.stats.lost == 0
    with trio.move_on_after(0.5):
        extra = await peer.recv(timeout=0.5)
        raise AssertionError(f"a second command after the finish: {extra}")


async def test_a_command_waiting_to_retry_is_settled_by_the_reattach_not_sent_again(scripted, run_worker):
    """A start answered internal, then a drop: the new connection settles it, and the retry timer sends nothing."""
    calls: list[str] = []
    worker, peer = await _session(scripted, run_worker, _registry(calls))
    frame, lease = peer.offer()
    await peer.send(frame)
    start = await peer.recv()
    await peer.send(_internal(peer, start, retry_after_ms=3000))
    await trio.sleep(0.05)
    await peer.ws.aclose()
    peer.done.set()

    peer2 = await scripted.next_peer()
    await peer2.welcome()
    replay = await peer2.recv()
    assert replay["type"] == "task.start" and replay["body"] == start["body"]
    await peer2.send(peer2.command_result(replay))
    resume = await peer2.recv()
    assert resume["type"] == "worker.resume"
    body = {"lease_id": lease["lease_id"], "task_id": lease["task_id"], "revision": "2", "epoch": str(peer2.epoch),
            "state": "RUNNING", "expires_at": later(30)}
    await peer2.send(peer2.frame("ack", body, reply_to=resume["id"]))
    await peer2.accept_capacity()
    finish = await peer2.recv(timeout=5)  # past the 3 s retry: no task.start at revision 2 came first
    assert finish["type"] == "task.finish" and finish["body"]["revision"] == "2", finish
    await peer2.send(peer2.command_result(finish, lease=False))
    await wait_for(lambda: worker.stats.succeeded == 1, timeout=5, what="the finish")
    assert len(calls) == 1 and worker.stats.started == 1 and worker.stats.lost == 0


async def test_a_finish_recovered_by_a_replay_stays_finished_after_another_drop(scripted, run_worker, caplog):
    """The replay proved the finish committed; a drop before capacity is declared must not make it a lost lease.

    The next connection must not resume the lease (the service would refuse: it finished), and the worker's
    account (docs/worker.md §5.1) counts the task as succeeded, not lost.
    """
    caplog.set_level(logging.INFO, logger="pulse_trio.sdk")
    worker, peer = await _session(scripted, run_worker, _registry([]))
    frame, _ = peer.offer()
    await peer.send(frame)
    start = await peer.recv()
    await peer.send(peer.command_result(start))
    finish = await peer.recv()
    assert finish["type"] == "task.finish"
    await peer.ws.aclose()  # the finish committed; its ack is lost with the connection
    peer.done.set()

    second = await scripted.next_peer()
    await second.welcome()
    replay = await second.recv()
    assert replay["type"] == "task.finish" and replay["body"] == finish["body"]
    receipt = second.command_result(replay, lease=False)
    receipt["body"]["receipt"]["duplicate"] = True
    await second.send(receipt)
    assert (await second.recv())["type"] == "worker.capacity"
    await second.ws.aclose()  # dropped before the capacity is acknowledged (an instance stopping, say)
    second.done.set()

    third = await scripted.next_peer()
    await third.welcome()
    request = await third.recv()
    assert request["type"] == "worker.capacity", f"the finished lease was asked for again: {request}"
    body = request["body"]
    await third.send(third.frame("ack", third.state(body["capacity"], body["sequence"]), reply_to=request["id"]))
    await wait_for(lambda: worker.stats.succeeded + worker.stats.lost + worker.stats.unsettled >= 1, timeout=5,
                   what="the lease to be settled")
    lost = [r.getMessage() for r in caplog.records if "lease lost" in r.getMessage()]
    assert (worker.stats.succeeded, worker.stats.lost, lost) == (1, 0, [])
