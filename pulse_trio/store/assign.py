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
   key's counter); a keyed task at its limit is skipped and scanning goes on,
   so it blocks nothing behind it;
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
from collections.abc import Sequence

from pulse_trio.store import ids, instances, permits, task_steps
from pulse_trio.store.leases import lease_view
from pulse_trio.store.chart_write import destination
from pulse_trio.store.guard_context import LeaseContext
from pulse_trio.store.registry import decide, read_only, screen, transition
from pulse_trio.store.results import SESSION_NOT_FOUND, AssignResult, LeaseView, Offer, Refusal, TaskSnapshot
from pulse_trio.store.rows import TASK_PICKUP, InstanceRow, LeaseRow, TaskRow
from pulse_trio.store.tx import Tx, after_ms, db_time

_PICKUP = (
    f"SELECT {TASK_PICKUP.columns('t')} FROM tasks t FORCE INDEX ({{index}})"
    " WHERE t.queue = %s AND t.pick_state = 'READY'{kind}{after}{kinds}{keys}"
    " ORDER BY t.effective_at, t.task_id LIMIT %s FOR UPDATE SKIP LOCKED"
)
_AFTER = " AND (t.effective_at > %s OR (t.effective_at = %s AND t.task_id > %s))"
# A subscription naming up to this many kinds reads one page per kind through
# tasks_pickup_kind, so READY tasks of other kinds in the queue are never
# scanned; a longer list filters tasks_pickup with IN (…) instead.
KIND_PAGES_MAX = 8


@dataclasses.dataclass(frozen=True, slots=True)
class LeaseCredential:
    lease_id: str
    lease_secret: str = dataclasses.field(repr=False)


def new_credentials(count: int) -> tuple[LeaseCredential, ...]:
    """Ids and secrets for up to ``count`` offers, made outside the transaction."""
    return tuple(LeaseCredential(ids.new_id("lse"), ids.new_secret()) for _ in range(count))


def pickup_sql(*, paged: bool = False, by_kind: bool = False, kinds: int = 0, unkeyed_only: bool = False) -> str:
    """The pick-up query (exposed so a test can EXPLAIN exactly what runs).

    ``by_kind``: one kind, through ``tasks_pickup_kind (queue, pick_state, kind,
    effective_at, task_id)``; ``kinds``: that many kinds, IN (…) over
    ``tasks_pickup``; neither: the whole queue through ``tasks_pickup``.
    """
    if by_kind and kinds:
        raise ValueError("by_kind reads one kind; kinds= is the IN (…) variant")
    return _PICKUP.format(
        index="tasks_pickup_kind" if by_kind else "tasks_pickup",
        kind=" AND t.kind = %s" if by_kind else "",
        after=_AFTER if paged else "",
        kinds=f" AND t.kind IN ({', '.join(['%s'] * kinds)})" if kinds else "",
        keys=" AND t.concurrency_key IS NULL" if unkeyed_only else "",
    )


Source = tuple[str, "str | frozenset[str] | None"]  # (queue, one kind | several kinds | every kind)


def _sources(session: InstanceRow) -> list[Source]:
    """What to read pages from: per kind when the subscription names a few, else per queue."""
    out: list[Source] = []
    for queue, kinds in session.subscription_map().items():
        if kinds is not None and len(kinds) <= KIND_PAGES_MAX:
            out += [(queue, kind) for kind in sorted(kinds)]
        else:
            out.append((queue, kinds))
    return out


def _page(tx: Tx, session: InstanceRow, source: Source, after: TaskRow | None, size: int) -> list[TaskRow]:
    queue, kinds = source
    args: list = [queue]
    if isinstance(kinds, str):
        args.append(kinds)
    if after is not None:
        args += [db_time(after.effective_at), db_time(after.effective_at), after.task_id]
    kind_list = sorted(kinds) if isinstance(kinds, frozenset) else []
    args += kind_list
    args.append(size)
    sql = pickup_sql(paged=after is not None, by_kind=isinstance(kinds, str), kinds=len(kind_list),
                     unkeyed_only=not session.concurrency_keys)
    return [TASK_PICKUP.build(r) for r in tx.all(sql, args)]


PROBE_CHUNK = 100  # queues per probe statement


@read_only(takes_locks=False)
def queues_with_ready_work(tx: Tx, *, queues: Sequence[str]) -> set[str]:
    """Which of ``queues`` have at least one READY task: one index dive each, no locks.

    The dispatcher asks this before a pass over many idle sessions, so an
    empty queue costs one statement per poll instead of one claim
    transaction per session. A stale answer only delays or wastes a claim.
    """
    found: set[str] = set()
    queues = list(queues)
    for start in range(0, len(queues), PROBE_CHUNK):
        chunk = queues[start:start + PROBE_CHUNK]
        sql = " UNION ALL ".join(
            ["SELECT %s FROM DUAL WHERE EXISTS (SELECT 1 FROM tasks FORCE INDEX (tasks_pickup)"
             " WHERE queue = %s AND pick_state = 'READY')"] * len(chunk))
        found.update(row[0] for row in tx.all(sql, [q for queue in chunk for q in (queue, queue)]))
    return found


def _snapshot(task: TaskRow, attempt: int, token: int | None) -> TaskSnapshot:
    return TaskSnapshot(task.task_id, task.queue, task.kind, task.payload, attempt, task.max_attempts,
                        task.idempotency_key, task.created_at, task.due_at, task.priority, task.concurrency_key,
                        token, task.effect_uncertain, task.retry_of)


#: Where lease.assign puts the lease it inserts (the chart's one transition from NONE).
_OFFERED = destination("lease", "assign", "NONE")


def _recover(tx: Tx, credentials: Sequence[LeaseCredential]) -> tuple[Offer, ...]:
    secrets = {c.lease_id: c.lease_secret for c in credentials}
    rows = tx.all(f"SELECT {LeaseRow.columns()}, {TaskRow.columns()} FROM leases l JOIN tasks t"
                  " ON t.task_id = l.task_id WHERE l.lease_id IN %s", (tuple(secrets),))
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
           held: int | None = None) -> AssignResult | Refusal:
    """Offer up to len(credentials) READY tasks to the session, in pick-up order.

    ``held``: the session's live leases as its serve process counts them (at
    least the database's count); None: count them in the database.
    """
    session = instances.load_session(tx, session_id, lock=True)
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
    want = min(free, len(credentials))
    if want == 0:
        return AssignResult((), free)
    chosen = _choose(tx, session, want, now, credentials, max_scan if max_scan is not None else 8 * want + 64)
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
        rows += (credential.lease_id, task.task_id, ids.secret_digest(credential.lease_secret), attempt,
                 task.lease_ttl_ms or default_lease_ttl_ms, task.effect_uncertain, token)
        offers.append(Offer(_snapshot(task, attempt, token),
                            LeaseView(credential.lease_id, task.task_id, 1, session.epoch, _OFFERED, expires),
                            credential.lease_secret))
    state = tx.literal(_OFFERED)
    values = ", ".join([f"(%s, %s, %s, {state}, 1, %s, {shared}, %s, %s, %s)"] * len(chosen))
    tx.write(
        "INSERT INTO leases (lease_id, task_id, secret_digest, state, revision, attempt, owner_instance_id,"
        " owner_session_id, epoch, expires_at, offered_at, ttl_ms, effect_uncertain, concurrency_token)"
        f" VALUES {values}", rows)
    return AssignResult(tuple(offers), free)


def _choose(tx: Tx, session: InstanceRow, want: int, now: dt.datetime, credentials: Sequence[LeaseCredential],
            max_scan: int) -> list[tuple[TaskRow, LeaseCredential, int | None]]:
    """Merge the subscribed sources (queues, or queue and kind) in pick-up order; skip what a guard or a permit refuses."""
    # A session without keys takes every task it reads. A keyed one may skip
    # some (key at its limit): it reads at least a few rows, and its next
    # page only if it must; a larger first page would lock rows FOR UPDATE
    # that it then leaves, and every row read costs a decode.
    page = want if not session.concurrency_keys else min(max(want, 8), max_scan)
    pages: dict[Source, list[TaskRow]] = {src: _page(tx, session, src, None, page) for src in _sources(session)}
    heap = [((t.effective_at, t.task_id), i, src) for src, rows in pages.items() for i, t in enumerate(rows)]
    heapq.heapify(heap)
    chosen: list[tuple[TaskRow, LeaseCredential, int | None]] = []
    scanned = len(heap)
    while heap and len(chosen) < want:
        _, index, source = heapq.heappop(heap)
        task = pages[source][index]
        taken = _take(tx, session, task, credentials[len(chosen)], now)
        if taken is not None:
            chosen.append(taken)
        # The source's page is used up: read its next page only if more tasks are still
        # wanted. Reading it anyway would lock rows FOR UPDATE that this claim never
        # offers, and a concurrent claim (another session) would skip them: it would
        # come back short and count as dry for the rest of its dispatch pass.
        if (index == len(pages[source]) - 1 and len(pages[source]) % page == 0 and scanned < max_scan
                and len(chosen) < want):
            more = _page(tx, session, source, task, page)  # keep the source's scan going
            scanned += len(more)
            base = len(pages[source])
            pages[source].extend(more)
            for offset, t in enumerate(more):
                heapq.heappush(heap, ((t.effective_at, t.task_id), base + offset, source))
    return chosen


def _take(tx: Tx, session: InstanceRow, task: TaskRow, credential: LeaseCredential,
          now: dt.datetime) -> tuple[TaskRow, LeaseCredential, int | None] | None:
    """The task for this offer if the guards allow it and (keyed) a permit is free; else None (skip)."""
    ctx = LeaseContext(session=session, task=task)
    if isinstance(decide("lease", "assign", "NONE", ctx), Refusal):
        return None
    token = None
    if task.concurrency_key is not None:
        token = permits.acquire(tx, task=task, lease_id=credential.lease_id, now=now)
        if token is None:
            return None
    return task, credential, token
