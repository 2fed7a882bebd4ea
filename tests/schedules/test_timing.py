"""Schedule ticks as pure functions of time: cron in a zone across daylight-saving changes, intervals, missed ticks.

Europe/Berlin in 2026 springs forward on 29 March (02:00 CET -> 03:00 CEST)
and falls back on 25 October (03:00 CEST -> 02:00 CET).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim

from pulse_trio.client.schedules import build_schedule
from pulse_trio.schedule_timing import InvalidField, missed_policy, timing

UTC = dt.timezone.utc
BERLIN = "Europe/Berlin"


def at(*parts: int) -> dt.datetime:
    return dt.datetime(*parts, tzinfo=UTC)


def ticks_after(rule, start: dt.datetime, n: int) -> list[dt.datetime]:
    found, moment = [], start
    for _ in range(n):
        moment = rule.after(moment)
        found.append(moment)
    return found


def test_a_daily_time_the_clocks_skip_fires_at_the_first_minute_after_the_jump():
    rule = timing(cron="30 2 * * *", timezone=BERLIN)
    assert ticks_after(rule, at(2026, 3, 27, 12), 3) == [
        at(2026, 3, 28, 1, 30),  # 02:30 CET
        at(2026, 3, 29, 1, 0),  # 02:30 does not exist: 03:00 CEST, once
        at(2026, 3, 30, 0, 30),  # 02:30 CEST
    ]


def test_a_daily_time_the_clocks_repeat_fires_once_at_its_first_occurrence():
    rule = timing(cron="30 2 * * *", timezone=BERLIN)
    assert ticks_after(rule, at(2026, 10, 24, 12), 3) == [
        at(2026, 10, 25, 0, 30),  # 02:30 CEST; the second 02:30 (CET, 01:30 UTC) does not fire
        at(2026, 10, 26, 1, 30),  # 02:30 CET
        at(2026, 10, 27, 1, 30),
    ]


def test_looking_back_agrees_with_looking_forward_on_both_changes():
    rule = timing(cron="30 2 * * *", timezone=BERLIN)
    assert rule.latest(at(2026, 3, 29, 1, 0, 0, 500), 2) == [at(2026, 3, 28, 1, 30), at(2026, 3, 29, 1, 0)]
    # Between the two 02:30s of the fall-back day the latest tick is still the first one.
    assert rule.latest(at(2026, 10, 25, 1, 45), 2) == [at(2026, 10, 24, 0, 30), at(2026, 10, 25, 0, 30)]


def test_a_step_through_every_half_hour_follows_real_instants():
    rule = timing(cron="*/30 * * * *", timezone=BERLIN)
    fall = ticks_after(rule, at(2026, 10, 24, 23, 40), 6)
    assert fall == [at(2026, 10, 25, h, m) for h in range(0, 3) for m in (0, 30)]  # the repeated hour fires twice
    spring = ticks_after(rule, at(2026, 3, 28, 23, 40), 4)
    assert spring == [at(2026, 3, 29, 0, 0), at(2026, 3, 29, 0, 30), at(2026, 3, 29, 1, 0), at(2026, 3, 29, 1, 30)]


def test_a_zone_without_changes_and_utc_agree_with_plain_arithmetic():
    rule = timing(cron="0 9 * * MON", timezone="UTC")
    assert ticks_after(rule, at(2026, 12, 2), 2) == [at(2026, 12, 7, 9), at(2026, 12, 14, 9)]


def test_interval_ticks_are_multiples_of_the_interval_since_the_epoch():
    rule = timing(interval=300, timezone=BERLIN)  # the zone does not move an interval
    assert rule.after(at(2026, 3, 29, 0, 59, 59)) == at(2026, 3, 29, 1, 0)
    assert rule.after(at(2026, 3, 29, 1, 0)) == at(2026, 3, 29, 1, 5)  # strictly after
    assert rule.latest(at(2026, 3, 29, 1, 7), 2) == [at(2026, 3, 29, 1, 0), at(2026, 3, 29, 1, 5)]


def test_due_fires_the_current_tick_and_moves_past_now():
    rule = timing(interval=1)
    ticks, after = rule.due(at(2026, 1, 1, 0, 0, 5), at(2026, 1, 1, 0, 0, 5, 200_000), 1)
    assert ticks == [at(2026, 1, 1, 0, 0, 5)] and after == at(2026, 1, 1, 0, 0, 6)
    assert rule.due(after, at(2026, 1, 1, 0, 0, 5, 900_000), 1) == ([], after)  # not due yet: nothing


def test_skip_drops_missed_ticks_and_catch_up_fires_at_most_its_limit():
    rule = timing(interval=60)
    down_from, back_at = at(2026, 1, 1, 0, 1), at(2026, 1, 1, 1, 0, 30)  # an hour of missed ticks
    assert rule.due(down_from, back_at, 1) == ([at(2026, 1, 1, 1, 0)], at(2026, 1, 1, 1, 1))
    ticks, after = rule.due(down_from, back_at, 5)
    assert ticks == [at(2026, 1, 1, 0, m) for m in range(56, 60)] + [at(2026, 1, 1, 1, 0)]
    assert after == at(2026, 1, 1, 1, 1)
    # A limit larger than what was missed fires every missed tick, never one before next_at.
    assert rule.due(at(2026, 1, 1, 0, 58), back_at, 100)[0] == [at(2026, 1, 1, 0, 58), at(2026, 1, 1, 0, 59),
                                                               at(2026, 1, 1, 1, 0)]


def test_a_daily_schedule_down_across_the_spring_change_catches_up_each_day_once():
    rule = timing(cron="30 2 * * *", timezone=BERLIN)
    ticks, after = rule.due(at(2026, 3, 28, 1, 30), at(2026, 3, 30, 12), 10)
    assert ticks == [at(2026, 3, 28, 1, 30), at(2026, 3, 29, 1, 0), at(2026, 3, 30, 0, 30)]
    assert after == at(2026, 3, 31, 0, 30)


@pytest.mark.parametrize("fields,field", [
    (dict(cron="61 * * * *"), "cron"),
    (dict(cron="* * * *"), "cron"),
    (dict(cron="0 0 30 2 *"), "cron"),
    # Beyond ranges, lists, steps, names and the day fields' L, LW, 5L and 1#5 nothing is taken (operations.md §8.1).
    (dict(cron="0 0 ? * *"), "cron"),
    (dict(cron="0 0 * * ?"), "cron"),
    (dict(cron="0 0 15W * *"), "cron"),
    (dict(cron="0 0 L-3 * *"), "cron"),
    (dict(cron="0 0 * * 1#6"), "cron"),
    (dict(cron="0 0 * * L"), "cron"),
    (dict(cron="@daily"), "cron"),
    (dict(cron="0 0 0 * * *"), "cron"),
    (dict(cron="0 0 0 * * * 2026"), "cron"),
    # cronsim reads a step after L or LW as no step at all: the month's last day, not every other one.
    (dict(cron="0 0 L/2 * *"), "cron"),
    (dict(cron="0 0 1,lw/3 * *"), "cron"),
    (dict(cron=""), "cron"),
    (dict(cron="x" * 300), "cron"),
    (dict(cron=5), "cron"),
    (dict(cron="* * * * *", interval=60), "interval"),
    (dict(), "cron"),
    (dict(interval=0), "interval"),
    (dict(interval=0.5), "interval"),
    (dict(interval=-60), "interval"),
    (dict(interval=366 * 86_400 + 1), "interval"),
    (dict(interval="60"), "interval"),
    (dict(interval=True), "interval"),
    (dict(interval=60, timezone="Mars/Olympus"), "timezone"),
    (dict(interval=60, timezone="../../etc/passwd"), "timezone"),
    (dict(interval=60, timezone="localtime"), "timezone"),
    (dict(interval=60, timezone=None), "timezone"),
])
def test_bad_timing_names_its_field(fields, field):
    with pytest.raises(InvalidField) as refused:
        timing(**fields)
    assert refused.value.field == field


def test_the_last_day_and_nth_weekday_forms_tick_on_the_days_they_name_across_the_changes():
    """L, LW, 5L and MON#5 name days; the clocks' changes treat their times like any other (Berlin 2026:
    the last Sundays of March and October are the change days)."""
    last_sunday = timing(cron="30 2 * * 0L", timezone=BERLIN)
    assert ticks_after(last_sunday, at(2026, 3, 1), 2) == [at(2026, 3, 29, 1, 0), at(2026, 4, 26, 0, 30)]
    assert last_sunday.after(at(2026, 10, 1)) == at(2026, 10, 25, 0, 30)  # the first 02:30, CEST, once
    assert last_sunday.latest(at(2026, 10, 25, 1, 45), 2) == [at(2026, 9, 27, 0, 30), at(2026, 10, 25, 0, 30)]
    last_day = timing(cron="0 0 L * *", timezone=BERLIN)  # 2028 is a leap year
    assert ticks_after(last_day, at(2028, 1, 15), 3) == [at(2028, 1, 30, 23), at(2028, 2, 28, 23), at(2028, 3, 30, 22)]
    last_weekday = timing(cron="0 9 LW * *", timezone=BERLIN)  # 31 January is a Saturday, 31 May a Sunday
    assert ticks_after(last_weekday, at(2026, 1, 1), 5) == [
        at(2026, 1, 30, 8), at(2026, 2, 27, 8), at(2026, 3, 31, 7), at(2026, 4, 30, 7), at(2026, 5, 29, 7)]
    fifth_monday = timing(cron="0 9 * * mon#5,5L", timezone=BERLIN)
    assert ticks_after(fifth_monday, at(2026, 3, 1), 3) == [at(2026, 3, 27, 8), at(2026, 3, 30, 7),
                                                            at(2026, 4, 24, 7)]
    assert fifth_monday.latest(at(2026, 4, 24, 7), 3, since=at(2026, 3, 1)) == [
        at(2026, 3, 27, 8), at(2026, 3, 30, 7), at(2026, 4, 24, 7)]


def test_missed_policies():
    assert missed_policy("skip", None) == ("skip", 1)
    assert missed_policy("catch_up", None) == ("catch_up", 10)
    assert missed_policy("catch_up", 1000) == ("catch_up", 1000)
    for missed, limit, field in (("later", None, "missed"), ("skip", 3, "catch_up_limit"),
                                 ("catch_up", 0, "catch_up_limit"), ("catch_up", 1001, "catch_up_limit"),
                                 ("catch_up", 2.5, "catch_up_limit")):
        with pytest.raises(InvalidField) as refused:
            missed_policy(missed, limit)
        assert refused.value.field == field


@pytest.mark.parametrize("fields,field", [
    (dict(name="sch_x"), "name"), (dict(name="Bad Name"), "name"), (dict(queue=""), "queue"), (dict(kind=7), "kind"),
    (dict(payload_json="{bad"), "payload"), (dict(payload_json='"' + "x" * 300_000 + '"'), "payload"),
    (dict(priority=99), "priority"), (dict(max_attempts=0), "max_attempts"), (dict(interval="soon"), "interval"),
    (dict(interval=Decimal("0.5")), "interval"), (dict(missed="catch_up", catch_up_limit=100_000), "catch_up_limit"),
    # Refused as given: as ints they would be a billion digits of work on the event loop.
    (dict(interval=Decimal("1e999999999")), "interval"),
    (dict(missed="catch_up", catch_up_limit=Decimal("-1e999999999")), "catch_up_limit"),
])
def test_every_field_of_a_new_schedule_is_checked_by_name(fields, field):
    given = dict(name="ok", queue="q", kind="k", interval=60) | fields
    with pytest.raises(InvalidField) as refused:
        build_schedule(**given)
    assert refused.value.field == field


def test_looking_back_stops_at_since():
    cron, every = timing(cron="* * * * *"), timing(interval=60)
    for rule in (cron, every):
        assert rule.latest(at(2026, 1, 1, 1, 0, 30), 1000, since=at(2026, 1, 1, 0, 58)) == [
            at(2026, 1, 1, 0, 58), at(2026, 1, 1, 0, 59), at(2026, 1, 1, 1, 0)]
        assert rule.latest(at(2026, 1, 1, 1, 0, 30), 1000, since=at(2026, 1, 1, 0, 58, 0, 1)) == [
            at(2026, 1, 1, 0, 59), at(2026, 1, 1, 1, 0)]
        assert rule.latest(at(2026, 1, 1, 1, 0, 30), 1000, since=at(2026, 1, 1, 1, 0, 31)) == []


def test_in_the_second_pass_of_a_repeated_hour_the_next_tick_is_still_ahead():
    """Berlin falls back on 25 October 2026: 02:00-02:59 happens at 00:00-00:59 UTC and again at 01:00-01:59.

    A daily 02:50 ticks once, at the first 02:50 (00:50 UTC). From the second pass the next tick is the
    next day's, never the first pass's, which is past; a first-pass tick looked at late is still due.
    """
    nightly = timing(cron="50 2 * * *", timezone="Europe/Berlin")
    second_pass = at(2026, 10, 25, 1, 40)  # the second 02:40
    assert nightly.after(second_pass) == at(2026, 10, 26, 1, 50)
    assert nightly.latest(second_pass, 1) == [at(2026, 10, 25, 0, 50)]
    late = timing(cron="59 2 * * *", timezone="Europe/Berlin")
    assert late.due(at(2026, 10, 25, 0, 59), at(2026, 10, 25, 1, 0, 2), 1) == (
        [at(2026, 10, 25, 0, 59)], at(2026, 10, 26, 1, 59))


@pytest.mark.timeout(10)
def test_looking_back_across_a_change_off_the_hour_finds_the_ticks():
    """Pacific/Chatham (UTC+12:45, +13:45 in summer) falls back on 5 April 2026 from 03:45 to 02:45.

    There cronsim's own walk back never returns; looked at on time or late, the ticks are found.
    """
    two_hourly = timing(cron="0 */2 * * *", timezone="Pacific/Chatham")
    four = at(2026, 4, 4, 15, 15)  # 04:00 +12:45, the first tick after the repeated 02:45-03:45
    assert two_hourly.after(at(2026, 4, 4, 12, 15)) == four
    assert two_hourly.due(four, four + dt.timedelta(milliseconds=50), 10) == ([four], at(2026, 4, 4, 17, 15))
    nightly = timing(cron="*/20 2 * * *", timezone="Pacific/Chatham")
    last = at(2026, 4, 4, 12, 55)  # 02:40 +13:45, the last before the change
    assert nightly.due(last, at(2026, 4, 4, 13, 20), 1) == ([last], at(2026, 4, 5, 13, 15))


#: Clocks that change off the hour or by other than an hour (Kathmandu once, in 1986), and Berlin's on the hour.
ODD_ZONES = ("Pacific/Chatham", "Australia/Lord_Howe", "America/St_Johns", "Australia/Adelaide", "Asia/Kathmandu",
             "Antarctica/Troll", "Europe/Berlin")
#: Real instants (minute or hour starting with ``*``) and cron's wall-clock rule, around the changes' hours.
EXPRESSIONS = ("*/15 * * * *", "0 */2 * * *", "*/20 1-3 * * *", "10,40 1-3 * * *", "45 2 * * *", "0,30 1-3 * * SUN")
MINUTE = dt.timedelta(minutes=1)


def _changes(zone: ZoneInfo, year: int) -> list[dt.datetime]:
    """The instants (whole minutes) the zone's offset changes at in ``year``."""
    found, step = [], dt.timedelta(hours=6)
    moment, end = at(year, 1, 1), at(year + 1, 1, 1)
    while moment < end:
        offset = moment.astimezone(zone).utcoffset()
        if (moment + step).astimezone(zone).utcoffset() != offset:
            same, changed = 0, step // MINUTE
            while changed - same > 1:
                middle = (same + changed) // 2
                if (moment + middle * MINUTE).astimezone(zone).utcoffset() == offset:
                    same = middle
                else:
                    changed = middle
            found.append(moment + changed * MINUTE)
        moment += step
    return found


def _reference(cron: str, walls: list[tuple[dt.datetime, dt.datetime, int, dt.datetime]]) -> list[dt.datetime]:
    """The ticks among ``walls`` (each UTC minute, its wall time and fold, the wall time a minute before).

    By the rules, minute by minute: real instants, every minute whose wall time matches; cron's rule (a fixed
    minute and hour), a matching wall time's first pass, and the first minute after a jump that skipped a
    matching wall time. cronsim only says which values each field allows.
    """
    fields = CronSim(cron, dt.datetime(2000, 1, 1))

    def matches(wall: dt.datetime) -> bool:
        return (wall.minute in fields.minutes and wall.hour in fields.hours and wall.month in fields.months
                and fields.match_day(wall.date()))

    minute, hour = cron.split()[:2]
    if minute.startswith("*") or hour.startswith("*"):
        return [moment for moment, wall, _, _ in walls if matches(wall)]
    return [moment for moment, wall, fold, shown in walls if (fold == 0 and matches(wall))
            or any(matches(shown + k * MINUTE) for k in range(1, (wall - shown) // MINUTE))]


def _windows():
    """Each zone's changes of several years, a day around each: (zone, walls as :func:`_reference` takes them)."""
    for name in ODD_ZONES:
        zone = ZoneInfo(name)
        for year in (1986, 2026, 2027):
            for change in _changes(zone, year):
                locals_ = [(change + k * MINUTE).astimezone(zone) for k in range(-12 * 60 - 1, 12 * 60)]
                walls = [local.replace(tzinfo=None) for local in locals_]
                yield name, [(local.astimezone(UTC), walls[i + 1], local.fold, walls[i])
                             for i, local in enumerate(locals_[1:])]


def test_ticks_across_every_kind_of_clock_change_agree_with_a_minute_by_minute_reference():
    """Around each change of several years, for each expression: the ticks walked forward and looked back
    at, and the next and latest ticks from moments on and between them, are those a minute-by-minute walk in
    UTC finds."""
    micro = dt.timedelta(microseconds=1)
    for name, walls in _windows():
        start, end = walls[0][0], walls[-1][0] + MINUTE
        for cron in EXPRESSIONS:
            rule, ticks = timing(cron=cron, timezone=name), _reference(cron, walls)
            walked, moment = [], start - micro
            while (moment := rule.after(moment)) < end:
                walked.append(moment)
            assert walked == ticks, (name, cron)
            assert rule.latest(end - micro, len(ticks) + 1, since=start) == ticks, (name, cron)
            for moment in (start + k * dt.timedelta(minutes=17, seconds=30) for k in range(82)):
                before, after = [t for t in ticks if t <= moment][-2:], [t for t in ticks if t > moment][:1]
                if after:
                    assert rule.after(moment) == after[0], (name, cron, moment)
                if len(before) == 2:
                    assert rule.latest(moment, 2) == before, (name, cron, moment)
