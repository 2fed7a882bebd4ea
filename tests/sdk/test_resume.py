"""A dropped connection is not a lost lease: the handler keeps running and the lease is resumed.

Every drop here is real: the proxy closes both TCP sockets, or the service
instance itself stops and another one starts on the same database.
"""

from __future__ import annotations

import pytest
import trio

from sdk_support import Gate, ack_of, gated_registry, in_thread, wait_for, wait_state



async def test_socket_drop_mid_task_resumes_the_lease(start_service, proxy_for, run_worker, client):
    service = await start_service(lease_ttl=1.5)
    proxy = await proxy_for(service)
    started, release, calls = Gate(), Gate(), []
    worker = await run_worker(proxy.url, gated_registry(started, release, calls))
    task = await in_thread(client.submit, "billing", "invoice.send", {})
    with trio.fail_after(10):
        await started.wait()
    first_instance = worker.credentials.instance_id

    proxy.sever()
    await wait_for(lambda: worker.stats.resumed == 1, what="the lease to be resumed")
    assert worker.credentials.instance_id != first_instance
    await trio.sleep(1.6)  # longer than the ttl: only renewals through the new session keep the lease
    release.set()

    view = await wait_state(client, task["task_id"], "SUCCEEDED")
    assert calls == [task["task_id"]]  # resumed, not re-run
    assert view["attempt"] == 1 and len(view["attempts"]) == 1
    assert worker.stats.connects == 2 and worker.stats.lost == 0


async def test_service_restart_mid_task_resumes_on_the_new_instance(start_service, proxy_for, run_worker, client):
    service = await start_service()
    proxy = await proxy_for(service)
    started, release, calls = Gate(), Gate(), []
    worker = await run_worker(proxy.url, gated_registry(started, release, calls))
    task = await in_thread(client.submit, "billing", "invoice.send", {})
    with trio.fail_after(10):
        await started.wait()

    service.stop()
    await wait_for(lambda: not worker.connected, what="the worker to notice the shutdown")
    restarted = await start_service()
    proxy.retarget(restarted.worker_port)
    await wait_for(lambda: worker.stats.resumed == 1, what="the lease to be resumed on the new instance")
    release.set()

    view = await wait_state(client, task["task_id"], "SUCCEEDED")
    assert calls == [task["task_id"]]
    assert view["attempt"] == 1 and len(view["attempts"]) == 1


@pytest.mark.parametrize("command", ["task.start", "task.renew", "task.finish"])
async def test_lost_ack_is_answered_from_the_receipt(start_service, proxy_for, run_worker, client, command):
    # The command commits, its ack is swallowed on the wire and the socket cut: after reconnecting
    # the worker sends the same command with the same revision and the receipt answers duplicate=true.
    service = await start_service(lease_ttl=0.9)
    proxy = await proxy_for(service)
    started, release, calls = Gate(), Gate(), []
    worker = await run_worker(proxy.url, gated_registry(started, release, calls))
    if command != "task.finish":
        proxy.drop_when(ack_of(command))
    task = await in_thread(client.submit, "billing", "invoice.send", {})
    with trio.fail_after(10):
        await started.wait()
    if command == "task.finish":
        proxy.drop_when(ack_of(command))
    else:
        await wait_for(lambda: worker.stats.duplicates == 1, what=f"the resent {command} to be settled")
    release.set()
    await wait_for(lambda: worker.stats.succeeded == 1, what="the finish")
    assert proxy.dropped_chunks, f"the {command} ack was not intercepted"
    assert worker.stats.duplicates == 1 and worker.stats.connects == 2
    # A committed finish ends the lease: nothing to resume. Otherwise the lease moved to the new session.
    assert worker.stats.resumed == (0 if command == "task.finish" else 1)
    view = await wait_state(client, task["task_id"], "SUCCEEDED")
    assert calls == [task["task_id"]] and len(view["attempts"]) == 1


async def test_a_half_open_connection_is_dropped_at_once_and_the_lease_resumed(start_service, proxy_for,
                                                                               run_worker, client):
    # Only the heartbeat can notice: no FIN or RST comes. The worker then owes the silent peer no closing
    # handshake, whose time limit alone would outlast this lease.
    await _half_open_keeps_the_lease(await start_service(lease_ttl=2.0), proxy_for, run_worker, client)


async def test_a_half_open_connection_is_noticed_in_time_for_a_task_of_a_short_ttl(start_service, proxy_for,
                                                                                    run_worker, client):
    # The cluster's ttl would pace the heartbeat too slowly for this task's own: the lease held paces it, from
    # its start and at every ping after.
    await _half_open_keeps_the_lease(await start_service(lease_ttl=30.0), proxy_for, run_worker, client,
                                     task_ttl=2.0, held_for=1.0)


async def _half_open_keeps_the_lease(service, proxy_for, run_worker, client, *, task_ttl: float | None = None,
                                     held_for: float = 0.0):
    proxy = await proxy_for(service)
    started, release, calls = Gate(), Gate(), []
    worker = await run_worker(proxy.url, gated_registry(started, release, calls))
    task = await in_thread(client.submit, "billing", "invoice.send", {}, lease_ttl=task_ttl)
    with trio.fail_after(10):
        await started.wait()
    await trio.sleep(held_for)

    held_at = trio.current_time()
    proxy.half_open()
    await wait_for(lambda: worker.stats.resumed or worker.stats.lost, timeout=30,
                   what="the lease to be resumed (or lost)")
    relinked = [round(t - held_at, 2) for t in proxy.link_times[1:]]
    assert worker.stats.lost == 0, f"lease lost on a half-open connection; new links {relinked} s after it"
    release.set()
    view = await wait_state(client, task["task_id"], "SUCCEEDED")
    assert calls == [task["task_id"]] and len(view["attempts"]) == 1
