"""A lease's timers, against a scripted peer: when renewals go out, and that the finish waits for one."""

from __future__ import annotations

import anyio
import pytest
import trio

from scripted_server import ScriptedServer, later
from sdk_support import Gate

from pulse_trio.sdk import LEASE_LOST, Registry, TaskContext


@pytest.fixture
async def scripted():
    async with trio.open_nursery() as own:
        yield await own.start(ScriptedServer().serve)
        own.cancel_scope.cancel()


async def _session(scripted, run_worker, registry: Registry):
    worker = await run_worker(scripted.url, registry, token="t", wait=False)
    peer = await scripted.next_peer()
    await peer.welcome()
    await peer.accept_capacity()
    return worker, peer


def _ack(peer, request, expires_in: float):
    ack = peer.command_result(request)
    ack["body"]["lease"]["expires_at"] = later(expires_in)
    return ack


async def _started_until_released(scripted, run_worker):
    """A worker whose handler runs until ``release`` is set, offered one task; returns at its task.start."""
    release = Gate()
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext) -> dict:
        await release.wait()
        return {}

    worker, peer = await _session(scripted, run_worker, registry)
    frame, _ = peer.offer()
    await peer.send(frame)
    request = await peer.recv()
    assert request["type"] == "task.start"
    return release, worker, peer, request


async def test_renewals_come_a_third_of_the_way_to_the_expiry(scripted, run_worker):
    release, worker, peer, request = await _started_until_released(scripted, run_worker)
    for _ in range(3):  # each ack re-arms the timer from the new expiry
        acked = trio.current_time()
        await peer.send(_ack(peer, request, 1.5))
        request = await peer.recv(timeout=1.5)
        waited = trio.current_time() - acked
        assert request["type"] == "task.renew" and 0.4 <= waited < 1.0, waited  # due at 0.5
    assert request["body"]["revision"] == "4"
    await peer.send(_ack(peer, request, 30))
    release.set()
    finish = await peer.recv()
    assert finish["type"] == "task.finish" and finish["body"]["revision"] == "5"
    await peer.send(peer.command_result(finish, lease=False))
    assert worker.stats.renewals == 3


async def test_the_finish_waits_for_the_renewal_under_way(scripted, run_worker):
    renewing, done = Gate(), []
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext) -> dict:
        await renewing.wait()
        done.append(task.task_id)
        return {"ok": True}  # returns while its renewal still waits for the ack

    worker, peer = await _session(scripted, run_worker, registry)
    frame, _ = peer.offer()
    await peer.send(frame)
    start = await peer.recv()
    await peer.send(_ack(peer, start, 1.2))
    renew = await peer.recv()
    assert renew["type"] == "task.renew" and renew["body"]["revision"] == "2"
    renewing.set()
    with trio.move_on_after(0.3) as quiet:  # the handler is done, but the revision to finish at is not known
        early = await peer.recv(timeout=1)
    assert quiet.cancelled_caught, early
    assert done
    await peer.send(_ack(peer, renew, 30))
    finish = await peer.recv()
    assert finish["type"] == "task.finish" and finish["body"]["revision"] == "3"
    await peer.send(peer.command_result(finish, lease=False))
    assert worker.stats.renewals == 1 and worker.stats.lost == 0


async def test_the_watchdog_stops_the_handler_when_the_expiry_passes(scripted, run_worker):
    stopped: list[str | None] = []
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext) -> dict:
        try:
            await anyio.sleep_forever()
        finally:
            stopped.append(task.stop_reason)

    worker, peer = await _session(scripted, run_worker, registry)
    frame, _ = peer.offer()
    await peer.send(frame)
    start = await peer.recv()
    ack = _ack(peer, start, 1.0)
    expires_at = ack["body"]["lease"]["expires_at"]
    acked = trio.current_time()
    await peer.send(ack)
    renew = await peer.recv()
    assert renew["type"] == "task.renew"
    # The expiry did not move (the cancel grace caps it): no renewal can help, no command is
    # under way, and only the watchdog is left to stop the handler when the expiry passes.
    capped = _ack(peer, renew, 0)
    capped["body"]["lease"]["expires_at"] = expires_at
    await peer.send(capped)
    with trio.fail_after(5):
        while not stopped:
            await trio.sleep(0.01)
    assert stopped == [LEASE_LOST] and trio.current_time() - acked >= 0.9
    assert worker.stats.lost == 1 and worker.stats.finished == 0 and worker.stats.renewals == 1
    with trio.move_on_after(0.3) as quiet:  # no second renewal, and nothing is reported for a lost lease
        late = await peer.recv(timeout=1)
    assert quiet.cancelled_caught, late


async def test_a_server_clock_step_after_the_welcome_never_stretches_the_lease(scripted, run_worker):
    """The server's wall clock jumps an hour ahead after the welcome: acks carry times an hour "later".

    Read through the offset measured at the welcome, the lease would seem to last an hour; the worker
    caps it at the send time plus what the server granted in its own clock (expires_at − committed_at),
    so it still renews a third of the way through the real grant.
    """
    release, worker, peer, request = await _started_until_released(scripted, run_worker)
    for _ in range(2):
        ack = peer.command_result(request)
        ack["body"]["receipt"]["committed_at"] = later(3600)
        ack["body"]["lease"]["expires_at"] = later(3600 + 1.5)
        acked = trio.current_time()
        await peer.send(ack)
        request = await peer.recv(timeout=1.5)
        waited = trio.current_time() - acked
        assert request["type"] == "task.renew" and waited < 1.0, waited  # due at 0.5, not in 20 minutes
    await peer.send(_ack(peer, request, 30))
    release.set()
    finish = await peer.recv()
    assert finish["type"] == "task.finish"
    await peer.send(peer.command_result(finish, lease=False))
    assert worker.stats.lost == 0
