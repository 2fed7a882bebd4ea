"""The reconnect backoff: only a connection that stayed up resets it."""

from __future__ import annotations

import json

from sdk_support import FAST_BACKOFF, wait_for

from pulse_trio.sdk import Backoff, Registry, TaskContext


async def test_a_session_dropped_right_after_its_welcome_backs_off_like_a_failed_connect(start_service, proxy_for,
                                                                                        run_worker):
    """A service that welcomes and then drops every session is not reconnected to at the first delay forever."""
    proxy = await proxy_for(await start_service())
    # The ack of the worker's capacity (the welcome shows no sequence) ends every link.
    proxy.drop_when(lambda data: b'"sequence":' in data, every=True)
    registry = Registry()

    @registry.handler("billing", "noop")
    async def noop(task: TaskContext) -> dict:
        return {}

    worker = await run_worker(proxy.url, registry, wait=False)
    await wait_for(lambda: len(proxy.link_times) >= 6, what="six links")
    gaps = [later - earlier for earlier, later in zip(proxy.link_times, proxy.link_times[1:])]
    # The fourth and fifth reconnects wait at least half the backoff's maximum.
    assert min(gaps[3:5]) >= FAST_BACKOFF.maximum / 2, gaps
    assert worker.stats.connects >= 5 and len(proxy.dropped_chunks) >= 5


async def test_a_handshake_503_is_retried_after_its_retry_after(raw, run_worker):
    """The service answers 503 with Retry-After while it cannot check tokens: the worker waits that long."""
    raw.reject = (503, "the worker token cannot be checked now: storage unavailable; retry later")
    raw.reject_headers = [("Retry-After", "1")]
    registry = Registry()
    registry.add("billing", "noop", lambda task: {})
    worker = await run_worker(raw.url(), registry, token="t", wait=False,
                              backoff=Backoff(initial=0.05, factor=2.0, maximum=2.0))
    await wait_for(lambda: len(raw.request_times) >= 3, what="three handshakes")
    times = raw.request_times
    assert min(later - earlier for earlier, later in zip(times, times[1:3])) >= 0.95, times
    assert worker.error is None and worker.stats.failed_connects >= 2


async def test_a_hello_refused_with_a_long_retry_after_ms_is_retried_within_the_backoffs_maximum(raw, run_worker):
    """``retry_after_ms`` may say up to 2^31-1 ms (about 24 days): the worker still comes back within its maximum."""
    registry = Registry()
    registry.add("billing", "noop", lambda task: {})
    worker = await run_worker(raw.url(), registry, token="t", wait=False, backoff=FAST_BACKOFF)
    peer = await raw.next_peer()
    hello = json.loads(await peer.get_message())
    assert hello["type"] == "worker.hello", hello
    await peer.send_message(json.dumps({
        "protocol_version": "1", "type": "error", "id": "s-1", "reply_to": hello["id"],
        "error": {"code": "internal", "message": "storage failure; retry later", "fatal": True,
                  "retry_after_ms": 2**31 - 1}}))
    await raw.next_peer(timeout=FAST_BACKOFF.maximum + 2)  # the next handshake, not in 24 days
    assert worker.error is None and worker.stats.failed_connects == 1
