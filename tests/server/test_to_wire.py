"""Acks built from the store's results without the contract's checks are the same values as checked ones."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from pulse_trio.contract import messages as m
from pulse_trio.contract.encoder import command_result_body
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
