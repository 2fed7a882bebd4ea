"""Recurring schedules from Python: the one place a schedule's fields are checked.

The CLI (``pulse-trio schedules``) and the HTTP API (``/v1/schedules``) are
thin faces over :func:`build_schedule` and :class:`Schedules`. A field that
breaks its rule raises :class:`~pulse_trio.schedule_timing.InvalidField`
naming it (HTTP 422, CLI exit 2) before anything reaches the database.

    with Client(db) as client:
        schedules = Schedules(client.store)
        schedules.create(build_schedule(name="nightly", queue="reports", kind="build",
                                        cron="30 2 * * *", timezone="Europe/Berlin"), created_by="me")
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from typing import Any

from pulse_trio.client import ranges
from pulse_trio.client.producer import ClientError, canonical_payload, check_by
from pulse_trio.contract.grammar import ULID_PATTERN, is_kind, is_queue
from pulse_trio.schedule_timing import InvalidField, missed_policy, timing
from pulse_trio.store.schedule import schedules as stored
from pulse_trio.store.engine.facade import SyncStore
from pulse_trio.store.engine.results import Refusal



UTC = dt.timezone.utc
_SCHEDULE_ID = re.compile(f"{stored.SCHEDULE_PREFIX}{ULID_PATTERN}")
#: The body fields of a new schedule, in the order they are checked (and documented).
FIELDS = ("name", "queue", "kind", "payload", "cron", "interval", "timezone", "missed", "catch_up_limit",
          "priority", "max_attempts")


def _name(field: str, value: Any) -> str:
    check = is_kind if field == "kind" else is_queue
    if type(value) is not str or not check(value):
        raise InvalidField(field, "must be 1-64 of a-z 0-9 _ . -, starting with a letter or digit")
    return value


def _integer(field: ranges.Range, value: Any) -> int:
    if value is None:
        return int(field.default)  # type: ignore[arg-type]
    try:
        return int(field.check(value))
    except ranges.OutOfRange as exc:
        raise InvalidField(field.name, str(exc).removeprefix(f"{field.name} ")) from None


def build_schedule(*, name: Any, queue: Any, kind: Any, payload: Any = None, payload_json: str | None = None,
                   cron: Any = None, interval: Any = None, timezone: Any = None, missed: Any = None,
                   catch_up_limit: Any = None, priority: Any = None, max_attempts: Any = None) -> stored.NewSchedule:
    """A checked schedule to create; InvalidField names the first field out of its rule."""
    _name("name", name)
    if name.startswith(stored.SCHEDULE_PREFIX):
        raise InvalidField("name", f"must not start with {stored.SCHEDULE_PREFIX!r} (that is how ids start)")
    _name("queue", queue)
    _name("kind", kind)
    try:
        text = canonical_payload(payload, payload_json=payload_json)
    except ClientError as exc:  # its message names the payload already, as InvalidField does
        raise InvalidField("payload", exc.message.removeprefix("payload").removeprefix(":").lstrip()) from None
    if isinstance(interval, float):
        interval = Decimal(repr(interval))
    rule = timing(cron=cron, interval=interval, timezone="UTC" if timezone is None else timezone)
    policy, limit = missed_policy("skip" if missed is None else missed, catch_up_limit)
    return stored.NewSchedule(name=name, queue=queue, kind=kind, payload_json=text, timing=rule, missed=policy,
                              catch_up_limit=limit, priority=_integer(ranges.PRIORITY, priority),
                              max_attempts=_integer(ranges.MAX_ATTEMPTS, max_attempts))


class ScheduleNotFound(ClientError):
    def __init__(self, ref: str) -> None:
        super().__init__(stored.SCHEDULE_NOT_FOUND, f"no schedule {ref[:80]}")


def check_ref(ref: Any) -> str:
    """A schedule id (``sch_…``) or a live schedule's name; anything else names no schedule."""
    if type(ref) is not str or not (_SCHEDULE_ID.fullmatch(ref) or
                                    (is_queue(ref) and not ref.startswith(stored.SCHEDULE_PREFIX))):
        raise ScheduleNotFound(str(ref))
    return ref


class Schedules:
    """Create, read and change schedules on one store (blocking; thread-safe like the store).

    Each returns :class:`~pulse_trio.store.schedule.schedules.ScheduleRow` values:
    ``as_json_text()`` keeps the payload's digits, ``as_json()`` is a dict.
    """

    def __init__(self, store: SyncStore) -> None:
        self.store = store

    def create(self, schedule: stored.NewSchedule, *, created_by: str,
               now: dt.datetime | None = None) -> stored.ScheduleRow:
        """A new schedule; InvalidRequest for a ``created_by`` no column holds, before any SQL sees it."""
        check_by("created_by", created_by)
        result = self.store.run_sync(stored.create, schedule=schedule, now=now or dt.datetime.now(UTC),
                                     created_by=created_by)
        if isinstance(result, Refusal):
            raise ClientError(result.code, result.message)
        return result

    def list(self, *, include_deleted: bool = False,
             queues: tuple[str, ...] | None = None) -> list[stored.ScheduleRow]:
        return self.store.run_sync(stored.list_schedules, include_deleted=include_deleted, queues=queues)

    def get(self, ref: str) -> stored.ScheduleRow:
        found = self.store.run_sync(stored.get_schedule, ref=check_ref(ref))
        if found is None:
            raise ScheduleNotFound(ref)
        return found

    def change(self, action: str, ref: str, *, by: str,
               now: dt.datetime | None = None) -> tuple[stored.ScheduleRow, bool]:
        """``pause``, ``resume`` or ``delete``: the schedule after it, and whether this call changed it.

        ``by`` is held to the rule of every call's who-asked text (InvalidRequest naming it).
        """
        check_by("by", by)
        fn = {"pause": stored.pause, "resume": stored.resume, "delete": stored.delete}[action]
        result = self.store.run_sync(fn, ref=check_ref(ref), now=now or dt.datetime.now(UTC), by=by)
        if isinstance(result, Refusal):
            raise ScheduleNotFound(ref)
        return result.schedule, result.changed


__all__ = ["FIELDS", "InvalidField", "ScheduleNotFound", "Schedules", "build_schedule", "check_ref"]
