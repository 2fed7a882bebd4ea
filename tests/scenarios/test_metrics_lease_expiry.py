"""Lease expiry in /metrics: a re-dispatch marked effect_uncertain and a quarantined permit are counted, by queue."""

from __future__ import annotations

import urllib.request

import trio

from metrics_support import exposition_samples
from scenario_support import offered, running

SETTINGS = dict(start_timeout=5, lease_ttl=5, permit_quarantine=3)


async def _scrape(service) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    def get() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{service.http_port}/metrics", timeout=30) as reply:
            return reply.read().decode()

    return exposition_samples(await trio.to_thread.run_sync(get))


async def test_an_expired_lease_redispatched_uncertain_bumps_its_counters(
        virtual_clock, scenario_service, connect_worker, submit, operator):
    service = await scenario_service(**SETTINGS)
    ops = operator(service)
    keyed = await submit(service, queue="q", concurrency_key="k", retry_uncertain=True, max_attempts=3)
    plain = await submit(service, queue="p", max_attempts=3)  # expires to UNKNOWN: not a re-dispatch
    async with connect_worker(service, queues=("q", "p"), concurrency_keys=True) as worker:
        await worker.capacity(2)
        lost = [await running(worker), await running(worker)]
        assert {h.task_id for h in lost} == {keyed["task_id"], plain["task_id"]}
        # both workers go silent; the keyed task comes back uncertain once its permit's quarantine ends
        again = await offered(worker)
        assert again.task_id == keyed["task_id"] and again.task["effect_uncertain"] is True
        await ops.wait_state(plain["task_id"], "UNKNOWN")
        assert (await again.start())["type"] == "ack"
        assert (await again.finish())["type"] == "ack"
    samples = await _scrape(service)
    assert samples[("pulse_lease_expiries_total", ())] == 2
    assert samples[("pulse_lease_expiry_redispatches_total", (("queue", "q"),))] == 1
    assert ("pulse_lease_expiry_redispatches_total", (("queue", "p"),)) not in samples
    assert samples[("pulse_permits_quarantined_total", (("queue", "q"),))] == 1
    assert ("pulse_permits_quarantined_total", (("queue", "p"),)) not in samples
    assert samples[("pulse_assignments_total", (("queue", "q"),))] == 2
    assert samples[("pulse_finishes_total", (("queue", "q"), ("status", "SUCCEEDED")))] == 1
    assert samples[("pulse_task_run_seconds_count", (("queue", "q"),))] == 1
    assert samples[("pulse_task_queue_wait_seconds_count", (("queue", "q"),))] == 2
    # the second attempt waited in virtual time: through the first one's ttl and the permit's quarantine
    assert samples[("pulse_task_queue_wait_seconds_sum", (("queue", "q"),))] >= SETTINGS["lease_ttl"]
