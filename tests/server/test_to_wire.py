"""Acks and offers built from the store's results without the contract's checks are the same values as checked ones."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from pulse_trio.contract import messages as m
from pulse_trio.contract.encoder import command_result_body, encode_bytes
from pulse_trio.contract.jsontext import JsonText
from pulse_trio.server import to_wire
from pulse_trio.store.engine import results as r

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=dt.timezone.utc)
TASK, LEASE = "tsk_01M9166F3WH59Z3TXNM3DAFWJ6", "lse_01M9166F3WH59Z3TXNM3DAFWJ7"


@pytest.mark.parametrize("view", [
    None,
    r.LeaseView(LEASE, TASK, 2, 7, "RUNNING", NOW + dt.timedelta(seconds=30)),
    r.LeaseView(LEASE, TASK, 5, 7, "RUNNING", NOW, cancel_requested_at=NOW),
])
def test_a_trusted_ack_equals_the_checked_one_and_encodes_the_same(view):
    ack = r.CommandAck(r.CommandReceipt("task.renew", TASK, LEASE, 4, NOW, True), view)
    checked = m.CommandResult(
        m.Receipt("task.renew", TASK, LEASE, 4, NOW, True),
        None if view is None else m.Lease(view.lease_id, view.task_id, view.revision, view.epoch, view.state,
                                          view.expires_at, cancel_requested_at=view.cancel_requested_at))
    trusted = to_wire.command_result(ack)
    assert trusted == checked and type(trusted) is m.CommandResult
    assert command_result_body(trusted) == command_result_body(checked)
    with pytest.raises(dataclasses.FrozenInstanceError):
        trusted.receipt.revision = 9  # type: ignore[misc]


@pytest.mark.parametrize("snapshot", [
    r.TaskSnapshot(TASK, "billing", "charge", '{"amount":12,"currency":"EUR"}', 1, 3, TASK, NOW,
                   NOW + dt.timedelta(seconds=5), 0, None, None, False, None),
    r.TaskSnapshot(TASK, "billing", "charge", "null", 2, 5, "order-17", NOW, NOW, 9, "account:42", 3, True,
                   "tsk_01M9166F3WH59Z3TXNM3DAFWJ5"),
], ids=["unkeyed", "keyed-retry"])
def test_a_trusted_offer_equals_the_checked_one_and_encodes_the_same(snapshot):
    """Offers skip the per-field checks (their values were checked at submit, or made by the store)."""
    view = r.LeaseView(LEASE, TASK, 1, 7, "OFFERED", NOW + dt.timedelta(seconds=10))
    secret = "s" * 43
    task, lease = to_wire.assigned_task(snapshot), to_wire.lease(view, secret=secret)
    checked_task = m.AssignedTask(
        snapshot.task_id, snapshot.queue, snapshot.kind, JsonText(snapshot.payload_json), snapshot.attempt,
        snapshot.max_attempts, snapshot.idempotency_key, snapshot.created_at, snapshot.due_at, snapshot.priority,
        snapshot.concurrency_key, snapshot.concurrency_token, snapshot.effect_uncertain, snapshot.retry_of)
    checked_lease = m.Lease(view.lease_id, view.task_id, view.revision, view.epoch, view.state, view.expires_at,
                            lease_secret=secret)
    assert (task, lease) == (checked_task, checked_lease)
    assert (type(task), type(lease)) == (m.AssignedTask, m.Lease)
    frame = dict(id="frm_01M9166F3WH59Z3TXNM3DAFWJ8", session_id="ses_01M9166F3WH59Z3TXNM3DAFWJ9")
    assert encode_bytes(m.TaskAssign(**frame, task=task, lease=lease)) == \
        encode_bytes(m.TaskAssign(**frame, task=checked_task, lease=checked_lease))
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.attempt = 9  # type: ignore[misc]
