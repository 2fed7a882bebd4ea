"""When a recurring schedule ticks: a cron expression in an IANA time zone, or a fixed interval.

Pure functions of time, no database and no clock, so daylight-saving edges
are unit-tested and every ``serve`` process computes the same ticks.

* **cron**: five fields (minute hour day-of-month month day-of-week), parsed
  by ``cronsim`` (with its day forms ``L``, ``LW``, ``5L`` and ``1#5``, which
  only name days), which walks naive wall-clock times; when the schedule's
  zone shows each match is read here, alike for every change of any size
  at any minute. An expression whose minute and hour fields both name their
  values (``30 2 * * *``, ``0,30 1-3 * * *``) follows cron's rule across a
  daylight-saving change: a time the clocks skip fires at the first minute
  after the jump, a time they repeat fires once, at its first occurrence.
  One whose minute or hour field starts with ``*`` (``*/15 * * * *``,
  ``*/20 2 * * *``) matches real instants: a repeated time fires in each
  pass, a skipped one not at all (docs/operations.md §8).
* **interval**: every N whole seconds, counted from the Unix epoch in UTC
  (``300`` fires at :00, :05, … of every hour). The zone does not move it.

Every tick is a whole second in UTC. :meth:`Timing.due` is the one place
the missed-tick policy is applied.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import heapq
import zoneinfo
from collections.abc import Iterator
from decimal import Decimal
from typing import Final

from cronsim import CronSim, CronSimError

from pulse_trio.picklable import ByFields

UTC = dt.timezone.utc
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = dt.timedelta(seconds=1)
_MINUTE = dt.timedelta(minutes=1)
_MICRO = dt.timedelta(microseconds=1)

#: The shortest interval: one tick a second.
MIN_INTERVAL_S: Final = 1
#: The longest interval: 366 days.
MAX_INTERVAL_S: Final = 366 * 86_400
MAX_CRON_CHARS: Final = 255
#: What happens to ticks that were missed (a later tick was already due when they were looked at).
MISSED_POLICIES: Final = ("skip", "catch_up")
#: The most ticks one catch-up fires (``catch_up_limit``).
MAX_CATCH_UP: Final = 1000
DEFAULT_CATCH_UP: Final = 10
#: The refusal code of a field out of its rules (HTTP 422, CLI exit 2).
INVALID_SCHEDULE: Final = "invalid_schedule"
#: The most cron matches one walk for a schedule's ticks reads: a full catch-up and every minute of two days,
#: more than any stretch of wall-clock time the clocks skip or repeat.
MAX_CRON_MATCHES: Final = MAX_CATCH_UP + 2 * 24 * 60


_HOST_FILES = frozenset({"localtime", "posixrules", "Factory"})


class TicksNotFound(ValueError):
    """A cron schedule's ticks cannot be worked out (none within MAX_CRON_MATCHES matches): it cannot tick."""


class InvalidField(ByFields, ValueError):
    """One field of a schedule breaks its rule; nothing is written. ``field`` names it."""

    code = INVALID_SCHEDULE

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@functools.lru_cache(maxsize=1)
def zone_names() -> frozenset[str]:
    """Every IANA zone name this installation knows (the ``tzdata`` package guarantees them).

    A host's own zone files add names that are no zones of the database
    (``localtime``, ``posixrules``, ``Factory``): they are left out, so a
    schedule means the same on every host.
    """
    return frozenset(zoneinfo.available_timezones()) - _HOST_FILES


def zone(name: object) -> zoneinfo.ZoneInfo:
    """The IANA zone called ``name``; InvalidField("timezone") for anything else (paths, ``localtime``)."""
    if type(name) is not str or name not in zone_names():
        shown = repr(name[:64]) if isinstance(name, str) else type(name).__name__
        raise InvalidField("timezone", f"{shown} is not an IANA time zone name (such as UTC or Europe/Berlin)")
    return zoneinfo.ZoneInfo(name)


def _utc(moment: dt.datetime) -> dt.datetime:
    if moment.tzinfo is None:
        raise ValueError("an aware datetime is required")
    return moment.astimezone(UTC)


def _instant(wall: dt.datetime, zone: zoneinfo.ZoneInfo, fold: int) -> dt.datetime | None:
    """When (UTC) the clocks show ``wall``, in pass ``fold`` when they show it twice; None when they skip it."""
    at = wall.replace(tzinfo=zone, fold=fold).astimezone(UTC)
    return at if at.astimezone(zone).replace(tzinfo=None) == wall else None


def _after_the_jump(wall: dt.datetime, zone: zoneinfo.ZoneInfo) -> dt.datetime:
    """When (UTC) the clocks first show a whole minute after ``wall``, a time they skip (cron's rule).

    The skip is at most the offsets' difference long, so the minute is found by halving that span.
    """
    before, after = (wall.replace(tzinfo=zone, fold=fold).utcoffset() for fold in (0, 1))
    jump = after - before  # type: ignore[operator]
    skipped, shown = 0, -(-jump // _MINUTE)
    while shown - skipped > 1:
        middle = (skipped + shown) // 2
        if _instant(wall + middle * _MINUTE, zone, 0) is None:
            skipped = middle
        else:
            shown = middle
    at = _instant(wall + shown * _MINUTE, zone, 0)
    if at is None:
        raise TicksNotFound(f"the clocks show no time within {jump} after {wall}")
    return at


def _repeated(local: dt.datetime) -> dt.timedelta:
    """How long the clocks repeat the wall time ``local`` shows: zero unless it is shown twice."""
    return abs(local.replace(fold=0).utcoffset() - local.replace(fold=1).utcoffset())  # type: ignore[operator]


@dataclasses.dataclass(frozen=True, slots=True)
class Timing:
    """A schedule's rule: exactly one of ``cron`` and ``interval_s``, and its zone's name."""

    cron: str | None
    interval_s: int | None
    timezone: str = "UTC"

    @property
    def zone(self) -> zoneinfo.ZoneInfo:
        return zone(self.timezone)

    def after(self, moment: dt.datetime) -> dt.datetime:
        """The first tick strictly after ``moment`` (UTC). StopIteration: none within 50 years."""
        moment = _utc(moment)
        if self.interval_s is not None:
            step = self.interval_s * 1_000_000
            elapsed = (moment - _EPOCH) // _MICRO
            return _EPOCH + dt.timedelta(microseconds=(elapsed // step + 1) * step)
        assert self.cron is not None
        local = moment.astimezone(self.zone)
        # In the first pass of a repeated stretch, the second pass's earlier wall times are later ticks:
        # the walk starts at the stretch's start, and the filter below drops what is not after the moment.
        for at in self._ticks(local.replace(tzinfo=None) - _repeated(local), reverse=False):
            if at > moment:
                return at
        raise StopIteration

    def latest(self, moment: dt.datetime, count: int, since: dt.datetime | None = None) -> list[dt.datetime]:
        """Up to ``count`` ticks at or before ``moment`` (and not before ``since``), oldest first (UTC)."""
        moment = _utc(moment)
        floor = _utc(since) if since is not None else None
        if self.interval_s is not None:
            step = self.interval_s * 1_000_000
            last = (moment - _EPOCH) // _MICRO // step
            first = last - count + 1
            if floor is not None:
                first = max(first, -(-((floor - _EPOCH) // _MICRO) // step))  # the first tick at or after since
            return [_EPOCH + dt.timedelta(microseconds=k * step) for k in range(first, last + 1)]
        assert self.cron is not None
        local = moment.astimezone(self.zone)
        # In the second pass of a repeated stretch, the first pass's later wall times are earlier ticks:
        # the walk back starts at the stretch's end, and the filter below drops what is later.
        found: list[dt.datetime] = []
        for at in self._ticks(local.replace(tzinfo=None) + _repeated(local), reverse=True):
            if floor is not None and at < floor:
                break
            if at <= moment and (not found or at < found[-1]):  # skipped times share the tick after the jump
                found.append(at)
                if len(found) == count:
                    break
        return found[::-1]

    def _ticks(self, wall: dt.datetime, *, reverse: bool) -> Iterator[dt.datetime]:
        """The cron ticks (UTC) in order, one way from the naive wall time ``wall`` (included); repeats possible.

        cronsim matches naive wall-clock times only: there each of its steps moves one way and its horizon
        ends the walk (in a zone, across a change, its own walk can loop for ever). When the clocks show each
        match is read from the zone: under cron's rule (module docstring) at its first pass, a skipped one
        after the jump; otherwise at every instant, so each pass through a repeated stretch is a walk of its own.
        """
        assert self.cron is not None
        minute, hour = self.cron.split()[:2]
        cron_rule = not minute.startswith("*") and not hour.startswith("*")  # as cronsim itself tells them apart
        walks = [self._walk(wall, fold, cron_rule, reverse) for fold in ((0,) if cron_rule else (0, 1))]
        return heapq.merge(*walks, reverse=reverse)

    def _walk(self, wall: dt.datetime, fold: int, cron_rule: bool, reverse: bool) -> Iterator[dt.datetime]:
        """One pass of :meth:`_ticks`; a time the clocks skip ticks after the jump under cron's rule, else never."""
        assert self.cron is not None
        zone = self.zone
        start = wall + _MICRO if reverse else wall - _MICRO  # cronsim starts past a whole second
        for read, match in enumerate(CronSim(self.cron, start, reverse=reverse), 1):
            if read > MAX_CRON_MATCHES:
                raise TicksNotFound(f"{self.cron!r} in {self.timezone}: no tick within {MAX_CRON_MATCHES} matches")
            at = _instant(match, zone, fold)
            if at is None and cron_rule:
                at = _after_the_jump(match, zone)
            if at is not None:
                yield at

    def due(self, next_at: dt.datetime, now: dt.datetime, limit: int) -> tuple[list[dt.datetime], dt.datetime]:
        """The ticks to fire now, and the schedule's next tick after them.

        ``next_at`` is the first tick not fired yet. A tick is *missed* when
        the tick after it is due too; the latest ``limit`` due ticks fire
        (``skip`` is ``limit`` 1: only the current one) and earlier ones are
        dropped. The next tick is the first after ``now``, so a tick is
        never looked at twice.
        """
        if next_at > now:
            return [], next_at
        fired = self.latest(now, limit, since=next_at)
        return fired, self.after(now)

    def as_json(self) -> dict[str, object]:
        return {"cron": self.cron, "interval": self.interval_s, "timezone": self.timezone}


def _quoted(number: int | Decimal) -> str:
    """A refused number for a message, as given (a Decimal keeps its exponent) and cut short like the value."""
    text = str(Decimal(number))  # through Decimal: str() of a long int is refused past the interpreter's digit limit
    return text if len(text) <= 40 else text[:39] + "…"


def timing(*, cron: object = None, interval: object = None, timezone: object = "UTC") -> Timing:
    """A checked :class:`Timing`: one InvalidField naming the first field that breaks its rule."""
    if (cron is None) == (interval is None):
        raise InvalidField("cron" if cron is None else "interval", "give a cron expression or an interval, one of them")
    zone(timezone)
    if interval is not None:
        whole = isinstance(interval, Decimal) and interval.is_finite() and interval == interval.to_integral_value()
        if type(interval) is not int and not whole:
            raise InvalidField("interval", "must be a whole number of seconds")
        # Compared as given, before int(): 1e999999 as an int is a million digits of work.
        if not MIN_INTERVAL_S <= interval <= MAX_INTERVAL_S:  # type: ignore[operator]
            raise InvalidField("interval", f"must be {MIN_INTERVAL_S}..{MAX_INTERVAL_S} seconds "
                                           f"(got {_quoted(interval)})")  # type: ignore[arg-type]
        return Timing(None, int(interval), str(timezone))  # type: ignore[arg-type]
    if type(cron) is not str or not cron.strip() or len(cron) > MAX_CRON_CHARS or not cron.isascii():
        raise InvalidField("cron", f"must be a cron expression of 1-{MAX_CRON_CHARS} ASCII characters")
    text = " ".join(cron.split())
    if len(text.split(" ")) != 5:
        raise InvalidField("cron", "must have five fields: minute hour day-of-month month day-of-week")
    # cronsim reads a step after the day of month's L or LW as none (``L/2`` is every month's last day).
    if any("/" in term and term.split("/")[0] in ("L", "LW") for term in text.split(" ")[2].upper().split(",")):
        raise InvalidField("cron", f"{text!r} is not a cron expression: L and LW take no step")
    found = Timing(text, None, str(timezone))  # type: ignore[arg-type]
    try:
        found.after(dt.datetime.now(UTC))
    except CronSimError as exc:
        raise InvalidField("cron", f"{text!r} is not a cron expression: {exc}") from None
    except (StopIteration, TicksNotFound):
        raise InvalidField("cron", f"{text!r} never fires") from None
    return found


def missed_policy(missed: object, catch_up_limit: object) -> tuple[str, int]:
    """(policy, limit): ``skip`` fires only the current tick (limit 1); ``catch_up`` up to ``catch_up_limit``."""
    if missed not in MISSED_POLICIES:
        raise InvalidField("missed", f"must be one of {', '.join(MISSED_POLICIES)}")
    if missed == "skip":
        if catch_up_limit is not None:
            raise InvalidField("catch_up_limit", "goes with missed=catch_up only")
        return "skip", 1
    if catch_up_limit is None:
        return "catch_up", DEFAULT_CATCH_UP
    whole = isinstance(catch_up_limit, Decimal) and catch_up_limit.is_finite() \
        and catch_up_limit == catch_up_limit.to_integral_value()
    if (type(catch_up_limit) is not int and not whole) or not 1 <= catch_up_limit <= MAX_CATCH_UP:  # type: ignore[operator]
        raise InvalidField("catch_up_limit", f"must be an integer 1..{MAX_CATCH_UP}")
    return "catch_up", int(catch_up_limit)  # type: ignore[arg-type]


__all__ = ["DEFAULT_CATCH_UP", "INVALID_SCHEDULE", "InvalidField", "MAX_CATCH_UP", "MAX_CRON_CHARS",
           "MAX_INTERVAL_S", "MIN_INTERVAL_S", "MISSED_POLICIES", "Timing", "missed_policy", "timing", "zone",
           "zone_names"]
