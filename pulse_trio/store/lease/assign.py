"""Chart ``lease``, trigger ``assign``: claim a batch of READY tasks for one session.

One transaction offers up to ``len(credentials)`` tasks to one session:

1. lock the session's instance row (serialises assignment per session and
   makes the free-slot count exact: capacity - live leases). The live
   leases are the caller's ``held`` when it gives one: the serve process
   holding the session knows every lease it got (offers, resumes) and
   forgets one only once it ended, so its count is never below the
   database's, and the claim does not count the session's leases again;
   without ``held`` they are counted here;
2. per subscribed queue (per queue and kind when the subscription names a
   few kinds), read READY tasks in pick-up order through ``tasks_pickup``
   (``tasks_pickup_kind``), ``FOR UPDATE SKIP LOCKED`` (another instance's
   claim is skipped, never waited on), merge them by
   ``(effective_at, task_id)``;
3. keyed tasks take a permit (key_permit.acquire, itself SKIP LOCKED on the
   key's counter); a key found at its limit has its READY tasks set aside
   (task.wait_for_key: out of the pick-up range until a permit of the key is
   released), so scanning goes on past them now and no later claim reads
   them again: a blocked key blocks nothing behind it, at any depth;
4. task.offer for the batch (one guarded UPDATE) and one multi-row INSERT of
   the leases.

Lease ids and secrets are made by the caller (:func:`new_credentials`)
before the transaction, so a re-run after a lost COMMIT can find the
leases it may already have created and return them with their secrets.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import heapq
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TypeAlias, TypeVar

from pulse_trio.cluster_settings import LEASE_TTL_MIN_MS
from pulse_trio.contract.frozen import frozen
from pulse_trio.store.engine import ids
from pulse_trio.store.instance import instances
from pulse_trio.store.lease import known as known_leases
from pulse_trio.store.lease import sql
from pulse_trio.store.key_permit import permits
from pulse_trio.store.task import steps as task_steps
from pulse_trio.store.lease.leases import lease_view
from pulse_trio.store.queue.queues import paused_queues
from pulse_trio.store.engine.chart_write import create, destination
from pulse_trio.store.engine.guard_context import LeaseContext
from pulse_trio.store.engine.registry import decide, read_only, screen, transition
from pulse_trio.store.engine.results import SESSION_NOT_FOUND, AssignResult, LeaseView, Offer, Refusal, TaskSnapshot
from pulse_trio.store.engine.rows import KEYED, TASK_PICKUP, UNKEYED_READY, InstanceRow, LeaseRow, TaskRow
from pulse_trio.store.engine.tx import Tx, after_ms, db_time

# Up to this many sources (queues, or kinds of a queue) each read a full
# page; past it, each reads its share of one, so a claim locks about a page
# of rows however many kinds its session names.
SHARED_PAGES_FROM = 8


@frozen
class LeaseCredential:
    lease_id: str
    lease_secret: str = dataclasses.field(repr=False)


def new_credentials(count: int) -> tuple[LeaseCredential, ...]:
    """Ids and secrets for up to ``count`` offers, made outside the transaction."""
    return tuple(LeaseCredential(ids.new_id("lse"), ids.new_secret()) for _ in range(count))


def pickup_sql(*, paged: bool = False, by_kind: bool = False) -> str:
    """The pick-up query of one source (exposed so a test can EXPLAIN exactly what runs).

    ``by_kind``: one kind, through ``tasks_pickup_kind (queue, pick_state, kind,
    effective_at, task_id)``; else the whole queue through ``tasks_pickup``.
    ``pick_state`` is ``READY`` (unkeyed tasks) or ``KEYED`` (keyed ones, for
    sessions that declared keys). Either way the index is read in ORDER BY
    order and only the rows returned are read: READY tasks of kinds the
    session does not take, keyed tasks a session without keys cannot take,
    and tasks set aside for their key are never walked, however many.
    """
    return sql.PICKUP.format(
        index="tasks_pickup_kind" if by_kind else "tasks_pickup",
        kind=sql.PICKUP_BY_KIND if by_kind else "",
        after=sql.PICKUP_AFTER if paged else "",
    )


#: (queue, one kind | every kind, the pick_state range: READY unkeyed, KEYED keyed)
Source = tuple[str, "str | None", str]
Read = tuple[Source, "TaskRow | None"]  # a source and the row its page starts after (None: its head)


def _sources(session: InstanceRow, paused: Collection[str]) -> list[Source]:
    """What to read pages from: per kind when the subscription names kinds, else per queue; keyed too if declared.

    A paused queue (chart ``queue``) is no source: nothing of it is offered.
    """
    picks = (UNKEYED_READY, KEYED) if session.concurrency_keys else (UNKEYED_READY,)
    out: list[Source] = []
    for queue, kinds in session.subscription_map().items():
        if queue in paused:
            continue
        for kind in [None] if kinds is None else sorted(kinds):
            out += [(queue, kind, pick) for pick in picks]
    return out


def pickup_statement(reads: Sequence[Read], size: int) -> tuple[str, list]:
    """One statement for the next page of each source: their pick-up queries, UNION ALL."""
    parts, args = [], []
    for (queue, kind, pick), after in reads:
        parts.append(pickup_sql(paged=after is not None, by_kind=kind is not None))
        args += [queue, pick]
        if kind is not None:
            args.append(kind)
        if after is not None:
            args += [db_time(after.effective_at), db_time(after.effective_at), after.task_id]
        args.append(size)
    statement = parts[0] if len(parts) == 1 else " UNION ALL ".join(f"({p})" for p in parts)
    return statement, args


def _pages(tx: Tx, session: InstanceRow, reads: Sequence[Read], size: int) -> dict[Source, list[TaskRow]]:
    """The next page of each source, in pick-up order, in one round trip."""
    statement, args = pickup_statement(reads, size)
    by_kind = {queue for (queue, kind, _), _ in reads if kind is not None}
    out: dict[Source, list[TaskRow]] = {source: [] for source, _ in reads}
    for row in tx.all(statement, args):
        task = TASK_PICKUP.build(row)
        pick = UNKEYED_READY if task.concurrency_key is None else KEYED
        out[(task.queue, task.kind if task.queue in by_kind else None, pick)].append(task)
    if len(reads) > 1:
        for rows in out.values():
            rows.sort(key=lambda t: (t.effective_at, t.task_id))
    return out


PROBE_CHUNK = 100  # queues per probe statement
Probed = TypeVar("Probed")


def _probe(tx: Tx, items: Sequence[Probed], part: Callable[[Probed], tuple[str, list]]) -> set[Probed]:
    """The items whose ``part`` (a ``SELECT %s FROM DUAL WHERE …`` of its own, answering its index)
    returns a row: ``PROBE_CHUNK`` of them per statement, UNION ALL."""
    found: set[Probed] = set()
    for start in range(0, len(items), PROBE_CHUNK):
        chunk = items[start:start + PROBE_CHUNK]
        parts, args = [], []
        for i, item in enumerate(chunk):
            text, item_args = part(item)
            parts.append(text)
            args += [i, *item_args]
        found.update(chunk[row[0]] for row in tx.all(" UNION ALL ".join(parts), args))
    return found


@read_only(takes_locks=False)
def queues_with_ready_work(tx: Tx, *, queues: Sequence[str]) -> set[str]:
    """Which of ``queues`` have at least one READY task: one index dive each, no locks.

    The dispatcher asks this before a pass over many idle sessions, so an
    empty queue costs one statement per poll instead of one claim
    transaction per session. A stale answer only delays or wastes a claim.
    """
    return _probe(tx, list(queues), lambda queue: (sql.QUEUE_HAS_READY_WORK, [queue]))


#: What the depth question counts in a queue: the kinds a session names, or None for all of them.
KindSet: TypeAlias = "frozenset[str] | None"


@read_only(takes_locks=False)
def sources_ready_at_least(tx: Tx, *, wants: Mapping[tuple[str, KindSet], int]) -> set[tuple[str, KindSet]]:
    """Which (queue, kinds) hold at least ``wants[...]`` unkeyed READY tasks (kinds None: any kind).

    Each reads at most that many entries of ``tasks_pickup`` (``tasks_pickup_kind``
    for kinds), no rows and no locks. The dispatcher asks this before sharing
    a pass in rounds: where the queues hold more than every hungry session
    could take, rounds would not change who gets what. Keyed and set-aside tasks
    are not counted (not every session may take them), so the answer errs
    towards "not enough"; a stale one costs fairness only within one race.
    """
    def part(source: tuple[str, KindSet]) -> tuple[str, list]:
        (queue, kinds), n = source, wants[source]
        if kinds is None:
            return sql.READY_AT_LEAST.format(index="tasks_pickup", kinds=""), [queue, n, n]
        return (sql.READY_AT_LEAST.format(index="tasks_pickup_kind", kinds=sql.KINDS_IN),
                [queue, tuple(sorted(kinds)), n, n])

    return _probe(tx, sorted(wants, key=lambda source: (source[0], sorted(source[1] or ()))), part)


def _snapshot(task: TaskRow, attempt: int, token: int | None) -> TaskSnapshot:
    return TaskSnapshot(task.task_id, task.queue, task.kind, task.payload, attempt, task.max_attempts,
                        task.idempotency_key, task.created_at, task.due_at, task.priority, task.concurrency_key,
                        token, task.effect_uncertain, task.retry_of)


def _lease_ttl_ms(task: TaskRow, default_ms: int) -> int:
    """The task's own lease ttl, or the cluster's; never under the shortest lease a worker can renew.

    Submits once took a task's own under half a second, and such a task may
    still wait (or be retried); the cluster's own was raised by migration 0029.
    """
    return max(task.lease_ttl_ms, LEASE_TTL_MIN_MS) if task.lease_ttl_ms else default_ms


#: Where lease.assign puts the lease it inserts (the chart's one transition from NONE).
_OFFERED = destination("lease", "assign", "NONE")


def _recover(tx: Tx, credentials: Sequence[LeaseCredential]) -> tuple[Offer, ...]:
    secrets = {c.lease_id: c.lease_secret for c in credentials}
    rows = tx.all(sql.OFFERS_MADE, (tuple(secrets),))
    n = len(LeaseRow.NAMES)
    offers = []
    for row in rows:
        lease, task = LeaseRow.from_row(row[:n]), TaskRow.from_row(row[n:])
        offers.append(Offer(_snapshot(task, lease.attempt, lease.concurrency_token),
                            lease_view(lease, state=_OFFERED, revision=1), secrets[lease.lease_id]))
    return tuple(offers)


@transition("lease", "assign")
def assign(tx: Tx, *, session_id: str, credentials: Sequence[LeaseCredential], now: dt.datetime,
           start_timeout_ms: int, default_lease_ttl_ms: int, max_scan: int | None = None,
           paused: Collection[str] | None = None, held: int | None = None, want: int | None = None,
           shared_lock: bool = False, session: InstanceRow | None = None) -> AssignResult | Refusal:
    """Offer up to len(credentials) READY tasks to the session, in pick-up order.

    ``paused``: the queues to skip (chart ``queue``), as the caller's instance
    keeps them in memory; None reads them here (one indexed statement).
    ``held``: the session's live leases as its serve process counts them (at
    least the database's count); None: count them in the database.
    ``want``: at most this many offers (default: one per credential); the
    rest stay unused, and a re-run after a lost COMMIT still looks for all
    of them, so it finds every lease the first run may have made.
    ``shared_lock``: read the session's row with a shared lock, for a claim
    that cannot raise the session's lease count (a finish batch's ride-along
    offers at most what the batch's finishes of that session freed): such
    claims need not wait for each other, and still serialise with the
    dispatcher's, which lock the row exclusively. ``session``: that row as
    the caller's transaction already read it under the shared lock
    (``instances.share_lock_sessions``), so it is not read again.
    """
    if session is None or not shared_lock:
        session = instances.load_session(tx, session_id, lock=True, shared=shared_lock)
    if session is None:
        return Refusal(SESSION_NOT_FOUND, f"no session {session_id}")
    if tx.recovering:
        recovered = _recover(tx, credentials)
        if recovered:
            return AssignResult(recovered, len(recovered))
    if screen("lease", "assign", LeaseContext(session=session), through="session_dispatchable") is not None:
        return AssignResult((), 0)
    live = instances.active_leases(tx, session_id) if held is None else held
    free = max(0, session.capacity - live)
    want = min(free, len(credentials) if want is None else min(want, len(credentials)))
    if want == 0:
        return AssignResult((), free)
    if paused is None:
        paused = paused_queues(tx)
    chosen = _choose(tx, session, want, now, credentials, max_scan if max_scan is not None else 8 * want + 64,
                     paused)
    if not chosen:
        return AssignResult((), free)
    task_steps.offer(tx, tasks=[task for task, _, _ in chosen], now=now)
    expires = after_ms(now, start_timeout_ms)
    # What every offer of the claim shares goes into the statement once, as literals.
    shared = ", ".join(tx.literal(v) for v in (session.instance_id, session.session_id, session.epoch,
                                              db_time(expires), db_time(now)))
    rows, offers = [], []
    for task, credential, token in chosen:
        attempt = task.attempt + 1
        rows.append((credential.lease_id, task.task_id, ids.secret_digest(credential.lease_secret), attempt,
                     _lease_ttl_ms(task, default_lease_ttl_ms), task.effect_uncertain, token))
        offers.append(Offer(_snapshot(task, attempt, token),
                            LeaseView(credential.lease_id, task.task_id, 1, session.epoch, _OFFERED, expires),
                            credential.lease_secret))
    create(tx, "lease", "assign", columns=sql.OFFER_COLUMNS, row=f"(%s, %s, %s, {{state}}, 1, %s, {shared}, %s, %s, %s)",
           rows=rows)
    # What the lean start/finish path expects of these rows (leases.py): ttl and digest columns of each row.
    known_leases.offered(session.session_id, offers, ttl_ms=[r[4] for r in rows], digests=[r[2] for r in rows])
    return AssignResult(tuple(offers), free)


def _choose(tx: Tx, session: InstanceRow, want: int, now: dt.datetime, credentials: Sequence[LeaseCredential],
            max_scan: int, paused: Collection[str]) -> list[tuple[TaskRow, LeaseCredential, int | None]]:
    """Merge the subscribed sources (queues, or queue and kind) in pick-up order; skip what a guard or a permit refuses."""
    # A session without keys takes every task it reads. A keyed one may skip
    # some (key at its limit): it reads at least a few rows, and its next
    # page only if it must; a larger first page would lock rows FOR UPDATE
    # that it then leaves, and every row read costs a decode.
    page = want if not session.concurrency_keys else min(max(want, 8), max_scan)
    sources = _sources(session, paused)
    if not sources:
        return []  # every queue it takes is paused: nothing to read (an empty UNION is no statement)
    # Many sources (a subscription naming many kinds) share the first page;
    # a source that turns out to hold the work reads full pages after it.
    first = page if len(sources) <= SHARED_PAGES_FROM else -(-page // len(sources))
    pages = _pages(tx, session, [(src, None) for src in sources], first)
    more_left = {src: len(rows) == first for src, rows in pages.items()}  # its last read came back full
    heap = [((t.effective_at, t.task_id), i, src) for src, rows in pages.items() for i, t in enumerate(rows)]
    heapq.heapify(heap)
    chosen: list[tuple[TaskRow, LeaseCredential, int | None]] = []
    skip = _KeySkips()
    scanned = len(heap)
    while heap and len(chosen) < want:
        _, index, source = heapq.heappop(heap)
        task = pages[source][index]
        taken = _take(tx, session, task, credentials[len(chosen)], now, skip)
        if taken is not None:
            chosen.append(taken)
        # The source's page is used up: read its next page only if more tasks are still
        # wanted. Reading it anyway would lock rows FOR UPDATE that this claim never
        # offers, and a concurrent claim (another session) would skip them: it would
        # come back short and count as dry for the rest of its dispatch pass.
        if index == len(pages[source]) - 1 and more_left[source] and scanned < max_scan and len(chosen) < want:
            more = _pages(tx, session, [(source, task)], page)[source]  # keep the source's scan going
            more_left[source] = len(more) == page
            scanned += len(more)
            base = len(pages[source])
            pages[source].extend(more)
            for offset, t in enumerate(more):
                heapq.heappush(heap, ((t.effective_at, t.task_id), base + offset, source))
    return chosen


class _KeySkips:
    """The keys one claim skips: busy (another assigner holds the counter) or at their limit.

    A key at its limit has its READY tasks set aside once when first met; a
    task of it met again later in the scan is past the chunk set aside, so
    the next chunk goes too (at most once per task read). The tasks this
    claim took a permit for are still READY (the offer moves them after
    the scan) and locked by this very transaction, which ``SKIP LOCKED``
    does not skip: they are never set aside.
    """

    __slots__ = ("busy", "at_limit", "set_aside", "taken")

    def __init__(self) -> None:
        self.busy: set[str] = set()
        self.at_limit: set[str] = set()
        self.set_aside: set[str] = set()  # task ids this claim set aside
        self.taken: set[str] = set()  # keyed task ids this claim took a permit for

    def skips(self, tx: Tx, task: TaskRow) -> bool:
        key = task.concurrency_key
        if key in self.busy:
            return True
        if key in self.at_limit:
            if task.task_id not in self.set_aside:
                self._set_aside(tx, key)
            return True
        return False

    def limit_reached(self, tx: Tx, key: str) -> None:
        self.at_limit.add(key)
        self._set_aside(tx, key)

    def _set_aside(self, tx: Tx, key: str) -> None:
        ids = [task_id for task_id in task_steps.ready_of_key(tx, key) if task_id not in self.taken]
        if ids:
            task_steps.wait_for_key(tx, task_ids=ids)
            self.set_aside.update(ids)


def _take(tx: Tx, session: InstanceRow, task: TaskRow, credential: LeaseCredential, now: dt.datetime,
          skip: _KeySkips) -> tuple[TaskRow, LeaseCredential, int | None] | None:
    """The task for this offer if the guards allow it and (keyed) a permit is free; else None (skip)."""
    ctx = LeaseContext(session=session, task=task)
    if isinstance(decide("lease", "assign", "NONE", ctx), Refusal):
        return None
    token = None
    if task.concurrency_key is not None:
        if skip.skips(tx, task):
            return None
        token = permits.acquire(tx, task=task, lease_id=credential.lease_id, now=now)
        if token is None:
            skip.busy.add(task.concurrency_key)
            return None
        if token == permits.AT_LIMIT:
            skip.limit_reached(tx, task.concurrency_key)
            return None
        skip.taken.add(task.task_id)
    return task, credential, token
