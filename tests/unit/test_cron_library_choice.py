"""The evidence behind decision D16 (cronsim, not croniter), re-measured on every run.

On the Europe/Berlin fall-back day (2026-10-25, 03:00 CEST → 02:00 CET) a daily cron at
a fixed wall time must run once (cronie's rule, which `jobledger.domain.schedules.cron` follows
through cronsim). croniter 7 returns the repeated wall time twice. If the croniter half
of this test starts failing, croniter changed: revisit D16 in docs/decisions.md.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from jobledger.domain.schedules import cron

BERLIN = "Europe/Berlin"
FALL_BACK = date(2026, 10, 25)
FIXED_WALL_TIMES = ["0 2 * * *", "30 2 * * *"]


def ours(expr: str) -> list[datetime]:
    """jobledger's slots that fall on the fall-back day, in Berlin time."""
    slots, after = [], datetime(2026, 10, 24, 10, tzinfo=UTC)
    while (slot := cron.next_slot(expr, BERLIN, after)) is not None:
        local = slot.astimezone(ZoneInfo(BERLIN))
        if local.date() > FALL_BACK:
            return slots
        if local.date() == FALL_BACK:
            slots.append(local)
        after = slot
    return slots


def croniters(expr: str) -> list[datetime]:
    """croniter's slots on the same day, iterated from the same instant."""
    it = croniter(expr, datetime(2026, 10, 24, 12, tzinfo=ZoneInfo(BERLIN)))
    slots = []
    while (local := it.get_next(datetime)).date() <= FALL_BACK:
        if local.date() == FALL_BACK:
            slots.append(local)
    return slots


@pytest.mark.parametrize("expr", FIXED_WALL_TIMES)
def test_jobledger_runs_a_repeated_wall_time_once(expr: str) -> None:
    slots = ours(expr)
    assert len(slots) == 1
    assert slots[0].utcoffset() is not None
    assert slots[0].isoformat().endswith("+02:00")  # the first occurrence (still CEST)


@pytest.mark.parametrize("expr", FIXED_WALL_TIMES)
def test_croniter_runs_it_twice(expr: str) -> None:
    slots = croniters(expr)
    assert [s.isoformat()[-6:] for s in slots] == ["+02:00", "+01:00"]


def test_elapsed_time_crons_agree() -> None:
    """`0 * * * *` is elapsed time for both: 25 hourly slots on the 25-hour day."""
    assert len(ours("0 * * * *")) == len(croniters("0 * * * *")) == 25
