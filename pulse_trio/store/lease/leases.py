"""Chart ``lease``: the worker's commands ``task.start``, ``task.renew``, ``task.finish``.

Each command locks its lease and task rows (one join, lease first), then
the chart's guards decide (``decide``, the only place they are evaluated):

1. an unknown lease, another task's lease or a wrong secret -> ``lease_not_found``
   (the trigger's first guard);
2. a refused command whose revision is older than the lease's, if a receipt
   is stored there, is a replay: the stored receipt comes back with
   ``duplicate=true`` if the content matches (and the lease only if the
   caller still holds it), else ``revision_conflict``. Every accepted
   command increments the revision, so the current revision can never have
   a receipt and the hot path skips this lookup. Timers and revoke do not
   touch the revision: a worker still holding revision N of a lapsed or
   revoked lease is told ``lease_expired`` / ``task_cancelled``;
3. otherwise the refusal stands, or the chart's move (``chart_write.move``)
   and the steps of the other charts run, all in this one transaction.

Receipts are durable without rows of their own on the hot path: the lease
row holds the start's (the revision it carried; its content is the lease
itself, its time ``started_at``) and the finish's (``revision - 1`` once
FINISHED, the outcome's digest, ``ended_at``), and the attempt's outcome
with it. Only renewals write a receipt row (``renew_receipts``).

Each function also takes a batch (``commands=``): the server may coalesce
commands that arrive together into one transaction. They share the locking
SELECT, one UPDATE per group of rows that change the same way, multi-row
INSERTs and the COMMIT; each command still gets its own result, and a
refused one writes nothing. That is how a task costs far fewer statements
than its three transitions would one by one (docs/storage.md §8).

Starts, renewals and finishes of a lease this process knows (``lease.known``)
first try the lean path: one guarded UPDATE that the database checks in place of
the locking SELECT and the decision (docs/storage.md §11). Whatever it does
not match goes through the steps above, so every refusal is theirs.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import functools
import hashlib
from collections.abc import Sequence

from pulse_trio.store.cancellation import intents as cancellation
from pulse_trio.store.engine import ids
from pulse_trio.store.key_permit import permits
from pulse_trio.store.lease import guards as lease_guards  # noqa: F401  (guards)
from pulse_trio.store.lease import sql
from pulse_trio.store.task import steps as task_steps
from pulse_trio.store.engine.chart_write import destination, move, try_move
from pulse_trio.store.lease.known import BOOK, KnownLease
from pulse_trio.store.engine.guard_context import LeaseContext
from pulse_trio.store.engine.registry import decide, screen, transition
from pulse_trio.store.engine.results import (
    LEASE_NOT_FOUND, REVISION_CONFLICT, CommandAck, CommandReceipt, LeaseView, Refusal,
)
from pulse_trio.store.engine.rows import (
    LEASE_COMMAND, LEASE_FULL, LEASE_KNOWN, TASK_COMMAND, TASK_KNOWN, TASK_LEAN, LeaseRow, TaskRow,
)
from pulse_trio.store.engine.inputs import FinishCommand, FinishReport, LeaseCommand, RenewCommand, StartCommand
from pulse_trio.store.engine.tx import ConcurrentChange, Tx, after_ms, db_time, py_time

#: What a finish records on its lease, column by column.
_OUTCOME_COLUMNS = ("status", "error_code", "error_message", "retryable", "result", "finish_digest")


def lock_lease(tx: Tx, lease_id: str) -> tuple[LeaseRow, TaskRow] | None:
    """Lock a lease and its task (in that order) and read both."""
    row = tx.one(sql.LOCK_LEASE_AND_TASK, (lease_id,))
    if row is None:
        return None
    return LEASE_FULL.build(row[:LEASE_FULL.width]), TASK_LEAN.build(row[LEASE_FULL.width:])


def lease_view(lease: LeaseRow, **changes) -> LeaseView:
    lease = dataclasses.replace(lease, **changes) if changes else lease
    return LeaseView(lease.lease_id, lease.task_id, lease.revision, lease.epoch, lease.state, lease.expires_at,
                     lease.cancel_requested_at)


def renewed_expiry(lease: LeaseRow, now: dt.datetime) -> dt.datetime:
    """now + ttl, never past the cancel grace deadline."""
    expires = after_ms(now, lease.ttl_ms)
    if lease.cancel_deadline is not None and lease.cancel_deadline < expires:
        return lease.cancel_deadline
    return expires


def outcome_digest(report: FinishReport) -> bytes:
    """What makes two finishes of one lease at one revision "the same": the exact outcome.

    Most finishes report one of a few short outcomes (a handler that returns
    nothing, a common error), so short ones are digested once and kept.
    """
    parts = (report.status, report.error_code or "", report.error_message or "", "1" if report.retryable else "0",
             report.result_json)
    if len(parts[2]) + len(parts[4]) <= SHORT_OUTCOME_CHARS:
        return _short_outcome_digest(parts)
    return _digest(parts)


#: An outcome whose message and result together are at most this long is digested once (and kept).
SHORT_OUTCOME_CHARS = 64


@functools.lru_cache(maxsize=256)
def _short_outcome_digest(parts: tuple[str, ...]) -> bytes:
    return _digest(parts)


def _digest(parts: Sequence[str]) -> bytes:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8")
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.digest()


def content_digest(command: str, cmd: LeaseCommand, report: FinishReport | None = None) -> bytes:
    """The digest a receipt row keeps: name, ids, revision and (finish) the exact outcome.

    Renewals are matched by it; finishes recorded before receipts moved
    into the lease row (migration 0008) carry it too.
    """
    parts = [command, cmd.task_id, cmd.lease_id, str(cmd.revision)]
    if report is not None:
        parts += [report.status, report.error_code or "", report.error_message or "",
                  "1" if report.retryable else "0", report.result_json]
    return _digest(parts)


def _holds(trigger: str, ctx: LeaseContext) -> bool:
    """The caller still holds the lease: it is live and the trigger's guards up to not_revoked hold.

    (Ownership and time, judged by the chart's own guards through ``screen``.)
    """
    return ctx.lease.live and screen("lease", trigger, ctx, through="not_revoked") is None


def _replay(tx: Tx, trigger: str, ctx: LeaseContext, cmd: LeaseCommand) -> CommandAck | Refusal | None:
    """The stored receipt at ``cmd.revision``, if there is one (see the module docstring)."""
    lease, report, command = ctx.lease, ctx.report, "task." + trigger
    state, revision, start_revision, started_at, finish_digest, ended_at = tx.one(sql.RECEIPTS_OF_LEASE, (cmd.lease_id,))
    if cmd.revision == start_revision:
        stored, digest, committed_at = "task.start", None, started_at
    elif state == "FINISHED" and cmd.revision == revision - 1 and finish_digest is not None:
        stored, digest, committed_at = "task.finish", bytes(finish_digest), ended_at
    else:
        row = tx.one(sql.RENEW_RECEIPT_AT, (cmd.lease_id, cmd.revision))
        if row is None:
            return None  # not a replay: the guards say why the revision is stale (lease_expired, ...)
        stored, digest, committed_at = row[0], bytes(row[1]), row[2]
    if stored != command:
        same = False
    elif stored == "task.start":
        same = True  # a start's content is its lease and revision, both matched already
    elif stored == "task.finish":  # (one recorded before migration 0008 kept the whole command's digest)
        same = digest in (outcome_digest(report), content_digest(command, cmd, report))
    else:
        same = digest == content_digest(command, cmd, report)
    if not same:
        return Refusal(REVISION_CONFLICT, f"revision {cmd.revision} is not the lease's current revision "
                                          f"({lease.revision}) nor a replay of what was committed there")
    # A re-run after our own lost COMMIT finds our receipt: it is not the caller's duplicate.
    receipt = CommandReceipt(command, cmd.task_id, cmd.lease_id, cmd.revision, py_time(committed_at), not tx.recovering)
    return CommandAck(receipt, lease_view(lease) if _holds(trigger, ctx) else None)


def lock_leases(tx: Tx, lease_ids: Sequence[str]) -> dict[str, tuple[LeaseRow, TaskRow]]:
    """Lock several leases and their tasks in one statement, in lease-id order."""
    if not lease_ids:
        return {}
    rows = tx.all(sql.LOCK_LEASES_AND_TASKS, (tuple(sorted(set(lease_ids))),))
    width = LEASE_COMMAND.width
    return {r[0]: (LEASE_COMMAND.build(r[:width]), TASK_COMMAND.build(r[width:])) for r in rows}


@dataclasses.dataclass(slots=True)
class Accepted:
    """A command of a batch that passed the guards: what its writes and its answer need.

    Not frozen: one is made per command, and a frozen dataclass's ``__init__`` costs more.
    """

    index: int  # its place in the batch, and so in the results
    command: LeaseCommand
    lease: LeaseRow
    task: TaskRow
    dest: str  # the lease state the chart's transition leads to
    report: FinishReport | None


def _screen(tx: Tx, trigger: str, commands: Sequence[LeaseCommand], reports: Sequence[FinishReport | None],
            now: dt.datetime) -> tuple[list, list[Accepted]]:
    """Lock every lease, answer replays and refusals; return (results, accepted commands)."""
    locked = lock_leases(tx, [c.lease_id for c in commands])
    results: list = [None] * len(commands)
    accepted: list[Accepted] = []
    for i, (cmd, report) in enumerate(zip(commands, reports, strict=True)):
        lease, task = locked.get(cmd.lease_id, (None, None))
        ctx = LeaseContext(lease=lease, task=task, task_id=cmd.task_id, lease_secret=cmd.lease_secret,
                           session_id=cmd.session_id, revision=cmd.revision, report=report, now=now)
        dest = decide("lease", trigger, lease.state if lease is not None else "NONE", ctx)
        if isinstance(dest, Refusal):
            # lease_secret_matches comes first and is the trigger's only lease_not_found: an unknown
            # lease or a wrong secret is refused before a replay can tell that the lease exists.
            if dest.code == LEASE_NOT_FOUND:
                results[i] = Refusal(LEASE_NOT_FOUND, "no such lease for this task, or the secret does not match")
                continue
            # A stale revision always fails revision_current (or an earlier guard): it may be a replay.
            replayed = _replay(tx, trigger, ctx, cmd) if cmd.revision < lease.revision else None
            results[i] = replayed if replayed is not None else dest
            continue
        accepted.append(Accepted(i, cmd, lease, task, dest, report))
    return results, accepted


def _renew_receipts(tx: Tx, accepted: Sequence[Accepted], now: dt.datetime) -> dict[int, CommandReceipt]:
    tx.write_many(
        sql.INSERT_RENEW_RECEIPTS,
        [(a.command.lease_id, a.command.revision, "task.renew", a.command.task_id,
          content_digest("task.renew", a.command), db_time(now)) for a in accepted])
    return _receipts("task.renew", accepted, now)


def _receipts(command: str, accepted: Sequence[Accepted], now: dt.datetime) -> dict[int, CommandReceipt]:
    return {a.index: CommandReceipt(command, a.command.task_id, a.command.lease_id, a.command.revision, now, False)
            for a in accepted}


def _batch(commands: Sequence[LeaseCommand]) -> Sequence[LeaseCommand]:
    if len({c.lease_id for c in commands}) != len(commands):
        raise ValueError("one command per lease in a batch (a lease's commands depend on each other's acks)")
    return commands


def _extend(tx: Tx, trigger: str, accepted: Sequence[Accepted], now: dt.datetime, sets: str = "",
            extra: tuple = ()) -> dict[int, dt.datetime]:
    """The chart's move, revision + 1 and a new expires_at.

    Grouped by (source, destination, expiry): leases that change the same
    way share one UPDATE.
    """
    expiries: dict[int, dt.datetime] = {}
    groups: dict[tuple[str, str, dt.datetime], list[str]] = collections.defaultdict(list)
    for a in accepted:
        expiries[a.index] = renewed_expiry(a.lease, now)
        groups[(a.lease.state, a.dest, expiries[a.index])].append(a.lease.lease_id)
    for (source, dest, expires), ids in groups.items():
        move(tx, "lease", trigger, ids, source=source, dest=dest,
             sets=f"{sets}revision = revision + 1, expires_at = %s", args=(*extra, db_time(expires)))
    return expiries


@transition("lease", "start")
def start(tx: Tx, *, now: dt.datetime, commands: Sequence[StartCommand]) -> list[CommandAck | Refusal]:
    """task.start: OFFERED -> RUNNING; the ack authorizes execution.

    The lease alone records the start: its task row stays OFFERED (readers
    take RUNNING and the attempt from this lease), so a start writes one
    row per command.

    A batch of commands shares the statements and the COMMIT (one result
    per command, in order; one command is a batch of one). Leases this
    process knows take the lean path (:func:`_lean_start`); the others, and
    any the database's guard did not match, the locking path.
    """
    batch = _batch(commands)
    results: list = [None] * len(batch)
    done = _lean_start(tx, batch, now, results)
    results, accepted = _screen_rest(tx, "start", batch, [None] * len(batch), now, results, done)
    if accepted:
        # start_revision takes the revision before revision + 1 does (SET runs left to right).
        expiries = _extend(tx, "start", accepted, now, "started_at = %s, start_revision = revision, ",
                           (db_time(now),))
        receipts = _receipts("task.start", accepted, now)
        for a in accepted:
            results[a.index] = CommandAck(
                receipts[a.index],
                lease_view(a.lease, state=a.dest, revision=a.lease.revision + 1, expires_at=expiries[a.index]),
                a.task.queue, max(a.task.due_at, a.task.created_at))
        _learn(accepted, now)
    return results


@transition("lease", "renew")
def renew(tx: Tx, *, now: dt.datetime, commands: Sequence[RenewCommand]) -> list[CommandAck | Refusal]:
    """task.renew: expires at now + ttl (capped by the cancel grace deadline), revision + 1.

    Known leases without a cancel intent take the lean path (:func:`_lean_renew`).
    """
    batch = _batch(commands)
    results: list = [None] * len(batch)
    done = _lean_renew(tx, batch, now, results)
    results, accepted = _screen_rest(tx, "renew", batch, [None] * len(batch), now, results, done)
    if accepted:
        expiries = _extend(tx, "renew", accepted, now)
        receipts = _renew_receipts(tx, accepted, now)
        for a in accepted:
            results[a.index] = CommandAck(
                receipts[a.index],
                lease_view(a.lease, state=a.dest, revision=a.lease.revision + 1, expires_at=expiries[a.index]))
        _learn(accepted, now)
    return results


@transition("lease", "finish")
def finish(tx: Tx, *, now: dt.datetime, commands: Sequence[FinishCommand]) -> list[CommandAck | Refusal]:
    """task.finish: outcome recorded, permit released, cancel intent resolved, retry scheduled if allowed."""
    batch = _batch(commands)
    reports = [c.report for c in batch]
    results: list = [None] * len(batch)
    done = _lean_finish(tx, batch, reports, now, results)
    results, accepted = _screen_rest(tx, "finish", batch, reports, now, results, done)
    if accepted:
        BOOK.forget([a.command.lease_id for a in accepted])
        _record_outcomes(tx, accepted, now)
        task_steps.finish(tx, items=[(a.task, a.lease, a.report) for a in accepted], now=now)
        keyed = [a.lease for a in accepted if a.lease.concurrency_token is not None]
        freed = permits.release(tx, leases=keyed, now=now) if keyed else 0
        cancelled = [a.lease.task_id for a in accepted if a.lease.cancel_requested_at is not None]
        if cancelled:
            cancellation.resolve(tx, task_ids=cancelled, now=now)
        receipts = _receipts("task.finish", accepted, now)
        for a in accepted:
            results[a.index] = CommandAck(receipts[a.index], None, a.task.queue, started_at=a.lease.started_at)
        if freed:
            _say_freed(results, accepted[0].index)
    return results


def _say_freed(results: list, index: int) -> None:
    """Mark one ack of the batch: its finishes let set-aside keyed work compete again (the service tells others)."""
    results[index] = dataclasses.replace(results[index], freed_work=True)


def _record_outcomes(tx: Tx, accepted: Sequence[Accepted], now: dt.datetime) -> None:
    """The chart's move (RUNNING -> FINISHED), each lease with its own outcome and finish digest, in one UPDATE."""
    ids_ = [a.command.lease_id for a in accepted]
    sets, args = _outcome_sets(ids_, [a.report for a in accepted])
    (dest,) = {a.dest for a in accepted}  # finish has one destination: the guards only refuse
    move(tx, "lease", "finish", ids_, source=tuple(sorted({a.lease.state for a in accepted})), dest=dest,
         sets=f"revision = revision + 1, ended_at = %s, {sets}", args=(db_time(now), *args))


def _outcome_sets(lease_ids: Sequence[str], reports: Sequence[FinishReport]) -> tuple[str, list]:
    """The SET list recording each lease's outcome and finish digest.

    A column every lease of the batch gets the same value for (the status,
    say, or the result of tasks that return nothing) is one parameter; one
    whose values differ is a CASE over the lease ids.
    """
    rows = [(r.status, r.error_code or None, r.error_message, r.retryable, r.result_json, outcome_digest(r))
            for r in reports]
    sets, args = [], []
    for column, values in zip(_OUTCOME_COLUMNS, zip(*rows)):
        if all(v == values[0] for v in values):
            sets.append(f"{column} = %s")
            args.append(values[0])
        else:
            sets.append(f"{column} = CASE lease_id{' WHEN %s THEN %s' * len(values)} END")
            for lease_id, value in zip(lease_ids, values):
                args += (lease_id, value)
    return ", ".join(sets), args


# -- the lean path ------------------------------------------------------------------
# A lease this process offered (or last moved) is in a state, at a revision and with an owner it
# knows (known_leases). Its start, renewal or finish is then one guarded UPDATE: the database checks the
# expectations and what only it knows (time, a cancel intent), and no locking read precedes it.
# Anything the guard does not match takes the locking path above, so every refusal, replay and
# cancel resolution is exactly the locking path's. Renewals take it too (without a cancel intent their
# expiry is uncapped); finishes only with outcomes the task chart settles from the report alone
# (SUCCEEDED, FAILED without retry): retries, UNKNOWN and CANCELLED read the task.

_LEASE_OFFERED = destination("lease", "assign", "NONE")
_LEASE_RUNNING = destination("lease", "start", _LEASE_OFFERED)
_LEASE_RENEWED = destination("lease", "renew", _LEASE_RUNNING)
_TASK_OFFERED = destination("task", "offer", "READY")


def _lean_outcome(report: FinishReport) -> bool:
    return report.status == "SUCCEEDED" or (report.status == "FAILED" and not report.retryable)


def _known(tx: Tx, state: str, batch: Sequence[LeaseCommand],
           reports: Sequence[FinishReport | None]) -> list[tuple[int, LeaseCommand, KnownLease]]:
    """The commands whose lease this process knows in ``state`` at the command's revision and owner."""
    if tx.recovering:  # an earlier run may have committed: the locking path re-reads and finds its receipts
        return []
    found = []
    for i, (cmd, report) in enumerate(zip(batch, reports, strict=True)):
        known = BOOK.get(cmd.lease_id)
        if (known is not None and known.state == state and known.revision == cmd.revision
                and known.owner_session_id == cmd.session_id and known.task_id == cmd.task_id
                and (report is None or (_lean_outcome(report) and known.started_at is not None))
                and ids.secret_matches(cmd.lease_secret, known.secret_digest)):
            found.append((i, cmd, known))
    return found


def _lean_move(tx: Tx, trigger: str, found: Sequence[tuple[int, LeaseCommand, KnownLease]], now: dt.datetime,
               sets: str, args: tuple) -> bool:
    """The chart's move of every known lease, guarded by the database; False (nothing written) if none matched.

    When only some rows matched (a race lost by part of a batch), the book
    forgets the batch's leases and :class:`ConcurrentChange` rolls the
    transaction back; its re-run takes the locking path for them. Costing a
    re-run only when a race happens keeps every other batch at one statement.
    """
    expected = tuple((k.lease_id, k.owner_session_id, k.revision) for _, _, k in found)
    lease_ids = [k.lease_id for _, _, k in found]
    changed = try_move(tx, "lease", trigger, expected, key=sql.LEAN_KEY, source=found[0][2].state,
                       sets=sets, args=args, where=sql.LEAN_GUARD, where_args=(db_time(now),))
    if changed == len(found):
        return True
    if changed:
        BOOK.forget(lease_ids)
        raise ConcurrentChange(f"lease.{trigger}: the guard matched {changed} of {len(found)} known leases")
    return False


def _known_rows(known: KnownLease) -> tuple[TaskRow, LeaseRow]:
    """The task and lease rows the chart says go with a lease this process knows (for the task and permit steps).

    Its task is held (OFFERED) at the attempt before its lease's, as the offer left it.
    """
    return (TASK_KNOWN.build((known.task_id, _TASK_OFFERED, known.attempt - 1)),
            LEASE_KNOWN.build((known.lease_id, known.task_id, known.attempt, known.concurrency_token)))


def _lean_start(tx: Tx, batch: Sequence[LeaseCommand], now: dt.datetime, results: list) -> set[int]:
    """Start the known offers by one guarded UPDATE; the indexes answered (all of the known ones, or none)."""
    found = _known(tx, _LEASE_OFFERED, batch, [None] * len(batch))
    stamp = db_time(now)
    # expires_at is computed by the database from now and the row's ttl, as the ack computes it below.
    if not found or not _lean_move(
            tx, "start", found, now,
            "started_at = %s, start_revision = revision, revision = revision + 1,"
            " expires_at = TIMESTAMPADD(MICROSECOND, ttl_ms * 1000, %s)", (stamp, stamp)):
        return set()
    moved = []
    for i, cmd, k in found:
        results[i] = CommandAck(
            CommandReceipt("task.start", cmd.task_id, cmd.lease_id, cmd.revision, now, False),
            LeaseView(k.lease_id, k.task_id, k.revision + 1, k.epoch, _LEASE_RUNNING, after_ms(now, k.ttl_ms)),
            k.queue, k.waited_from)
        moved.append(k.moved(_LEASE_RUNNING, now))
    BOOK.put(moved)
    return {i for i, _, _ in found}


def _lean_renew(tx: Tx, batch: Sequence[LeaseCommand], now: dt.datetime, results: list) -> set[int]:
    """Renew the known running leases by one guarded UPDATE and their receipt rows."""
    found = _known(tx, _LEASE_RUNNING, batch, [None] * len(batch))
    # No cancel intent (the guard): the new expiry is now + ttl, uncapped, computed by the database.
    if not found or not _lean_move(tx, "renew", found, now,
                                   "revision = revision + 1, expires_at = TIMESTAMPADD(MICROSECOND, ttl_ms * 1000, %s)",
                                   (db_time(now),)):
        return set()
    tx.write_many(sql.INSERT_RENEW_RECEIPTS, [(cmd.lease_id, cmd.revision, "task.renew", cmd.task_id,
                                            content_digest("task.renew", cmd), db_time(now)) for _, cmd, _ in found])
    moved = []
    for i, cmd, k in found:
        results[i] = CommandAck(
            CommandReceipt("task.renew", cmd.task_id, cmd.lease_id, cmd.revision, now, False),
            LeaseView(k.lease_id, k.task_id, k.revision + 1, k.epoch, _LEASE_RENEWED, after_ms(now, k.ttl_ms)))
        moved.append(k.moved(k.state, k.started_at))
    BOOK.put(moved)
    return {i for i, _, _ in found}


def _lean_finish(tx: Tx, batch: Sequence[LeaseCommand], reports: Sequence[FinishReport], now: dt.datetime,
                 results: list) -> set[int]:
    """Finish the known running leases by one guarded UPDATE (then the task and permit steps)."""
    found = _known(tx, _LEASE_RUNNING, batch, reports)
    if not found:
        return set()
    lease_ids = [cmd.lease_id for _, cmd, _ in found]
    sets, args = _outcome_sets(lease_ids, [reports[i] for i, _, _ in found])
    if not _lean_move(tx, "finish", found, now, f"revision = revision + 1, ended_at = %s, {sets}",
                      (db_time(now), *args)):
        return set()
    rows = [_known_rows(k) for _, _, k in found]
    task_steps.finish(tx, items=[(task, lease, reports[i]) for (task, lease), (i, _, _) in zip(rows, found)],
                      now=now)
    keyed = [lease for _, lease in rows if lease.concurrency_token is not None]
    freed = permits.release(tx, leases=keyed, now=now) if keyed else 0
    for i, cmd, k in found:
        results[i] = CommandAck(CommandReceipt("task.finish", cmd.task_id, cmd.lease_id, cmd.revision, now, False),
                                None, k.queue, started_at=k.started_at)
    if freed:
        _say_freed(results, found[0][0])
    BOOK.forget(lease_ids)
    return {i for i, _, _ in found}


def _screen_rest(tx: Tx, trigger: str, batch: Sequence[LeaseCommand], reports: Sequence[FinishReport | None],
                 now: dt.datetime, results: list, done: set[int]) -> tuple[list, list[Accepted]]:
    """The locking path (:func:`_screen`) for the commands the lean path did not answer."""
    if not done:
        return _screen(tx, trigger, batch, reports, now)
    rest = [i for i in range(len(batch)) if i not in done]
    if not rest:
        return results, []
    answers, accepted = _screen(tx, trigger, [batch[i] for i in rest], [reports[i] for i in rest], now)
    for j, answer in zip(rest, answers):
        results[j] = answer
    for a in accepted:
        a.index = rest[a.index]
    return results, accepted


def _learn(accepted: Sequence[Accepted], now: dt.datetime) -> None:
    """Remember what the locking path just wrote, so the lease's next command may be lean."""
    BOOK.put([KnownLease(a.lease.lease_id, a.lease.task_id, a.lease.secret_digest, a.command.session_id, a.dest,
                         a.lease.revision + 1, a.lease.attempt, a.lease.epoch, a.lease.ttl_ms,
                         a.lease.concurrency_token, a.task.queue, max(a.task.due_at, a.task.created_at),
                         now if a.lease.started_at is None else a.lease.started_at)
              for a in accepted if a.lease.cancel_requested_at is None])
