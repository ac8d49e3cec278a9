"""domain/schedules/cron.py: parsing, validation, time zones and the DST rules (docs/schedules.md)."""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.domain.errors import InvalidArgument, InvalidCron
from jobledger.domain.schedules import cron

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


# --- validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr",
    [
        "",
        "* * * *",
        "* * * * * *",
        "0 0 * * * * *",  # field count
        "60 * * * *",
        "* 24 * * *",
        "* * 0 * *",
        "* * 32 * *",
        "* * * 0 *",
        "* * * 13 *",
        "* * * * 8",  # out of range
        "*/0 * * * *",
        "a * * * *",
        "5-1 * * * *",
        "1- * * * *",
        "-1 * * * *",
        "1,,2 * * * *",
        "* * * FOO *",
        "* * * * FUNDAY",
        "@every_minute",  # malformed
        "0 0 30 2 *",
        "0 0 31 4,6 *",  # never fires
    ],
)
def test_invalid_crons_are_rejected(expr: str) -> None:
    with pytest.raises(InvalidCron) as info:
        cron.validate(expr, "UTC", NOW)
    assert info.value.code == "invalid_cron"


def test_a_cron_that_does_not_fire_within_five_years_is_rejected() -> None:
    # 29 February: 2100 is no leap year, so from March 2097 the next one is in 2104
    assert cron.validate("0 0 29 2 *", "UTC", NOW) == "0 0 29 2 *"
    with pytest.raises(InvalidCron, match="5 years"):
        cron.validate("0 0 29 2 *", "UTC", datetime(2097, 3, 1, tzinfo=UTC))


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        ("0 9 * JAN-MAR MON-FRI", "2026-03-02T09:00", "2026-03-03T09:00"),
        ("0 9 * * mon", "2026-03-02T09:00", "2026-03-09T09:00"),
        ("@daily", "2026-03-02T09:00", "2026-03-03T00:00"),
        ("@hourly", "2026-03-02T09:00", "2026-03-02T10:00"),
        ("0 0 L * *", "2026-03-02T09:00", "2026-03-31T00:00"),
        ("0 0 LW * *", "2026-05-01T00:00", "2026-05-29T00:00"),
        ("0 0 * * 5L", "2026-03-02T09:00", "2026-03-27T00:00"),
        ("0 0 * * MON#2", "2026-03-02T09:00", "2026-03-09T00:00"),
        ("10-50/20 * * * *", "2026-03-02T09:00", "2026-03-02T09:10"),
        ("0 0 1,15 * *", "2026-03-02T09:00", "2026-03-15T00:00"),
        ("0 0 * * 7", "2026-03-02T09:00", "2026-03-08T00:00"),  # 7 is Sunday
        ("  0   9  *  *  * ", "2026-03-02T09:00", "2026-03-03T09:00"),
    ],
)
def test_names_ranges_steps_and_extras(expr: str, after: str, expected: str) -> None:
    start = datetime.fromisoformat(after).replace(tzinfo=UTC)
    assert cron.next_slot(expr, "UTC", start) == datetime.fromisoformat(expected).replace(
        tzinfo=UTC
    )


def test_next_slot_is_strictly_after_and_in_the_zone() -> None:
    # 09:00 in Bangkok (+07:00, the reference's fixed offset) is 02:00 UTC
    first = cron.next_slot("0 9 * * *", "Asia/Bangkok", NOW)
    assert first == datetime(2026, 3, 3, 2, 0, tzinfo=UTC)
    assert first is not None and first.tzinfo == UTC
    assert cron.next_slot("0 9 * * *", "Asia/Bangkok", first) == first + timedelta(days=1)
    # milliseconds just before a slot still see the slot
    assert cron.next_slot("0 9 * * *", "Asia/Bangkok", first - timedelta(milliseconds=1)) == first


def test_unknown_time_zone() -> None:
    with pytest.raises(InvalidArgument, match="time zone"):
        cron.next_slot("0 9 * * *", "Mars/Olympus", NOW)
    with pytest.raises(InvalidArgument):
        cron.zone("")


@pytest.mark.parametrize(
    ("expr", "minutes"),
    [
        ("* * * * *", 1),
        ("*/5 * * * *", 5),
        ("0,1 * * * *", 1),
        ("*/15 9-17 * * *", 15),
        ("0 * * * *", 60),
        ("0 9 * * 1-5", 1440),
        ("0 0 1 1 *", 365 * 1440),
    ],
)
def test_interval_is_the_shortest_gap(expr: str, minutes: int) -> None:
    assert cron.interval(expr) == timedelta(minutes=minutes)
    # it never depends on DST: the same in a zone with transitions
    assert cron.interval(expr, "Europe/Berlin") == timedelta(minutes=minutes)


def test_slots_between_and_latest_slot_after_a_long_downtime() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    now = start + timedelta(days=40, minutes=7, seconds=30)
    listed = cron.slots_between("* * * * *", "UTC", start, start + timedelta(minutes=5), limit=100)
    assert listed == [start + timedelta(minutes=m) for m in range(1, 6)]
    assert len(cron.slots_between("* * * * *", "UTC", start, now, limit=100)) == 100
    assert cron.latest_slot("* * * * *", "UTC", now, floor=start) == now.replace(second=0)
    assert cron.latest_slot("0 0 1 1 *", "UTC", now, floor=start) == start
    assert cron.latest_slot("0 0 1 1 *", "UTC", now, floor=start + timedelta(days=1)) is None


# --- daylight saving time ----------------------------------------------------------------

ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Europe/London",
    "Australia/Sydney",
    "America/Santiago",
    "America/Havana",
]


@cache
def transitions(tz: str, year: int = 2026) -> list[tuple[datetime, timedelta, timedelta]]:
    """(UTC instant, offset before, offset after) of each DST change in `year`."""
    zone = ZoneInfo(tz)
    found = []
    at = datetime(year, 1, 1, tzinfo=UTC)
    before = at.astimezone(zone).utcoffset()
    while at.year == year:
        step = at + timedelta(minutes=30)
        after = step.astimezone(zone).utcoffset()
        if after != before:
            assert before is not None and after is not None
            found.append((step, before, after))
        at, before = step, after
    return found


def local_dates(tz: str, slots: list[datetime]) -> Counter[date]:
    zone = ZoneInfo(tz)
    return Counter(s.astimezone(zone).date() for s in slots)


def around(when: datetime, expr: str, tz: str, days: int = 3) -> list[datetime]:
    return cron.slots_between(
        expr, tz, when - timedelta(days=days), when + timedelta(days=days), limit=10_000
    )


@pytest.mark.parametrize("tz", ZONES)
def test_daily_cron_inside_the_gap_fires_once_at_the_first_valid_instant(tz: str) -> None:
    springs = [t for t in transitions(tz) if t[2] > t[1]]
    assert springs, f"{tz} has a spring-forward in 2026"
    for instant, before, _after in springs:
        wall = instant.replace(tzinfo=None) + before  # the first wall time that does not exist
        expr = f"{wall.minute} {wall.hour} * * *"
        slots = around(instant, expr, tz)
        assert set(local_dates(tz, slots).values()) == {1}, (tz, expr, slots)
        assert instant in slots, (tz, expr, instant, slots)  # = the end of the gap


@pytest.mark.parametrize("tz", ZONES)
def test_daily_cron_in_the_repeated_hour_fires_once_at_the_first(tz: str) -> None:
    falls = [t for t in transitions(tz) if t[2] < t[1]]
    assert falls
    for instant, before, after in falls:
        first_repeat_utc = instant - (before - after)  # wall time T+after, first pass
        wall = instant.replace(tzinfo=None) + after
        for minutes in (0, 30):
            expr = f"{wall.minute + minutes} {wall.hour} * * *"
            slots = around(instant, expr, tz)
            assert set(local_dates(tz, slots).values()) == {1}, (tz, expr, slots)
            assert first_repeat_utc + timedelta(minutes=minutes) in slots
            assert instant + timedelta(minutes=minutes) not in slots


@pytest.mark.parametrize(
    ("tz", "fall_back", "spring_forward"),
    [
        ("Europe/Berlin", date(2026, 10, 25), date(2026, 3, 29)),
        ("America/New_York", date(2026, 11, 1), date(2026, 3, 8)),
    ],
)
def test_0_2_daily_in_berlin_and_new_york(tz: str, fall_back: date, spring_forward: date) -> None:
    zone = ZoneInfo(tz)
    fb = [
        s
        for s in around(datetime.combine(fall_back, datetime.min.time(), UTC), "0 2 * * *", tz)
        if s.astimezone(zone).date() == fall_back
    ]
    assert len(fb) == 1
    assert fb[0].astimezone(zone).hour == 2 and fb[0].astimezone(zone).fold == 0
    sf = [
        s
        for s in around(datetime.combine(spring_forward, datetime.min.time(), UTC), "0 2 * * *", tz)
        if s.astimezone(zone).date() == spring_forward
    ]
    assert len(sf) == 1
    assert (sf[0].astimezone(zone).hour, sf[0].astimezone(zone).minute) == (3, 0)


@pytest.mark.parametrize("tz", ["Europe/Berlin", "America/New_York", "Australia/Sydney"])
def test_hourly_and_minutely_crons_follow_elapsed_time(tz: str) -> None:
    for instant, before, after in transitions(tz):
        hourly = around(instant, "0 * * * *", tz, days=1)
        gaps = {b - a for a, b in itertools.pairwise(hourly)}
        assert gaps == {timedelta(hours=1)}, (tz, instant)  # never doubled, never held back
        day = (instant + (before if after < before else after)).date()
        runs = local_dates(tz, hourly)[day]
        assert runs == (25 if after < before else 23), (tz, day, runs)
        quarter = around(instant, "*/15 * * * *", tz, days=1)
        assert {b - a for a, b in itertools.pairwise(quarter)} == {timedelta(minutes=15)}


@settings(max_examples=200, deadline=None)
@given(
    tz=st.sampled_from(ZONES),
    expr=st.sampled_from(
        [
            "0 2 * * *",
            "30 2 * * *",
            "0 1-3 * * *",
            "15 0,1,2 * * *",
            "0 * * * *",
            "*/20 * * * *",
            "45 23 * * *",
        ]
    ),
    offset_s=st.integers(min_value=-30 * 3600, max_value=30 * 3600),
    which=st.integers(min_value=0, max_value=1),
)
def test_next_slot_agrees_with_iteration_near_transitions(
    tz: str, expr: str, offset_s: int, which: int
) -> None:
    """next_slot(after) is the first slot of the full sequence strictly after `after`,
    wherever `after` falls (also inside a gap or a repeated hour)."""
    instant = transitions(tz)[which][0]
    after = instant + timedelta(seconds=offset_s)
    sequence = around(instant, expr, tz)
    assert sequence == sorted(set(sequence))
    expected = next(s for s in sequence if s > after)
    assert cron.next_slot(expr, tz, after) == expected
