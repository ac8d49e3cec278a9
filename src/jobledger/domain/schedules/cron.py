"""Cron expressions: parse, validate, next slot — pure, in any IANA time zone.

The reference had its own 5-field parser fixed at +07:00. jobledger reads the five
standard fields with `cronsim` (already a runtime dependency)::

    minute  hour  day-of-month  month  day-of-week
    0-59    0-23  1-31          1-12   0-7 (0 and 7 are Sunday)

with `*`, lists (`1,15`), ranges (`1-5`), steps (`*/15`, `10-50/20`), month and day
names (`JAN`, `mon-fri`, any case), and cronsim's extras: `L` (last day of the month),
`LW` (last weekday), `5L` (last Friday), `MON#2` (second Monday). The nicknames
`@hourly`, `@daily`/`@midnight`, `@weekly`, `@monthly`, `@yearly`/`@annually` stand for
their 5-field forms. Day-of-month and day-of-week combine like Debian cron: AND when
either starts with `*`, else OR.

Daylight saving time follows cronie (Debian/Red Hat cron), which cronsim models:

* a cron with a fixed minute *and* hour (`30 2 * * *`, `0 1-3 * * *`) is wall-clock
  time: on the spring-forward day a slot inside the gap runs once at the first valid
  instant after it (02:30 → 03:00); on the fall-back day a repeated wall time runs once,
  at its first occurrence;
* a cron whose minute or hour field starts with `*` (`0 * * * *`, `*/15 * * * *`) is
  elapsed time: it fires at each matching instant that exists, so `0 * * * *` fires at
  both 02:00s of a fall-back night (25 runs that day) and skips the missing 02:00 of a
  spring-forward night (23 runs).

croniter 7.0 was measured and rejected: it fires `0 2 * * *` twice on the
Europe/Berlin fall-back day.

Slots are aware UTC datetimes with millisecond precision (`timeutil.at_ms`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from jobledger.domain.errors import InvalidArgument, InvalidCron
from jobledger.domain.timeutil import at_ms

#: a cron that does not fire within this span of its check time is rejected
HORIZON = timedelta(days=5 * 366)

NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

#: a fixed, DST-free instant from which `interval` measures, so that the default policy
#: a cron gets never depends on the boot time (boot sync would flap otherwise)
_INTERVAL_ORIGIN = datetime(2001, 1, 1, tzinfo=UTC)  # a Monday
_INTERVAL_SAMPLES = 32


def normalise(expr: str) -> str:
    """`expr` with its nickname expanded and whitespace collapsed."""
    if not isinstance(expr, str):
        raise InvalidCron(f"cron must be a string, not {type(expr).__name__}")
    text = " ".join(expr.split())
    return NICKNAMES.get(text.lower(), text)


def zone(name: str) -> ZoneInfo:
    """The IANA time zone `name`, e.g. `Europe/Berlin`, `Asia/Bangkok`, `UTC`."""
    try:
        return _zone(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise InvalidArgument(f"unknown time zone {name!r}") from exc


@lru_cache(maxsize=256)
def _zone(name: str) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise ValueError("empty time zone")
    return ZoneInfo(name)


def _check_fields(expr: str) -> str:
    text = normalise(expr)
    fields = text.split(" ") if text else []
    if len(fields) != 5:
        raise InvalidCron(
            f"invalid cron {expr!r}: expected 5 fields (minute hour day month weekday),"
            f" got {len(fields)}"
        )
    return text


def _iterator(text: str, tz: ZoneInfo, after: datetime) -> CronSim:
    try:
        return CronSim(text, after.astimezone(tz))
    except CronSimError as exc:
        raise InvalidCron(f"invalid cron {text!r}: {exc}") from exc
    except (ValueError, IndexError, KeyError) as exc:  # defensive: malformed terms
        raise InvalidCron(f"invalid cron {text!r}: {exc}") from exc


def _next(it: CronSim, text: str) -> datetime | None:
    try:
        return next(it)
    except StopIteration:
        return None
    except (CronSimError, ValueError, IndexError, KeyError) as exc:
        raise InvalidCron(f"invalid cron {text!r}: {exc}") from exc


def validate(expr: str, tz: str, now: datetime) -> str:
    """The normalised cron, or `InvalidCron` when it has not 5 fields, a value is out
    of range or malformed, or it never fires within 5 years of `now`."""
    text = _check_fields(expr)
    first = next_slot(text, tz, now)
    if first is None or first - at_ms(now) > HORIZON:
        raise InvalidCron(f"invalid cron {expr!r}: it never fires within 5 years")
    return text


def next_slot(expr: str, tz: str, after: datetime) -> datetime | None:
    """The first slot strictly after `after`, as aware UTC; None if none in 50 years.

    Strictly increasing in `after`: cronsim walks wall-clock crons in naive local time,
    which on a fall-back night can name the first 02:15 to a caller already past it
    (after the second 01:00 … 02:59); such a result is stepped over, so the repeated
    wall time fires once.
    """
    text = _check_fields(expr)
    after = at_ms(after)
    it = _iterator(text, zone(tz), after)
    while True:
        found = _next(it, text)
        if found is None:
            return None
        slot = at_ms(found)
        if slot > after:
            return slot


def slots_between(
    expr: str, tz: str, after: datetime, until: datetime, *, limit: int
) -> list[datetime]:
    """Slots s with after < s <= until, oldest first, at most `limit` of them."""
    text = _check_fields(expr)
    until = at_ms(until)
    after = at_ms(after)
    it = _iterator(text, zone(tz), after)
    out: list[datetime] = []
    while len(out) < limit:
        found = _next(it, text)
        if found is None:
            break
        slot = at_ms(found)
        if slot <= after:
            continue
        if slot > until:
            break
        out.append(slot)
    return out


def latest_slot(expr: str, tz: str, not_after: datetime, *, floor: datetime) -> datetime | None:
    """The newest slot s with floor <= s <= not_after, found by widening windows back
    from `not_after` (so a minutely cron after a month of downtime costs a few hundred
    steps, not tens of thousands)."""
    not_after = at_ms(not_after)
    floor = at_ms(floor)
    for window in (
        timedelta(hours=1),
        timedelta(days=1),
        timedelta(days=32),
        timedelta(days=367),
        HORIZON,
    ):
        start = max(floor, not_after - window)
        found = slots_between(expr, tz, start - timedelta(milliseconds=1), not_after, limit=10_000)
        if found:
            return found[-1]
        if start == floor:
            return None
    return None


def interval(expr: str, tz: str = "UTC") -> timedelta:
    """The shortest gap between consecutive slots, measured from a fixed instant.

    This is what the default missed-slot policy compares with 5 minutes: `*/5 * * * *`
    → 5 min (skip), `0 9 * * 1-5` → 1 day (run_once). Measured over the first
    32 slots after 2001-01-01 UTC so the answer never depends on the boot time.
    """
    text = _check_fields(expr)
    it = _iterator(text, zone(tz), _INTERVAL_ORIGIN)
    previous: datetime | None = None
    shortest: timedelta | None = None
    for _ in range(_INTERVAL_SAMPLES):
        found = _next(it, text)
        if found is None:
            break
        slot = found.astimezone(UTC)
        if previous is not None:
            gap = slot - previous
            if gap > timedelta(0) and (shortest is None or gap < shortest):
                shortest = gap
        previous = slot
    if shortest is None:
        raise InvalidCron(f"invalid cron {expr!r}: it fires at most once")
    return shortest
