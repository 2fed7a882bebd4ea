"""Chart `lease`: task.start / task.renew / task.finish, every refusal, receipts and replay."""

from __future__ import annotations

import datetime as dt

import pytest

from pulse_trio.store import Refusal, lapse
from pulse_trio.store.engine.tx import Tx


def code(result) -> str | None:
    return result.code if isinstance(result, Refusal) else None


def test_start_authorizes_and_records_the_attempt(world):
    w = world.worker("q")
    offer = world.offer(w)
    world.advance(500)
    result = world.start(w, offer)
    assert result.receipt.command == "task.start" and result.receipt.revision == 1
    assert not result.receipt.duplicate and result.receipt.committed_at == world.now
    assert result.lease.state == "RUNNING" and result.lease.revision == 2
    assert result.lease.expires_at == world.now + dt.timedelta(seconds=30)
    view = world.task(offer.task.task_id)
    assert view.task.state == "RUNNING" and view.task.attempt == 1
    assert [(a.attempt, a.status) for a in view.attempts] == [(1, "RUNNING")]


def test_a_start_writes_the_lease_alone_and_every_reader_sees_the_task_running(world):
    """The task row stays held (OFFERED) at its last ended attempt; the views, the listing and its
    state filter, a duplicate submit's answer and a cancel's answer take RUNNING and the attempt from
    the live lease. The finish moves the row on at the lease's attempt."""
    from pulse_trio.store import NewTask, request_cancel, submit
    from pulse_trio.store.views.queries import list_tasks

    w = world.worker("q")
    offered = world.offer(w, idempotency_key="offered")
    running = world.running(w, idempotency_key="running")
    assert world.sql("SELECT state, attempt FROM tasks WHERE task_id = %s", (running.task.task_id,)) == [
        ("OFFERED", 0)]
    assert (world.task(running.task.task_id).task.state, world.task(running.task.task_id).task.attempt) == (
        "RUNNING", 1)
    assert (world.task(offered.task.task_id).task.state, world.task(offered.task.task_id).task.attempt) == (
        "OFFERED", 0)
    def listing(**filters):
        return world.store.run_sync(list_tasks, **filters)

    listed = {t.task_id: (t.state, t.attempt) for t in listing(queue="q")}
    assert listed == {offered.task.task_id: ("OFFERED", 0), running.task.task_id: ("RUNNING", 1)}
    assert [t.task_id for t in listing(state="RUNNING")] == [running.task.task_id]
    assert [t.task_id for t in listing(state="OFFERED")] == [offered.task.task_id]
    (again,) = world.run(submit, tasks=[NewTask("q", "k", idempotency_key="running")])
    assert (again.task_id, again.state, again.created) == (running.task.task_id, "RUNNING", False)
    (again,) = world.run(submit, tasks=[NewTask("q", "k", idempotency_key="offered")])
    assert (again.task_id, again.state) == (offered.task.task_id, "OFFERED")
    cancel = world.run(request_cancel, task_id=running.task.task_id)
    assert (cancel.task_state, cancel.intent_state) == ("RUNNING", "REQUESTED")
    assert world.sql("SELECT task_state FROM cancel_intents") == [("RUNNING",)]
    assert world.run(request_cancel, task_id=running.task.task_id).task_state == "RUNNING", "a repeat sees it too"
    world.finish(w, running, 2, status="CANCELLED", error_code="cancelled")
    assert world.sql("SELECT state, attempt, outcome_attempt FROM tasks WHERE task_id = %s",
                     (running.task.task_id,)) == [("CANCELLED", 1, 1)]
    view = world.task(running.task.task_id)
    assert (view.task.state, view.task.attempt) == ("CANCELLED", 1)


@pytest.mark.parametrize("how,expected", [
    ("wrong_secret", "lease_not_found"),
    ("unknown_lease", "lease_not_found"),
    ("other_task", "lease_not_found"),
    ("wrong_owner", "lease_not_owned"),
    ("future_revision", "revision_conflict"),
])
def test_start_refusals(world, how, expected):
    w = world.worker("q")
    offer = world.offer(w)
    other = world.worker("q")
    if how == "wrong_secret":
        result = world.start(w, offer, secret="A" * 43)
    elif how == "unknown_lease":
        from pulse_trio.store import StartCommand, start
        result = world.run(start, commands=[StartCommand(w.session_id, offer.task.task_id, "lse_NOPE",
                                                         offer.lease_secret, 1)])[0]
    elif how == "other_task":
        result = world.start(w, offer, task_id="tsk_OTHER")
    elif how == "wrong_owner":
        result = world.start(other, offer)
    else:
        result = world.start(w, offer, revision=7)
    assert code(result) == expected
    assert world.task(offer.task.task_id).task.state == "OFFERED", "a refusal changes nothing"
    assert world.sql("SELECT COUNT(*) FROM command_receipts") == [(0,)]


def test_start_after_the_start_timeout_is_lease_expired_before_and_after_the_timer(world):
    w = world.worker("q")
    offer = world.offer(w)
    world.advance(30_000)
    assert code(world.start(w, offer)) == "lease_expired"
    world.run(lapse)
    assert code(world.start(w, offer)) == "lease_expired"


def test_start_twice_and_renew_before_start_are_invalid_transitions(world):
    w = world.worker("q")
    offer = world.offer(w)
    assert code(world.renew(w, offer, 1)) == "invalid_transition"
    assert code(world.finish(w, offer, 1)) == "invalid_transition"
    world.start(w, offer)
    assert code(world.start(w, offer, revision=2)) == "invalid_transition"


def test_renew_extends_and_increments(world):
    w = world.worker("q")
    offer = world.running(w)
    world.advance(10_000)
    renewed = world.renew(w, offer, 2)
    assert renewed.lease.revision == 3 and renewed.lease.expires_at == world.now + dt.timedelta(seconds=30)
    assert renewed.receipt.command == "task.renew" and renewed.receipt.revision == 2


def _check_refusals(world, send, *, wrong_secret: str, wrong_revision: int, expire_ms: int) -> None:
    """What a running lease's command is refused for: a wrong secret, another session, a wrong revision, expiry."""
    w = world.worker("q")
    offer = world.running(w)
    assert code(send(w, offer, 2, secret=wrong_secret)) == "lease_not_found"
    assert code(send(world.worker("q"), offer, 2)) == "lease_not_owned"
    assert code(send(w, offer, wrong_revision)) == "revision_conflict"
    world.advance(expire_ms)
    assert code(send(w, offer, 2)) == "lease_expired"


def test_renew_refusals(world):
    _check_refusals(world, world.renew, wrong_secret="B" * 43, wrong_revision=3, expire_ms=30_000)


def test_finish_succeeded_records_the_outcome_and_ends_the_lease(world):
    w = world.worker("q")
    offer = world.running(w)
    result = world.finish(w, offer, 2, result='{"n": 1.10}')
    assert result.lease is None and result.receipt.command == "task.finish"
    view = world.task(offer.task.task_id)
    assert view.task.state == "SUCCEEDED" and view.outcome.result_json == '{"n": 1.10}'
    assert view.attempts[0].status == "SUCCEEDED"
    assert world.sql("SELECT state, revision FROM leases") == [("FINISHED", 3)]
    assert code(world.renew(w, offer, 3)) == "invalid_transition"


def test_finish_failed_retryable_schedules_the_next_attempt_with_backoff(world):
    from pulse_trio.store import promote

    w = world.worker("q")
    offer = world.running(w, max_attempts=2)
    world.finish(w, offer, 2, status="FAILED", error_code="http_503", retryable=True)
    view = world.task(offer.task.task_id)
    assert view.task.state == "SCHEDULED" and view.outcome is None
    delay = view.task.due_at - world.now
    assert dt.timedelta(milliseconds=500) <= delay <= dt.timedelta(milliseconds=1000)
    world.advance(1000)
    world.run(promote)
    (second,) = world.assign(w)
    assert second.task.attempt == 2
    world.start(w, second)
    world.finish(w, second, 2, status="FAILED", error_code="http_503", retryable=True)
    final = world.task(offer.task.task_id)
    assert final.task.state == "FAILED" and final.outcome.error_code == "http_503", "attempts exhausted"
    assert [a.status for a in final.attempts] == ["FAILED", "FAILED"]


def test_backoff_grows_and_is_capped():
    from pulse_trio.store.task.steps import backoff_ms

    class T:
        task_id = "tsk_X"
        backoff_initial_ms, backoff_factor, backoff_max_ms = 1000, 2.0, 5000

    delays = [backoff_ms(T, n) for n in range(1, 8)]
    for n, d in enumerate(delays, start=1):
        base = min(1000 * 2 ** (n - 1), 5000)
        assert base / 2 <= d <= base


@pytest.mark.parametrize("status,state,uncertain", [
    ("FAILED", "FAILED", False), ("UNKNOWN", "UNKNOWN", True),
])
def test_finish_terminal_failures(world, status, state, uncertain):
    w = world.worker("q")
    offer = world.running(w)
    world.finish(w, offer, 2, status=status, error_code="bad")
    view = world.task(offer.task.task_id)
    assert view.task.state == state and view.outcome.effect_uncertain is uncertain


def test_finish_cancelled_without_an_intent_is_refused(world):
    w = world.worker("q")
    offer = world.running(w)
    assert code(world.finish(w, offer, 2, status="CANCELLED", error_code="stopped")) == "cancel_not_requested"
    assert world.task(offer.task.task_id).task.state == "RUNNING"


def test_finish_refusals(world):
    _check_refusals(world, world.finish, wrong_secret="C" * 43, wrong_revision=5, expire_ms=30_001)


# -- replay -----------------------------------------------------------------------
def test_replayed_start_gets_the_stored_receipt_with_the_lease(world):
    w = world.worker("q")
    offer = world.offer(w)
    first = world.start(w, offer)
    world.advance(100)
    again = world.start(w, offer)
    assert again.receipt.duplicate and again.receipt.committed_at == first.receipt.committed_at
    assert again.lease.revision == 2, "still held: the current lease comes along"


def test_replayed_finish_has_no_lease_and_other_content_conflicts(world):
    w = world.worker("q")
    offer = world.running(w)
    world.finish(w, offer, 2, result='{"a":1}')
    again = world.finish(w, offer, 2, result='{"a":1}')
    assert again.receipt.duplicate and again.lease is None
    assert code(world.finish(w, offer, 2, result='{"a":2}')) == "revision_conflict"
    assert code(world.finish(w, offer, 2, status="FAILED", result='{"a":1}')) == "revision_conflict"
    assert code(world.renew(w, offer, 2)) == "revision_conflict", "another command at a used revision"


def test_an_outcome_digest_is_the_same_whether_kept_or_made_afresh():
    """Short outcomes are digested once and kept: each must still get exactly its own digest."""
    from pulse_trio.store.engine.inputs import FinishReport
    from pulse_trio.store.lease.leases import SHORT_OUTCOME_CHARS, _digest, outcome_digest

    reports = [FinishReport("SUCCEEDED", "null"), FinishReport("SUCCEEDED", "1"),
               FinishReport("FAILED", "null", "card_declined", "declined", True),
               FinishReport("FAILED", "null", "card_declined", "declined", False),
               FinishReport("FAILED", "null", "card_declined", "x" * SHORT_OUTCOME_CHARS, False),
               FinishReport("SUCCEEDED", '"' + "x" * SHORT_OUTCOME_CHARS + '"')]
    for report in reports * 2:
        assert outcome_digest(report) == _digest([report.status, report.error_code or "", report.error_message or "",
                                                  "1" if report.retryable else "0", report.result_json])
    assert len({outcome_digest(report) for report in reports}) == len(reports)


def test_replay_of_a_renew_after_the_lease_moved_gives_no_lease(world):
    from pulse_trio.store import resume

    old = world.worker("q")
    offer = world.running(old)
    world.renew(old, offer, 2)
    new = world.worker("q")
    world.run(resume, request=world.resume_request(new, old, offer), start_timeout_ms=30_000)
    again = world.renew(old, offer, 2)
    assert again.receipt.duplicate and again.lease is None, "a receipt never grants execution"
    assert code(world.renew(old, offer, 4)) == "lease_not_owned"


def test_replay_needs_the_secret(world):
    w = world.worker("q")
    offer = world.offer(w)
    world.start(w, offer)
    assert code(world.start(w, offer, secret="D" * 43)) == "lease_not_found"


def test_stale_revision_without_a_receipt_conflicts(world):
    from pulse_trio.store import resume

    old = world.worker("q")
    offer = world.running(old)  # revision 2
    new = world.worker("q")
    world.run(resume, request=world.resume_request(new, old, offer), start_timeout_ms=30_000)  # 3, no receipt
    assert code(world.renew(new, offer, 2)) == "revision_conflict"
    assert world.renew(new, offer, 3).lease.revision == 4


# -- batches ------------------------------------------------------------------------
def test_a_batch_of_starts_shares_one_transaction_and_refusals_stay_individual(world):
    from pulse_trio.store import start

    w = world.worker("q")
    for _ in range(4):
        world.submit()
    offers = world.assign(w, 4)
    commands = [world.command(w, o, 1) for o in offers]
    commands[1] = world.command(w, offers[1], 1, secret="E" * 43)
    commands[2] = world.command(w, offers[2], 5)
    results = world.run(start, commands=commands)
    assert [code(r) for r in results] == [None, "lease_not_found", "revision_conflict", None]
    assert [r.lease.revision for r in (results[0], results[3])] == [2, 2]
    states = dict(world.sql("SELECT lease_id, state FROM leases"))
    assert [states[o.lease.lease_id] for o in offers] == ["RUNNING", "OFFERED", "OFFERED", "RUNNING"]
    again = world.run(start, commands=[world.command(w, o, 1) for o in offers])
    assert [r.receipt.duplicate for r in again] == [True, False, False, True]


def test_a_batch_of_finishes_with_mixed_outcomes(world):
    from pulse_trio.store import FinishReport, RenewCommand, finish, renew

    w = world.worker("q", keys=True)
    offers = [world.running(w, queue="q", concurrency_key=f"k{i}", max_attempts=2) for i in range(4)]
    reports = [FinishReport("SUCCEEDED", '{"i":0}'), FinishReport("FAILED", "{}", "x", None, True),
               FinishReport("UNKNOWN", "{}", "lost"), FinishReport("CANCELLED", "{}", "stop")]
    results = world.run(finish, commands=[world.command(w, o, 2, report=r) for o, r in zip(offers, reports)])
    assert [code(r) for r in results] == [None, None, None, "cancel_not_requested"]
    states = [world.task(o.task.task_id).task.state for o in offers]
    assert states == ["SUCCEEDED", "SCHEDULED", "UNKNOWN", "RUNNING"]
    assert world.sql("SELECT COUNT(*) FROM key_permits WHERE state = 'RELEASED'") == [(3,)]
    # each lease keeps its own outcome, and each finish replays as itself (and only as itself)
    attempts = dict(world.sql("SELECT lease_id, CONCAT(status, ' ', COALESCE(error_code, '-'), ' ', result)"
                              " FROM task_attempts"))
    assert attempts == {offers[0].lease.lease_id: 'SUCCEEDED - {"i":0}', offers[1].lease.lease_id: "FAILED x {}",
                        offers[2].lease.lease_id: "UNKNOWN lost {}"}
    replays = world.run(finish, commands=[world.command(w, o, 2, report=r)
                                          for o, r in zip(offers[:3], reports[:3])])
    assert [r.receipt.duplicate for r in replays] == [True, True, True]
    swapped = world.run(finish, commands=[world.command(w, offers[0], 2, report=reports[2])])
    assert code(swapped[0]) == "revision_conflict"
    renewed = world.run(renew, commands=[world.command(w, offers[3], 2, kind=RenewCommand)])
    assert renewed[0].lease.revision == 3


def test_a_batch_may_not_carry_two_commands_for_one_lease(world):
    from pulse_trio.store import start

    w = world.worker("q")
    offer = world.offer(w)
    with pytest.raises(ValueError):
        world.run(start, commands=[world.command(w, offer, 1), world.command(w, offer, 1)])


def test_run_batch_shares_a_commit_between_different_functions(world):
    from pulse_trio.store import FinishReport, finish, request_cancel, start

    w = world.worker("q")
    running = world.running(w)
    offered = world.offer(w)
    other = world.submit()
    before = world.store.statistics().commits
    results = world.store.run_batch_sync([
        (finish, dict(commands=[world.command(w, running, 2, report=FinishReport("SUCCEEDED", "1"))],
                      now=world.now)),
        (start, dict(commands=[world.command(w, offered, 1)], now=world.now)),
        (request_cancel, dict(task_id=other, now=world.now)),
        (start, dict(commands=[world.command(w, offered, 9)], now=world.now)),
    ])
    assert world.store.statistics().commits == before + 1
    assert results[0][0].lease is None and results[1][0].lease.state == "RUNNING" and results[2].changed
    assert code(results[3][0]) == "revision_conflict"


class _FinishAfterFirstRead(Tx):
    """A reader's transaction during which a finish commits, right after the reader's first statement."""

    def __init__(self, cursor, finish) -> None:
        super().__init__(cursor)
        self._finish = finish

    def _after(self, result):
        if self._finish is not None:
            finish, self._finish = self._finish, None
            finish()
        return result

    def one(self, sql, args=()):
        return self._after(super().one(sql, args))

    def all(self, sql, args=()):
        return self._after(super().all(sql, args))


@pytest.mark.parametrize("read", ["view", "listing"])
def test_a_reader_meeting_a_finish_never_shows_a_running_task_offered_again(world, read):
    """The task's row and its live lease come from one statement: a finish committed after it leaves the
    reader with RUNNING (what that snapshot held), never the held row's OFFERED at the ended attempt count."""
    from pulse_trio.dburl import connect
    from pulse_trio.store.engine.pool import session_setup
    from pulse_trio.store.views.queries import list_tasks
    from pulse_trio.store.views.task import get_task

    w = world.worker("q")
    running = world.running(w)
    conn = connect(world.db)
    try:
        with conn.cursor() as cur:
            for statement in session_setup():
                cur.execute(statement)
            tx = _FinishAfterFirstRead(cur, lambda: world.finish(w, running, 2))
            if read == "view":
                task = get_task(tx, task_id=running.task.task_id).task
            else:
                (task,) = list_tasks(tx, state="RUNNING")
        conn.commit()
    finally:
        conn.close()
    assert (task.state, task.attempt) == ("RUNNING", 1)
    assert world.task(running.task.task_id).task.state == "SUCCEEDED", "the finish did commit in between"
