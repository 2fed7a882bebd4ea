"""The inbox on its own: what a post counts at once, one wake-up per burst, and a closed inbox drops safely."""

from __future__ import annotations

import logging
import types

import trio
import trio.testing

import contract_support as cs
from pulse_trio.contract import messages as m
from pulse_trio.server import session_inbox as si
from pulse_trio.server.session_inbox import SessionInbox
from pulse_trio.store.engine.results import AssignResult


def _inbox() -> tuple[SessionInbox, dict[str, list]]:
    seen: dict[str, list] = {"counted": [], "ended": [], "observed": [], "refreshed": []}
    inbox = SessionInbox(count_command=lambda request, outcome: seen["counted"].append(request),
                         task_ended=seen["ended"].append,
                         observe_assign=lambda offer, now: seen["observed"].append(offer),
                         now=lambda: 0, refresh=lambda: seen["refreshed"].append(True))
    return inbox, seen


def _offers(*lease_ids: str) -> AssignResult:
    return AssignResult(tuple(types.SimpleNamespace(lease=types.SimpleNamespace(lease_id=i)) for i in lease_ids), 0)


def _notice() -> object:
    return types.SimpleNamespace(task_id="tsk_1", lease_id="lea_1")


async def test_a_burst_of_posts_is_taken_at_one_wake_up_and_counts_from_the_post_on():
    inbox, seen = _inbox()
    taken: list[list] = []

    async def results_task():
        while True:
            taken.append(await inbox.take())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(results_task)
        await trio.testing.wait_all_tasks_blocked()
        inbox.offers_committed(_offers("lea_a", "lea_b"))
        inbox.leases_uncertain(["lea_c"])
        inbox.lease_ended("lea_x", news=True)
        inbox.reconcile(frozenset({"lea_y"}), frozenset())
        inbox.notify_cancel(_notice())
        inbox.drain_hinted()
        inbox.shutdown()
        inbox.token_revoked()
        # Counted before the results task runs: a claim built now sees them; a drain closes the slots.
        assert inbox.leases_posted == 3 and inbox.drain_posted
        assert len(seen["refreshed"]) == 3  # offers, uncertain leases, the drain: what the dispatcher reads
        assert len(seen["observed"]) == 2  # measured at the door
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert len(taken) == 1, taken
    heads = [head for head, _ in taken[0]]
    assert heads == [si.OFFERS, si.UNCERTAIN, si.ENDED, si.RECONCILE, si.CANCEL, si.DRAIN, si.SHUTDOWN,
                     si.REVOKED]
    assert taken[0][2][1] == ("lea_x", True)
    assert inbox.leases_posted == 0 and not inbox.drain_posted


async def test_a_closed_inbox_drops_every_post_but_the_posters_share(caplog):
    inbox, seen = _inbox()
    inbox.offers_committed(_offers("lea_posted"))
    with caplog.at_level(logging.INFO, logger="pulse_trio.connection"):
        inbox.close()
        assert "offer lea_posted not delivered; it will lapse" in caplog.text  # posted, never pushed
        finish = m.TaskFinish(id="f1", session_id=cs.SESSION, task_id=cs.TASK, lease_id=cs.LEASE,
                              lease_secret=cs.SECRET_B, revision=2, status="SUCCEEDED", result="{}")
        ack = types.SimpleNamespace(receipt=types.SimpleNamespace(duplicate=False))
        inbox.command_done(finish, ack)
        inbox.offers_committed(_offers("lea_late"))
        assert "offer lea_late not delivered; it will lapse" in caplog.text
    inbox.leases_uncertain(["lea_c"])
    inbox.lease_ended("lea_x")
    inbox.reconcile(frozenset({"lea_y"}), frozenset())
    inbox.notify_cancel(_notice())
    inbox.drain_hinted()
    inbox.shutdown()
    assert inbox._items == [] and inbox.leases_posted == 0 and not inbox.drain_posted
    # What is the service's was taken at the door: the command counted, its task's end told, the offers measured.
    assert seen["counted"] == [finish] and seen["ended"] == [cs.TASK]
    assert len(seen["observed"]) == 2
    assert len(seen["refreshed"]) == 1  # only the offers posted before the close
