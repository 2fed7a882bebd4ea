"""Store results to wire messages: the one place the two vocabularies meet.

The store speaks rows and refusals; the contract speaks frozen messages.
Converting here keeps both sides ignorant of each other.
"""

from __future__ import annotations

import datetime as dt

from pulse_trio.contract import messages as m
from pulse_trio.contract.jsontext import JsonText
from pulse_trio.store import results as r


def lease(view: r.LeaseView, *, secret: str | None = None) -> m.Lease:
    return m.Lease(
        lease_id=view.lease_id, task_id=view.task_id, revision=view.revision, epoch=view.epoch,
        state=view.state, expires_at=view.expires_at, lease_secret=secret,
        cancel_requested_at=view.cancel_requested_at,
    )


def assigned_task(task: r.TaskSnapshot) -> m.AssignedTask:
    # The payload was validated and canonicalised at submit and is stored as
    # that exact text, so it is trusted here rather than scanned again.
    return m.AssignedTask(
        task_id=task.task_id, queue=task.queue, kind=task.kind, payload=JsonText(task.payload_json),
        attempt=task.attempt, max_attempts=task.max_attempts, idempotency_key=task.idempotency_key,
        created_at=task.created_at, due_at=task.due_at, priority=task.priority,
        concurrency_key=task.concurrency_key, concurrency_token=task.concurrency_token,
        effect_uncertain=task.effect_uncertain, retry_of=task.retry_of,
    )


def command_result(result: r.CommandAck) -> m.CommandResult:
    receipt = result.receipt
    return m.CommandResult(
        receipt=m.Receipt(command=receipt.command, task_id=receipt.task_id, lease_id=receipt.lease_id,
                          revision=receipt.revision, committed_at=receipt.committed_at,
                          duplicate=receipt.duplicate),
        lease=lease(result.lease) if result.lease is not None else None,
    )


def welcome(instance: r.InstanceView, *, lease_ttl_ms: int, start_timeout_ms: int, now: dt.datetime,
            secret: str | None = None) -> m.Welcome:
    return m.Welcome(
        instance_id=instance.instance_id, epoch=instance.epoch, capacity=instance.capacity,
        drain=instance.drain, active_leases=instance.active_leases,
        lease_ttl_ms=lease_ttl_ms, start_timeout_ms=start_timeout_ms,
        limits=m.ServerLimits(), server_time=now, instance_secret=secret, sequence=instance.sequence,
    )
