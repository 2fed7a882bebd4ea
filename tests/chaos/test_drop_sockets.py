"""Fault injection: worker sockets dropped at random under a running workload.

Two ``serve`` processes share one database. Four SDK worker processes
(``pulse-trio worker run``; two declare ``--concurrency-keys``, two do not)
reach them only through ``chaos_proxy.DroppingProxy``, a real TCP proxy
that sends each new connection to a random instance and, at random moments
from a seeded RNG, ends one live connection: RST both ways, plain FIN, RST
to one side and FIN to the other, a stall longer than the lease ttl then
RST, an orphan (the worker is reset while the server's side stays open and
silent for a while), a cut just after the worker's next command went
through (its ack never comes back), or a frame cut in the middle (the first
part of the worker's or the server's next bytes is relayed, then RST). The workers reconnect, replay what was
in flight and resume their leases, often on the other instance.

The workload arrives in waves while the drops go on: unkeyed tasks that may
run again (``retry_uncertain``), some that fail retryably on their first
attempt, unkeyed tasks that may not run again (a lost lease makes them
UNKNOWN), and keyed tasks on keys with limits 1, 1, 2 and 3. After the
drops stop, every task must settle and ``chaos_checks.check_guarantees``
must hold; a sampler checks the key permits in the database during the run.

``PULSE_CHAOS_SEED=<n>`` replays a seed (the drop schedule and the workload
follow it; process timing does not).
"""

from __future__ import annotations

import os
import random
import secrets
import time

import pytest

import chaos_checks
from chaos_fleet import Fleet, monotonic
from chaos_proxy import MODES, DroppingProxy
from pulse_trio.client import Client
from pulse_trio.client.producer import build_task

pytestmark = pytest.mark.chaos

KEYS = {"acct:1": 1, "acct:2": 1, "shard:a": 2, "shard:b": 3}
WAVES = 10
WAVE_EVERY = 1.0
CHAOS_AFTER_LAST_WAVE = 2.0
WORKERS = ((True, 4), (True, 4), (False, 4), (False, 4))  # (declares keys, capacity): ~70% busy


def _wave(rng: random.Random, wave: int) -> list:
    tasks = []
    for i in range(10):
        tasks.append(build_task("chaos", "work", {"wave": wave, "i": i, "sleep": round(rng.uniform(0.3, 1.0), 3),
                                                  "fail_first": rng.random() < 0.1},
                                retry_uncertain=True, max_attempts=10))
    for i in range(3):
        tasks.append(build_task("chaos", "work", {"wave": wave, "once": i, "sleep": round(rng.uniform(0.3, 1.0), 3)},
                                retry_uncertain=False, max_attempts=3))
    for key, limit in KEYS.items():
        for i in range(limit):
            tasks.append(build_task("chaos", "work", {"wave": wave, "key": key, "i": i,
                                                      "sleep": round(rng.uniform(0.2, 0.45), 3)},
                                    concurrency_key=key, concurrency_limit=limit, retry_uncertain=True,
                                    max_attempts=10))
    rng.shuffle(tasks)
    return tasks


def _wait_workers(client: Client, count: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while len(client.workers()) < count:
        assert time.monotonic() < deadline, f"only {len(client.workers())} of {count} workers connected"
        time.sleep(0.1)


def test_dropping_worker_sockets_at_random_loses_nothing(db, token_factory, tmp_path):
    seed = int(os.environ.get("PULSE_CHAOS_SEED") or secrets.randbits(32))
    print(f"\nchaos seed: PULSE_CHAOS_SEED={seed}")
    rng = random.Random(seed ^ 0x5EED)
    fleet = Fleet(db, token_factory("worker", ["chaos"]), tmp_path / "executions.jsonl")
    ids: set[str] = set()
    started = monotonic()
    with DroppingProxy([("127.0.0.1", port) for port in fleet.ports], seed) as proxy, Client(db) as client:
        try:
            fleet.start_servers(*range(len(fleet.ports)))
            url = f"ws://127.0.0.1:{proxy.port}/v1/worker"
            for i, (keys, capacity) in enumerate(WORKERS):
                fleet.start_worker(i, keys=keys, url=url, capacity=capacity)
            _wait_workers(client, len(WORKERS))
            with chaos_checks.PermitSampler(db, KEYS) as sampler:
                proxy.dropping = True
                chaos_from = monotonic()
                for wave in range(WAVES):
                    ids |= {t["task_id"] for t in client.submit_many(_wave(rng, wave))}
                    time.sleep(max(0.0, chaos_from + (wave + 1) * WAVE_EVERY - monotonic()))
                time.sleep(CHAOS_AFTER_LAST_WAVE)
                proxy.dropping = False
                chaos_for = monotonic() - chaos_from
                states = chaos_checks.wait_settled(db, len(ids), timeout=45)
                settled_after = monotonic() - chaos_from - chaos_for
            views = chaos_checks.collect_views(client, ids)
        finally:
            fleet.stop_all()
    print(f"chaos: {proxy.dropped} sockets dropped in {chaos_for:.1f}s "
          f"({', '.join(f'{m} {proxy.stats[m]}' for m in MODES)}); {proxy.stats['accepted']} connections accepted, "
          f"{proxy.stats['cut_part_relayed']} frames cut in the middle; "
          f"settled {settled_after:.1f}s after the drops stopped; {monotonic() - started:.1f}s in all")
    print(f"chaos: workers logged {fleet.worker_log_count('disconnected:')} disconnects, "
          f"{fleet.worker_log_count('lease lost')} lost leases, "
          f"{fleet.worker_log_count('was committed before the disconnect')} commands found committed on reconnect")
    assert not proxy.errors, proxy.errors
    assert proxy.dropped >= 10, f"seed {seed}: only {proxy.dropped} drops: the run proved little"
    assert all(proxy.stats[mode] for mode in MODES), f"seed {seed}: {proxy.stats}"
    assert proxy.stats["cut_part_relayed"] >= 1, f"seed {seed}: no frame was cut in the middle: {proxy.stats}"
    try:
        assert chaos_checks.backends_that_ran(fleet.log) == fleet.backends == {"asyncio", "trio"}
        summary = chaos_checks.check_guarantees(db, ids, chaos_checks.read_executions(fleet.log),
                                                worker_keys=fleet.worker_keys, killed_at=fleet.killed_at,
                                                views=views)
    except AssertionError as exc:
        raise AssertionError(f"seed {seed}; states {dict(states)}; logs in {fleet.logs}\n{exc}") from None
    print(f"chaos: {summary}")
    print(f"chaos: {sampler.samples} permit samples, peak held per key {dict(sampler.peak)}")
    assert not sampler.violations, f"seed {seed}: {sampler.violations[:10]}"
    assert sampler.samples > 20, sampler.samples
    # the drops did what they are for: leases were resumed on new sessions, and some started leases were lost
    assert summary["leases_moved_to_a_later_instance"] >= 1, f"seed {seed}: {summary}"
    assert summary["attempt_statuses"].get("EXPIRED", 0) >= 1, f"seed {seed}: {summary}"
