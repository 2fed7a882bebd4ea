"""What the SDK refuses from a server, proved with a scripted peer (the real one never sends these).

A refused offer is never started (it lapses on the server); a wrong answer
to a pending request drops the connection, and the worker reconnects and
settles its leases from scratch.
"""

from __future__ import annotations

import pytest
import trio

from scripted_server import ScriptedServer

from pulse_trio.sdk import Registry, TaskContext


@pytest.fixture
async def scripted():
    async with trio.open_nursery() as own:
        yield await own.start(ScriptedServer().serve)
        own.cancel_scope.cancel()


def _registry(calls: list[str]) -> Registry:
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext) -> dict:
        calls.append(task.task_id)
        return {"ok": True}

    return registry


BAD_OFFERS = {
    "keyed_without_declaration": lambda peer: peer.offer(concurrency_key="customer:42", concurrency_token="3"),
    "retry_of_itself": lambda peer: _retry_of_itself(peer),
    "unsubscribed_kind": lambda peer: peer.offer(kind="invoice.void"),
    "another_epoch": lambda peer: _other_epoch(peer),
}


def _retry_of_itself(peer):
    frame, lease = peer.offer()
    frame["body"]["task"]["retry_of"] = frame["body"]["task"]["task_id"]
    return frame, lease


def _other_epoch(peer):
    frame, lease = peer.offer()
    frame["body"]["lease"]["epoch"] = str(peer.epoch + 1)
    return frame, lease


@pytest.mark.parametrize("bad", sorted(BAD_OFFERS))
async def test_illegal_offer_is_never_started(scripted, run_worker, bad):
    calls: list[str] = []
    worker = await run_worker(scripted.url, _registry(calls), token="t", capacity=2, wait=False)
    peer = await scripted.next_peer()
    hello = await peer.welcome()
    assert "concurrency_keys" not in hello["body"]  # not declared
    await peer.accept_capacity()

    bad_frame, _ = BAD_OFFERS[bad](peer)
    good_frame, good_lease = peer.offer()
    await peer.send(bad_frame)
    await peer.send(good_frame)
    start = await peer.recv()  # the first thing the worker does: start the legal offer only
    assert start["type"] == "task.start" and start["body"]["lease_id"] == good_lease["lease_id"]
    assert start["body"]["revision"] == "1" and start["body"]["lease_secret"] == good_lease["lease_secret"]
    await peer.send(peer.command_result(start))
    finish = await peer.recv()
    assert finish["type"] == "task.finish" and finish["body"]["revision"] == "2"
    assert finish["body"]["status"] == "SUCCEEDED" and finish["body"]["result"] == {"ok": True}
    await peer.send(peer.command_result(finish, lease=False))
    assert calls == [good_lease["task_id"]]
    assert worker.stats.rejected_offers == 1 and worker.stats.offers == 1


async def test_keyed_offer_is_accepted_when_declared(scripted, run_worker):
    seen: list[TaskContext] = []
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext) -> dict:
        seen.append(task)
        return {}

    await run_worker(scripted.url, registry, token="t", concurrency_keys=True, wait=False)
    peer = await scripted.next_peer()
    hello = await peer.welcome()
    assert hello["body"]["concurrency_keys"] is True
    await peer.accept_capacity()
    frame, lease = peer.offer(concurrency_key="customer:42", concurrency_token="1093", effect_uncertain=True)
    await peer.send(frame)
    start = await peer.recv()
    assert start["type"] == "task.start"
    await peer.send(peer.command_result(start))
    finish = await peer.recv()
    assert finish["type"] == "task.finish"
    [ctx] = seen
    assert (ctx.concurrency_key, ctx.concurrency_token, ctx.effect_uncertain) == ("customer:42", 1093, True)


async def test_wrong_ack_shape_drops_the_connection_and_the_lease_is_settled_again(scripted, run_worker):
    calls: list[str] = []
    worker = await run_worker(scripted.url, _registry(calls), token="t", wait=False)
    first = await scripted.next_peer()
    await first.welcome()
    await first.accept_capacity()
    frame, lease = first.offer()
    await first.send(frame)
    start = await first.recv()
    # A lease-shaped body (the resume answer) where a commandResult is due.
    await first.send(first.frame("ack", {k: v for k, v in lease.items() if k != "lease_secret"},
                                 reply_to=start["id"]))

    second = await scripted.next_peer()  # the worker dropped the first connection and came back
    await second.welcome()
    resent = await second.recv()  # the start it never got an answer to: same content, same revision
    assert resent["type"] == "task.start" and resent["body"] == start["body"]
    await second.send(second.error(resent, "lease_not_owned"))  # not committed (nor owned) here
    resume = await second.recv()
    assert resume["type"] == "worker.resume"
    assert resume["body"]["instance_id"] == first.instance_id and resume["body"]["lease_id"] == lease["lease_id"]
    await second.send(second.error(resume, "lease_expired"))
    capacity = await second.recv()  # declared only after every lease was settled
    assert capacity["type"] == "worker.capacity"
    assert calls == [] and worker.stats.started == 0
