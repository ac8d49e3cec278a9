"""The schedule tick: which slots are due and what one tick writes — pure.

`plan_tick` turns a due schedule row into ONE
`TickPlan`: the schedule stream's events (ScheduleSlotsMissed, ScheduleSlotEnqueued or
ScheduleSlotSkipped) and the newest slot's long-lane job (`slot_job`, deduplicated by
`slot_dedupe_key` so two pods ticking the same slot enqueue it once). The
`reactors/scheduler.py` ticker applies the plan in one `store.writes.apply` call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from jobledger.domain import job_commands
from jobledger.domain.events import EventType
from jobledger.domain.jobs import Change, Lane, NewJob, Stamp
from jobledger.domain.policies import partition_of
from jobledger.domain.schedules import cron as cronlib
from jobledger.domain.schedules.changes import next_run_iso, schedule_change
from jobledger.domain.schedules.row import MissedSlotPolicy, Schedule, schedule_target
from jobledger.domain.timeutil import at_ms, iso

#: counting due slots stops here after a long downtime; the newest is still found
MAX_COUNTED_SLOTS = 10_000


def slot_dedupe_key(code: str, slot: datetime) -> str:
    """`<code>:<slot ISO>`: one job per slot, whichever pod ticks it."""
    return f"{code}:{iso(slot)}"


def slot_job(code: str, slot: datetime, *, job_id: str, partitions: int, stamp: Stamp) -> Change:
    """The slot's long-lane job: target `schedule:<code>`, payload {"slot": iso}."""
    dedupe = slot_dedupe_key(code, slot)
    spec = NewJob(
        target=schedule_target(code), payload={"slot": iso(slot)}, code=code, dedupe_key=dedupe
    )
    return job_commands.enqueued(
        job_id=job_id,
        spec=spec,
        code=code,
        lane=Lane.LONG,
        partition=partition_of(None, dedupe, partitions),
        dedupe_key=dedupe,
        stamp=stamp,
    )


@dataclass(frozen=True, slots=True)
class DueSlots:
    count: int  # due slots found (MAX_COUNTED_SLOTS when not exact)
    exact: bool
    first: datetime
    newest: datetime


def due_slots(row: Schedule, now: datetime) -> DueSlots | None:
    """The slots from next_run_at up to now, or None when the schedule is not due."""
    now = at_ms(now)
    first = row.next_run_at
    if not row.enabled or first is None or first > now:
        return None
    cron, tz = row.effective_cron, row.timezone
    later = cronlib.slots_between(cron, tz, first, now, limit=MAX_COUNTED_SLOTS - 1)
    if len(later) < MAX_COUNTED_SLOTS - 1:
        return DueSlots(1 + len(later), True, first, later[-1] if later else first)
    newest = cronlib.latest_slot(cron, tz, now, floor=first) or later[-1]
    return DueSlots(MAX_COUNTED_SLOTS, False, first, newest)


@dataclass(frozen=True, slots=True)
class TickPlan:
    """What one tick does to one due schedule, to apply in ONE `store.writes.apply` call."""

    schedule: Change
    job: Change | None  # the newest slot's job, or None (policy skip + late)
    slot: datetime  # the newest due slot
    missed: DueSlots | None  # set when several slots were due or the slot was late
    reason: str | None  # the missed reason code
    detail: str | None

    @property
    def changes(self) -> list[Change]:
        return [self.schedule] if self.job is None else [self.schedule, self.job]


def plan_tick(
    row: Schedule,
    now: datetime,
    *,
    grace: timedelta,
    stamp: Stamp,
    job_id: str,
    partitions: int,
) -> TickPlan | None:
    """The tick of one schedule row: None when the schedule is not due.

    Several due slots, or one slot later than `grace` → ScheduleSlotsMissed with the
    count and reason. Policy skip with the newest slot late → enqueue nothing and record
    ScheduleSlotSkipped (last_skipped_at is kept). Otherwise only the newest
    slot is enqueued. Either way next_run_at moves past now.
    """
    now = at_ms(now)
    due = due_slots(row, now)
    if due is None:
        return None
    late_by = now - due.newest
    late = late_by > grace
    next_run = next_run_iso(row.effective_cron, row.timezone, now)
    items: list[tuple[str, Mapping[str, Any]]] = []
    reason = detail = None
    if due.count > 1 or late:
        if due.count > 1:
            reason = "missed"
            more = "" if due.exact else " or more"
            detail = (
                f"{due.count}{more} slots due from {iso(due.first)} to {iso(due.newest)}"
                " and no pod ticked them in time (pods down or workers off)"
            )
        else:
            reason = "late"
            detail = (
                f"slot {iso(due.newest)} ticked {late_by.total_seconds():.0f} s after it,"
                f" past the {grace.total_seconds():.0f} s grace (pods down or workers off)"
            )
        skip = late and row.missed_slot_policy == MissedSlotPolicy.SKIP
        items.append(
            (
                EventType.SCHEDULE_SLOTS_MISSED,
                {
                    "count": due.count,
                    "count_exact": due.exact,
                    "first_slot": iso(due.first),
                    "newest_slot": iso(due.newest),
                    "late_s": round(late_by.total_seconds(), 3),
                    "reason": reason,
                    "detail": detail,
                    "policy": row.missed_slot_policy.value,
                    "action": "skip" if skip else "enqueue_newest",
                },
            )
        )
        if skip:
            items.append(
                (
                    EventType.SCHEDULE_SLOT_SKIPPED,
                    {
                        "slot": iso(due.newest),
                        "stage": "tick",
                        "reason": reason,
                        "detail": f"late: {detail}",
                        "next_run_at": next_run,
                    },
                )
            )
            change = schedule_change(row, row.stream, stamp, *items)
            return TickPlan(change, None, due.newest, due, reason, detail)
    job = slot_job(row.code, due.newest, job_id=job_id, partitions=partitions, stamp=stamp)
    items.append(
        (
            EventType.SCHEDULE_SLOT_ENQUEUED,
            {
                "slot": iso(due.newest),
                "job_id": job_id,
                "dedupe_key": slot_dedupe_key(row.code, due.newest),
                "next_run_at": next_run,
            },
        )
    )
    change = schedule_change(row, row.stream, stamp, *items)
    missed = due if reason is not None else None
    return TickPlan(change, job, due.newest, missed, reason, detail)
