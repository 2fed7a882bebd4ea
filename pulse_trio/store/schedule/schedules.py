"""Chart ``schedule``: recurring schedules, and the tick that turns into exactly one task.

Why a tick becomes exactly one task, with any number of ``serve``
processes and any crash (docs/operations.md §8):

* :func:`fire` locks due ACTIVE rows with ``FOR UPDATE SKIP LOCKED``: two
  processes polling at the same moment never both hold a schedule, and
  neither waits for the other (no leader to elect or lose).
* In the same transaction it submits the tick's task (``task.submit``) and
  moves ``next_fire_at`` past now with a compare-and-set on its old value.
  A crash before COMMIT loses both; a COMMIT whose answer was lost is re-run
  against the moved ``next_fire_at`` and finds nothing due.
* The task's idempotency key is ``schedule:<schedule_id>:<tick>``, unique
  in its queue by ``tasks_dedup``: the database itself refuses a second
  task for one tick (submit then returns the existing one).

Operator changes (:func:`create`, :func:`pause`, :func:`resume`,
:func:`delete`) lock the row and move it through ``chart_write.move``.
Pausing a paused schedule or resuming an active one changes nothing; the
re-run of a change whose COMMIT's answer was lost knows its own change by
its time and author, and answers ``changed`` as the first run would have.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging

import pymysql
from cronsim import CronSimError

from pulse_trio.charts import CHARTS
from pulse_trio.contract.grammar import new_ulid
from pulse_trio.schedule_timing import Timing
from pulse_trio.store.engine import chart_write
from pulse_trio.store.engine.chart_write import move
from pulse_trio.store.engine.guard_context import ScheduleContext
from pulse_trio.store.engine.registry import decide, read_only, require, transition
from pulse_trio.store.engine.results import Refusal
from pulse_trio.store.engine.rows import ScheduleRow
from pulse_trio.store.task.tasks import DUPLICATE_KEY, NewTask, submit
from pulse_trio.store.engine.timer_scan import claim
from pulse_trio.store.engine.tx import Tx, db_actor, db_time, py_time, rfc3339
from pulse_trio.store.schedule import sql

log = logging.getLogger("pulse_trio.schedules")

SCHEDULE_PREFIX = "sch_"
SCHEDULE_NOT_FOUND = "schedule_not_found"
SCHEDULE_EXISTS = "schedule_exists"
#: A cron expression whose next match is beyond cronsim's horizon waits here (it never fires).
NEVER = dt.datetime(9999, 1, 1, tzinfo=dt.timezone.utc)
FIRE_BATCH = 100

_GONE = sql.GONE  # DELETED: kept for its tasks, listed only when asked
_FIRING = frozenset(t.source for t in CHARTS["schedule"].transitions_for("fire"))  # ACTIVE


def new_schedule_id() -> str:
    """``sch_<ULID>``: a schedule's id (never on the worker wire, so outside the contract's id prefixes)."""
    return SCHEDULE_PREFIX + new_ulid()


def tick_key(schedule_id: str, tick: dt.datetime) -> str:
    """The idempotency key of a tick's task: the schedule and the tick it came from."""
    return f"schedule:{schedule_id}:{rfc3339(tick)}"


@dataclasses.dataclass(frozen=True, slots=True)
class NewSchedule:
    """A schedule to create; every field already checked (``pulse_trio.client.schedules``)."""

    name: str
    queue: str
    kind: str
    payload_json: str
    timing: Timing
    missed: str = "skip"
    catch_up_limit: int = 1
    priority: int = 0
    max_attempts: int = 3
    schedule_id: str = dataclasses.field(default_factory=new_schedule_id)


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleChange:
    """An operator's change: the schedule after it, and whether this call moved it."""

    schedule: ScheduleRow
    changed: bool


@dataclasses.dataclass(frozen=True, slots=True)
class FireResult:
    """What one fire batch did; ``more``: the batch was full, run again at once."""

    schedules: int
    task_ids: tuple[str, ...]
    created: int
    more: bool


def _lookup(tx: Tx, ref: str, *, lock: bool) -> ScheduleRow | None:
    """By id (``sch_…``, a deleted one too) or by the name a live schedule holds."""
    column = "schedule_id" if ref.startswith(SCHEDULE_PREFIX) else "live_name"
    row = tx.one(sql.SCHEDULE_BY.format(column=column, lock=sql.FOR_UPDATE if lock else ""), (ref,))
    return ScheduleRow.from_row(row) if row else None


def _next_after(timing: Timing, now: dt.datetime) -> dt.datetime:
    """The first tick after ``now``; NEVER when there is none (or the zone left the zone data)."""
    try:
        return timing.after(now)
    except (StopIteration, ValueError, CronSimError):
        return NEVER


@transition("schedule", "create")
def create(tx: Tx, *, schedule: NewSchedule, now: dt.datetime, created_by: str) -> ScheduleRow | Refusal:
    """Insert an ACTIVE schedule whose first tick is the first after ``now``."""
    state = require("schedule", "create", "NONE", ScheduleContext(now=now))
    s, stamp, who = schedule, db_time(now), db_actor(created_by)
    try:
        chart_write.create(
            tx, "schedule", "create", dest=state, columns=sql.SCHEDULE_COLUMNS, row=sql.SCHEDULE_ROW,
            rows=[(s.schedule_id, s.name, s.queue, s.kind, s.payload_json, s.priority, s.max_attempts,
                   s.timing.cron, s.timing.interval_s, s.timing.timezone, s.missed, s.catch_up_limit,
                   db_time(_next_after(s.timing, now)), stamp, who, stamp, who)])
    except pymysql.err.IntegrityError as exc:
        if exc.args[0] != DUPLICATE_KEY:
            raise
        mine = _lookup(tx, s.schedule_id, lock=False)
        if mine is not None:  # a re-run after a lost COMMIT: it is there
            return mine
        return Refusal(SCHEDULE_EXISTS, f"a schedule named {s.name!r} exists; delete it or choose another name")
    found = _lookup(tx, s.schedule_id, lock=False)
    assert found is not None
    return found


@transition("schedule", "fire")
def fire(tx: Tx, *, now: dt.datetime, limit: int = FIRE_BATCH) -> FireResult:
    """Timer: each due schedule's tick(s) become tasks, and next_fire_at moves past now (SKIP LOCKED)."""
    rows = [ScheduleRow.from_row(r) for r in claim(tx, sql.DUE_SCAN, now=now, limit=limit)]
    task_ids: list[str] = []
    created = 0
    for s in rows:
        require("schedule", "fire", s.state, ScheduleContext(schedule=s, now=now))
        try:
            ticks, next_at = s.timing.due(s.next_fire_at, now, s.catch_up_limit)
        except StopIteration:  # no match within cronsim's horizon
            ticks, next_at = [], NEVER
        except (ValueError, CronSimError):  # its zone left the zone data, or its ticks were not found: it cannot tick
            log.error("schedule %s (%s) cannot compute its ticks; it stops until resumed", s.schedule_id, s.name,
                      exc_info=True)
            ticks, next_at = [], NEVER
        tasks = [NewTask(s.queue, s.kind, s.payload, priority=s.priority, due_at=tick, max_attempts=s.max_attempts,
                         idempotency_key=tick_key(s.schedule_id, tick)) for tick in ticks]
        results = submit(tx, tasks=tasks, now=now) if tasks else ()
        task_ids.extend(r.task_id for r in results)
        created += sum(1 for r in results if r.created)
        move(tx, "schedule", "fire", [s.schedule_id], source=s.state,
             sets="next_fire_at = %s, last_tick_at = COALESCE(%s, last_tick_at),"
                  " last_task_id = COALESCE(%s, last_task_id), fired_ticks = fired_ticks + %s",
             args=(db_time(next_at), db_time(ticks[-1]) if ticks else None,
                   results[-1].task_id if results else None, len(ticks)),
             where="next_fire_at = %s", where_args=(db_time(s.next_fire_at),))
    return FireResult(len(rows), tuple(task_ids), created, len(rows) == limit)


def _own(tx: Tx, row: ScheduleRow, now: dt.datetime, by: str) -> bool:
    """The row is as this call left it in a run whose COMMIT's answer was lost.

    The re-run gets the same ``now`` and ``by``: a change stamped with both is
    this call's own, so its answer stays ``changed`` (not "nothing to do").
    """
    return tx.recovering and db_time(row.updated_at) == db_time(now) and row.updated_by == db_actor(by)


def _deleted_by_name(tx: Tx, name: str, now: dt.datetime, by: str) -> ScheduleRow | None:
    """The schedule named ``name`` deleted with this stamp: deleted, it holds no live name to look up by."""
    row = tx.one(sql.DELETED_BY_NAME, (name, db_time(now), db_actor(by)))
    return ScheduleRow.from_row(row) if row else None


def _change(tx: Tx, trigger: str, ref: str, now: dt.datetime, by: str) -> ScheduleChange | Refusal:
    row = None
    if trigger == "delete" and tx.recovering and not ref.startswith(SCHEDULE_PREFIX):
        # First: since the lost COMMIT a new schedule may have taken the freed name (by id the lookup reads
        # a deleted one).
        row = _deleted_by_name(tx, ref, now, by)
    row = row or _lookup(tx, ref, lock=True)
    if row is None or row.state == _GONE:  # not there to change, unless this call deleted it
        if row is not None and trigger == "delete" and _own(tx, row, now, by):
            return ScheduleChange(row, True)
        return Refusal(SCHEDULE_NOT_FOUND, f"no schedule {ref}")
    dest = decide("schedule", trigger, row.state, ScheduleContext(schedule=row, now=now))
    if isinstance(dest, Refusal):  # pause of a paused one, resume of an active one: nothing to do, unless it did it
        return ScheduleChange(row, _own(tx, row, now, by))
    sets, args = "updated_at = %s, updated_by = %s", [db_time(now), db_actor(by)]
    if trigger == "resume":  # ticks that fell while paused are not fired
        sets += ", next_fire_at = %s"
        args.append(db_time(_next_after(row.timing, now)))
    move(tx, "schedule", trigger, [row.schedule_id], source=row.state, dest=dest, sets=sets, args=args)
    after = _lookup(tx, row.schedule_id, lock=False)
    assert after is not None
    return ScheduleChange(after, True)


@transition("schedule", "pause")
def pause(tx: Tx, *, ref: str, now: dt.datetime, by: str) -> ScheduleChange | Refusal:
    """ACTIVE -> PAUSED: no tick fires until it is resumed."""
    return _change(tx, "pause", ref, now, by)


@transition("schedule", "resume")
def resume(tx: Tx, *, ref: str, now: dt.datetime, by: str) -> ScheduleChange | Refusal:
    """PAUSED -> ACTIVE: the next tick is the first after now."""
    return _change(tx, "resume", ref, now, by)


@transition("schedule", "delete")
def delete(tx: Tx, *, ref: str, now: dt.datetime, by: str) -> ScheduleChange | Refusal:
    """-> DELETED: it never fires again, its name is free; the row stays for its tasks."""
    return _change(tx, "delete", ref, now, by)


@read_only(takes_locks=False)
def get_schedule(tx: Tx, *, ref: str) -> ScheduleRow | None:
    """One schedule by id (deleted ones too) or by a live schedule's name."""
    return _lookup(tx, ref, lock=False)


@read_only(takes_locks=False)
def list_schedules(tx: Tx, *, include_deleted: bool = False,
                   queues: tuple[str, ...] | None = None) -> list[ScheduleRow]:
    """Schedules by name (deleted ones last when included), optionally only in ``queues``."""
    where, args = [], []
    if not include_deleted:
        where.append(sql.NOT_GONE)
    if queues is not None:
        if not queues:
            return []
        where.append(sql.IN_QUEUES)
        args.append(tuple(queues))
    statement = sql.LIST.format(where=" WHERE " + " AND ".join(where) if where else "")
    return [ScheduleRow.from_row(r) for r in tx.all(statement, args)]


@read_only(takes_locks=False)
def next_fire_at(tx: Tx) -> dt.datetime | None:
    """The earliest next tick of any ACTIVE schedule (None: none), for the fire loop's sleep."""
    row = tx.one(sql.NEXT_FIRE_AT)
    return py_time(row[0]) if row else None


__all__ = ["FIRE_BATCH", "FireResult", "NewSchedule", "SCHEDULE_EXISTS", "SCHEDULE_NOT_FOUND", "SCHEDULE_PREFIX",
           "ScheduleChange", "ScheduleRow", "create", "delete", "fire", "get_schedule", "list_schedules",
           "new_schedule_id", "next_fire_at", "pause", "resume", "tick_key"]
