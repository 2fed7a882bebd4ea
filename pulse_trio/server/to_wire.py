"""Store results to wire messages: the one place the two vocabularies meet.

The store speaks rows and refusals; the contract speaks frozen messages.
Converting here keeps both sides ignorant of each other.

A lease command's ack (receipt and lease) is built from values that were
checked on the way in (the command's own ids, decoded by the strict
reader) or that the store just wrote (revision, state, times, epoch): it is
made without the contract's per-field checks, which guard what a peer or a
caller builds, not what the store hands back. Offers and welcomes, rare by
comparison, still go through them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from pulse_trio.contract import messages as m
from pulse_trio.contract.jsontext import JsonText
from pulse_trio.store.engine import results as r


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


class _Trusted:
    """Builds a frozen contract value field by field, skipping its ``__post_init__`` checks.

    The object is as frozen as one made by its constructor; only the checks
    are not run again (see the module docstring for which values qualify).
    """

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self._setters = tuple(getattr(cls, f.name).__set__ for f in dataclasses.fields(cls))

    def __call__(self, *values: Any) -> Any:
        made = object.__new__(self.cls)
        for set_slot, value in zip(self._setters, values, strict=True):
            set_slot(made, value)
        return made


_RECEIPT = _Trusted(m.Receipt)
_LEASE = _Trusted(m.Lease)
_COMMAND_RESULT = _Trusted(m.CommandResult)


def command_result(result: r.CommandAck) -> m.CommandResult:
    receipt = result.receipt
    view = result.lease
    return _COMMAND_RESULT(
        _RECEIPT(receipt.command, receipt.task_id, receipt.lease_id, receipt.revision, receipt.committed_at,
                 receipt.duplicate),
        None if view is None else _LEASE(view.lease_id, view.task_id, view.revision, view.epoch, view.state,
                                         view.expires_at, None, view.cancel_requested_at),
    )


def welcome(instance: r.InstanceView, *, lease_ttl_ms: int, start_timeout_ms: int, now: dt.datetime,
            secret: str | None = None) -> m.Welcome:
    return m.Welcome(
        instance_id=instance.instance_id, epoch=instance.epoch, capacity=instance.capacity,
        drain=instance.drain, active_leases=instance.active_leases,
        lease_ttl_ms=lease_ttl_ms, start_timeout_ms=start_timeout_ms,
        limits=m.ServerLimits(), server_time=now, instance_secret=secret, sequence=instance.sequence,
    )
