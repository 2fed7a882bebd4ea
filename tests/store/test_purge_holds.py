"""What the purge holds back, and that its dry run reports exactly that (docs/operations.md §10).

One queue per situation, each with one ended task past its retention. The
situations a task's life reaches are built by its steps; the live rows the
purge guards against that no step here leaves on an ended task (a live
lease, a held permit, an intent still requested or notified) are written
into a finished task's own rows.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pulse_trio.client import Client
from pulse_trio.store import expire, request_cancel

LEASE_TTL_MS = 10_000
CANCEL_GRACE_MS = 5_000


def _finished(world, w, queue: str, **fields) -> str:
    offer = world.running(w, queue=queue, **fields)
    world.finish(w, offer, 2)
    return offer.task.task_id


def _set(*changes: tuple[str, str]) -> Callable:
    """A finished task whose rows are then put in these states, as (table, state)."""
    tables = {table for table, _ in changes}

    def build(world, w, queue: str) -> str:
        keyed = {"concurrency_key": f"key-{queue}"} if "key_permits" in tables else {}
        task_id = _finished(world, w, queue, **keyed)
        if "cancel_intents" in tables:
            world.sql("INSERT INTO cancel_intents (task_id, state, requested_at, task_state)"
                      " VALUES (%s, 'RESOLVED', %s, 'OFFERED')", (task_id, world.now.replace(tzinfo=None)))
        for table, state in changes:
            world.sql(f"UPDATE {table} SET state = %s WHERE task_id = %s", (state, task_id))
            assert world.sql(f"SELECT state FROM {table} WHERE task_id = %s", (task_id,)) == [(state,)]
        return task_id
    return build


def _released_permit(world, w, queue: str) -> str:
    return _finished(world, w, queue, concurrency_key=f"key-{queue}")


def _revoked_offer(world, w, queue: str) -> str:
    offer = world.offer(w, queue=queue)
    world.run(request_cancel, task_id=offer.task.task_id)  # CANCELLED, its lease REVOKED, the intent RESOLVED
    return offer.task.task_id


def _cancelled_while_running(world, w, queue: str) -> str:
    offer = world.running(w, queue=queue)
    world.run(request_cancel, task_id=offer.task.task_id)
    world.finish(w, offer, 2, status="CANCELLED", error_code="cancelled")  # the intent RESOLVED
    return offer.task.task_id


def _lost(keyed: bool = False) -> Callable:
    """A running task whose lease the expiry below ends (UNKNOWN; a permit QUARANTINED when keyed)."""
    def build(world, w, queue: str) -> str:
        key = {"concurrency_key": f"key-{queue}"} if keyed else {}
        return world.running(w, queue=queue, lease_ttl_ms=LEASE_TTL_MS, **key).task.task_id
    return build


def _escalated(world, w, queue: str) -> str:
    task_id = _lost()(world, w, queue)
    world.run(request_cancel, task_id=task_id)  # the expiry below escalates it at the grace deadline
    return task_id


#: queue -> (how its ended task is made, whether the purge holds it back)
SITUATIONS: dict[str, tuple[Callable, bool]] = {
    "lease-offered": (_set(("leases", "OFFERED")), True),
    "lease-running": (_set(("leases", "RUNNING")), True),
    "lease-finished": (_finished, False),
    "lease-revoked": (_revoked_offer, False),
    "lease-expired": (_lost(), False),
    "permit-held": (_set(("key_permits", "HELD")), True),
    "permit-quarantined": (_lost(keyed=True), True),
    "permit-released": (_released_permit, False),
    "intent-requested": (_set(("cancel_intents", "REQUESTED")), True),
    "intent-notified": (_set(("cancel_intents", "NOTIFIED")), True),
    "intent-resolved": (_cancelled_while_running, False),
    "intent-escalated": (_escalated, False),
    "held-thrice": (_set(("leases", "RUNNING"), ("key_permits", "HELD"), ("cancel_intents", "NOTIFIED")), True),
}


@pytest.fixture
def situations(world) -> dict[str, str]:
    """Every situation's ended task, by queue, all past a one-second retention."""
    world.setting("cancel_grace", CANCEL_GRACE_MS)
    w = world.worker(*SITUATIONS, capacity=len(SITUATIONS), keys=True)
    made = {queue: build(world, w, queue) for queue, (build, _) in SITUATIONS.items()}
    world.advance(LEASE_TTL_MS)
    assert world.run(expire).count == 3  # lease-expired, permit-quarantined, intent-escalated
    world.advance(2_000)  # the quarantine (a lease ttl) is still on
    assert all(world.task(t).task.state in ("SUCCEEDED", "UNKNOWN", "CANCELLED") for t in made.values())
    return made


def test_the_dry_run_reports_what_the_purge_then_holds_and_deletes(world, db, situations):
    """Each situation's task is held (it stays) or deleted, and the dry run said so beforehand."""
    with Client(db) as client:
        dry = client.purge(older_than=1, dry_run=True, now=world.now)
        real = client.purge(older_than=1, now=world.now)
    expected = {queue: held for queue, (_, held) in SITUATIONS.items()}
    said = {q: (e["due"], e["held"]) for q, e in dry["queues"].items()}
    done = {q: (e["tasks"], e["held"]) for q, e in real["queues"].items()}
    assert said == done == {queue: (0, 1) if held else (1, 0) for queue, held in expected.items()}
    stayed = {queue: bool(world.sql("SELECT 1 FROM tasks WHERE task_id = %s", (t,))) for queue, t in situations.items()}
    assert stayed == expected
    assert dry["due"]["tasks"] == real["purged"]["tasks"] == sum(not held for held in expected.values())
