"""Store results to wire messages: the one place the two vocabularies meet.

The store speaks rows and refusals; the contract speaks frozen messages.
Converting here keeps both sides ignorant of each other.

Acks (receipt and lease) and offers (task and lease) are built from values
that were checked on the way in (the command's own ids, decoded by the
strict reader; a task's fields, validated at submit and stored as that
exact text) or that the store just wrote or made (ids, secrets, revision,
state, times, epoch): they are made without the contract's per-field
checks (``contract.trusted``), which guard what a peer or a caller builds,
not what the store hands back. Welcomes, one per connection, still go
through them.
"""

from __future__ import annotations

import datetime as dt

from pulse_trio.contract import messages as m
from pulse_trio.contract.jsontext import JsonText
from pulse_trio.contract.trusted import trusted
from pulse_trio.store.engine import results as r


def lease(view: r.LeaseView, *, secret: str | None = None) -> m.Lease:
    return _LEASE(view.lease_id, view.task_id, view.revision, view.epoch, view.state, view.expires_at, secret,
                  view.cancel_requested_at)


def assigned_task(task: r.TaskSnapshot) -> m.AssignedTask:
    # The payload was validated and canonicalised at submit and is stored as
    # that exact text, so it is trusted here rather than scanned again.
    return _ASSIGNED_TASK(task.task_id, task.queue, task.kind, JsonText(task.payload_json), task.attempt,
                          task.max_attempts, task.idempotency_key, task.created_at, task.due_at, task.priority,
                          task.concurrency_key, task.concurrency_token, task.effect_uncertain, task.retry_of)


_RECEIPT = trusted(m.Receipt)
_LEASE = trusted(m.Lease)
_ASSIGNED_TASK = trusted(m.AssignedTask)
_COMMAND_RESULT = trusted(m.CommandResult)


def command_result(result: r.CommandAck) -> m.CommandResult:
    receipt = result.receipt
    view = result.lease
    return _COMMAND_RESULT(
        _RECEIPT(receipt.command, receipt.task_id, receipt.lease_id, receipt.revision, receipt.committed_at,
                 receipt.duplicate),
        None if view is None else lease(view),
    )


def welcome(instance: r.InstanceView, *, lease_ttl_ms: int, start_timeout_ms: int, now: dt.datetime,
            secret: str | None = None) -> m.Welcome:
    return m.Welcome(
        instance_id=instance.instance_id, epoch=instance.epoch, capacity=instance.capacity,
        drain=instance.drain, active_leases=instance.active_leases,
        lease_ttl_ms=lease_ttl_ms, start_timeout_ms=start_timeout_ms,
        limits=m.ServerLimits(), server_time=now, instance_secret=secret, sequence=instance.sequence,
    )
