"""Refusals that reconnecting cannot fix end ``Worker.run`` instead of looping forever."""

from __future__ import annotations

import json
import socket
import threading

import anyio
import pytest
import trio

from sdk_support import in_thread, url_of, wait_for, wait_state
from token_support import revoke_token

from pulse_trio.contract import errors as e
from pulse_trio.sdk import Backoff, Registry, TaskContext, WorkerRefused


def _registry() -> Registry:
    registry = Registry()

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext) -> dict:
        return {}

    return registry


async def _refusal(worker) -> WorkerRefused:
    with trio.fail_after(10):
        await worker.returned.wait()
    assert isinstance(worker.error, WorkerRefused), repr(worker.error)
    return worker.error


async def test_bad_token_is_refused(start_service, run_worker):
    service = await start_service()
    worker = await run_worker(url_of(service), _registry(), token="not-a-token", wait=False, strict=False)
    with pytest.raises(WorkerRefused, match="401"):
        raise await _refusal(worker)


async def test_queue_outside_the_token_is_refused(start_service, token_factory, run_worker):
    service = await start_service()
    worker = await run_worker(url_of(service), _registry(), token=token_factory("worker", ["other"]), wait=False,
                              strict=False)
    with pytest.raises(WorkerRefused, match="permission_denied"):
        raise await _refusal(worker)


async def test_unreachable_service_is_retried_until_it_comes_up(start_service, run_worker):
    with socket.socket() as probe:  # a port nothing listens on (yet)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    worker = await run_worker(f"ws://127.0.0.1:{port}/v1/worker", _registry(), wait=False, strict=False)
    await wait_for(lambda: worker.stats.failed_connects >= 3, what="a few refused connects")
    assert not worker.connected
    await start_service(worker_listen=("127.0.0.1", port))
    await wait_for(lambda: worker.connected, timeout=10, what="the worker to connect")
    worker.drain()
    with trio.fail_after(10):
        await worker.returned.wait()
    assert worker.error is None


@pytest.mark.parametrize("selected", ["pulse.worker.v9", ""], ids=["another", "none"])
async def test_a_101_without_our_subprotocol_is_refused(raw, run_worker, selected):
    """The server upgraded to another subprotocol (or none): every reconnect gets the same answer."""
    raw.subprotocol = selected
    worker = await run_worker(raw.url(), _registry(), token="t", wait=False)
    with pytest.raises(WorkerRefused, match="subprotocol"):
        raise await _refusal(worker)
    assert worker.stats.connects == 0



async def test_a_redirect_is_refused_naming_where_it_points(raw, run_worker):
    """The SDK follows no redirect, so each reconnect would be sent the same way."""
    raw.reject = (301, "moved\n")
    raw.reject_headers = [("Location", "wss://pulse.example.com/v1/worker")]
    worker = await run_worker(raw.url(), _registry(), token="t", wait=False)
    refused = await _refusal(worker)
    assert refused.status == 301 and "wss://pulse.example.com/v1/worker" in refused.detail, refused.detail


async def test_a_certificate_that_fails_verification_is_refused(raw_tls, run_worker):
    """A server certificate the worker's CAs do not vouch for stays so on every reconnect."""
    worker = await run_worker(raw_tls.url(), _registry(), token="t", wait=False)  # the system's CAs only
    with pytest.raises(WorkerRefused, match="certificate"):
        raise await _refusal(worker)
    assert worker.stats.connects == 0


async def test_a_drain_while_waiting_to_reconnect_returns_at_once(run_worker):
    """With no lease to finish, a drain (SIGTERM) during the backoff's wait ends run() then, not after the wait."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    worker = await run_worker(f"ws://127.0.0.1:{port}/v1/worker", _registry(), wait=False, strict=False,
                              backoff=Backoff(initial=8.0, factor=1.0, maximum=8.0))
    await wait_for(lambda: worker.stats.failed_connects >= 1, what="a refused connect")
    worker.drain()
    with trio.fail_after(2):  # the wait is 4 to 8 s
        await worker.returned.wait()
    assert worker.error is None and worker.stats.failed_connects == 1


async def test_with_several_urls_run_ends_once_every_url_has_refused(raw, run_worker):
    """Each URL's own refusal passes it over for the next; when none is left to try, run() ends."""
    raw.reject = (302, "")
    raw.reject_headers = [("Location", "https://status.example.com/")]
    worker = await run_worker([raw.url(), raw.url("/v1/worker?second")], _registry(), token="t", wait=False)
    refused = await _refusal(worker)
    assert refused.status == 302 and len(raw.request_times) == 2 and worker.stats.connects == 0


async def test_with_several_urls_a_refused_token_ends_run_at_the_first_refusal(raw, run_worker):
    """A 401 is the token's, which every instance refuses alike: run() ends at once, without trying the next URL."""
    raw.reject = (401, "unknown token\n")
    worker = await run_worker([raw.url(), raw.url("/v1/worker?second")], _registry(), token="t", wait=False)
    refused = await _refusal(worker)
    assert refused.status == 401 and len(raw.request_times) == 1, (refused, raw.request_times)


async def _refuse_the_hello(raw, code: str) -> None:
    """Answer the next worker's hello on ``raw`` with a fatal error ``code``."""
    peer = await raw.next_peer()
    hello = json.loads(await peer.get_message())
    assert hello["type"] == "worker.hello", hello
    await peer.send_message(json.dumps({
        "protocol_version": "1", "type": "error", "id": "s-1", "reply_to": hello["id"],
        "error": {"code": code, "message": f"{code} here", "fatal": True}}))


@pytest.mark.parametrize("code", [e.UNSUPPORTED_VERSION, e.INVALID_FRAME])
async def test_a_hello_refused_by_another_release_is_the_urls_own(raw, start_service, run_worker, code):
    """An instance behind one URL that speaks another protocol version (or reads our hello as invalid) is
    passed over for the next URL; with no other URL, run() ends, as no reconnect there changes it."""
    service = await start_service()
    worker = await run_worker([raw.url(), url_of(service)], _registry(), wait=False)
    await _refuse_the_hello(raw, code)
    await wait_for(lambda: worker.connected or worker.returned.is_set(), what="a session on the second URL")
    assert worker.error is None and worker.stats.failed_connects == 1, repr(worker.error)

    alone = await run_worker(raw.url(), _registry(), token="t", wait=False)
    await _refuse_the_hello(raw, code)
    refused = await _refusal(alone)
    assert refused.code == code and len(raw.request_times) == 2, (refused, raw.request_times)


@pytest.mark.parametrize("refusal", ["401", "permission_denied"])
async def test_real_instances_refusing_the_token_end_run_without_trying_the_other_urls(
        start_service, proxy_for, token_factory, run_worker, refusal):
    """Two real instances on one database, each behind a proxy that counts its connections: the first's
    refusal of the token (a producer's token: 401 at the handshake; a worker's for another queue:
    ``permission_denied`` at hello) ends run() at once, and the second URL is never dialled."""
    first, second = await start_service(), await start_service()
    to_first, to_second = await proxy_for(first), await proxy_for(second)
    token = token_factory("producer", ["billing"]) if refusal == "401" else token_factory("worker", ["other"])
    worker = await run_worker([to_first.url, to_second.url], _registry(), token=token, wait=False, strict=False)
    refused = await _refusal(worker)
    if refusal == "401":
        assert refused.status == 401 and refused.code is None, refused
    else:
        assert refused.code == e.PERMISSION_DENIED and refused.status is None, refused
    await trio.sleep(0.3)  # several of the fast backoff's waits: nothing dials again
    assert (to_first.links, to_second.links) == (1, 0), (to_first.links, to_second.links)
    assert worker.stats.connects == 0 and not worker.connected


async def test_a_token_revoked_while_the_worker_is_connected_ends_run_with_the_401(db, start_service, proxy_for,
                                                                                token_factory, run_worker):
    """protocol.md §1.2: a revoke ends the sessions the token opened, and a reconnect with it gets 401, which
    worker.md §11.1 makes the token's: run() ends with WorkerRefused instead of going round its URLs."""
    first, second = await start_service(), await start_service()
    to_first, to_second = await proxy_for(first), await proxy_for(second)
    token = token_factory("worker", ["billing"])
    worker = await run_worker([to_first.url, to_second.url], _registry(), token=token, strict=False)
    assert worker.url == to_first.url
    revoke_token(db, token)
    refused = await _refusal(worker)
    assert refused.status == 401, refused
    assert worker.stats.connects == 1 and to_first.links + to_second.links == 2, (to_first.links, to_second.links)


async def test_a_token_revoked_under_running_handlers_stops_them_as_a_hard_stop_does(db, start_service, run_worker,
                                                                                     client, token_factory, caplog):
    """worker.md §11.1: run() ending with WorkerRefused stops what still runs as stop() does. An async handler
    is cancelled, a def handler's thread is abandoned (it runs on until it returns), and nothing is finished,
    not even the outcome of a handler that returned after the revoke ended its session: that finish waited
    for a connection the token no longer gets. Each lease expires on the service, which decides the task."""
    service = await start_service(lease_ttl=4.0)
    started: list[str] = []
    cancelled: list[str] = []
    release = threading.Event()  # lets the abandoned def handler's thread return once the test is done
    running: list = []  # the worker, for the handler that returns once its session is gone
    registry = Registry()

    @registry.handler("billing", "hangs")
    async def hangs(task: TaskContext) -> dict:
        started.append(task.kind)
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.append(task.kind)
            raise
        return {}

    @registry.handler("billing", "swallows")
    async def swallows(task: TaskContext) -> dict:  # takes the cancel for a return: still nothing is finished
        started.append(task.kind)
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            return {"swallowed": True}
        return {}

    @registry.handler("billing", "blocks")
    def blocks(task: TaskContext) -> dict:
        started.append(task.kind)
        release.wait(30)
        return {"late": True}

    @registry.handler("billing", "returns")
    async def returns(task: TaskContext) -> dict:
        started.append(task.kind)
        while running[0].connected:  # the revoke ends the session; the reconnect's 401 comes after the backoff
            await anyio.sleep(0.005)
        started.append("returned")
        return {"sent": True}

    token = token_factory("worker", ["billing"])
    worker = await run_worker(url_of(service), registry, token=token, capacity=4, strict=False,
                              backoff=Backoff(initial=1.0, factor=1.0, maximum=1.0))
    running.append(worker)
    try:
        tasks = {kind: await in_thread(client.submit, "billing", kind, {}, max_attempts=1)
                 for kind in ("hangs", "swallows", "blocks", "returns")}
        await wait_for(lambda: len(set(started)) == 4, what="the four handlers to start")
        revoke_token(db, token)
        refused = await _refusal(worker)
        assert refused.status == 401, refused
        assert not worker.stopped and worker.stats.connects == 1 and "returned" in started, started
        assert cancelled == ["hangs"] and worker.stats.abandoned_threads == 1, (cancelled, worker.stats)
        assert worker.stats.finished == 0, worker.stats
        said = [r.getMessage() for r in caplog.records if "left unreported" in r.getMessage()]
        assert len(said) == 1, said  # which tasks lost their report, the returned one apart
        groups = dict(part.split(": ", 1) for part in said[0].split("; ")[1:])
        assert set(groups) == {"handler returned, outcome lost", "handler stopped while it ran"}, said
        assert tasks["returns"]["task_id"] in groups["handler returned, outcome lost"], said
        assert all(tasks[kind]["task_id"] in groups["handler stopped while it ran"]
                   for kind in ("hangs", "swallows", "blocks"))
        assert any(f"returned as the worker stopped, for task {tasks['swallows']['task_id']}" in r.getMessage()
                   for r in caplog.records), "a handler returning after the refusal is not finished, and says so"
        for kind, task in tasks.items():
            view = await wait_state(client, task["task_id"], {"SUCCEEDED", "FAILED", "UNKNOWN", "CANCELLED"})
            assert view["state"] == "UNKNOWN" and view["outcome"]["error_code"] == "lease_expired", (kind, view)
    finally:
        release.set()


async def test_a_refusal_names_a_finish_sent_but_unanswered_as_one_the_service_may_have_recorded(
        db, start_service, proxy_for, run_worker, client, token_factory, caplog):
    """The finish commits, its ack is lost with the socket, the token is revoked before the reconnect: the
    warning must not call that outcome lost (the task is SUCCEEDED, and running it again would repeat it)."""
    from sdk_support import ack_of

    service = await start_service()
    proxy = await proxy_for(service)
    token = token_factory("worker", ["billing"])
    worker = await run_worker(proxy.url, _registry(), token=token, strict=False)
    proxy.drop_when(ack_of("task.finish"), then_freeze=True)
    task = await in_thread(client.submit, "billing", "invoice.send", {})
    await wait_for(lambda: proxy.dropped_chunks, what="the finish ack to be lost")
    await wait_state(client, task["task_id"], "SUCCEEDED")
    revoke_token(db, token)
    proxy.thaw()
    assert (await _refusal(worker)).status == 401
    said = [r.getMessage() for r in caplog.records if "left unreported" in r.getMessage()]
    assert len(said) == 1 and f"finish sent, unanswered (may be recorded): {task['task_id']}" in said[0], said
    assert "outcome lost" not in said[0], said
