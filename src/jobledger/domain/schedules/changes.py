"""A schedule's stream: how its events fold into the row, and how a change is made — pure.

Every change of a schedule is a `Change` on stream `schedule:<code>`; the store applies
it only if the stream is still at the version the change was computed from, so two
writers that read the same `next_run_at` cannot both advance it. `apply_schedule` folds
one event into the row; `schedule_change` appends events to the stream and folds them.
The boot sync and admin commands (`commands`), the tick (`tick`) and the slot run
(`slot_run`) all build their changes with it, and `jobledger replay` folds with
`apply_schedule`.

Schedule row states::

    (new) --ScheduleDeclared--> enabled, next_run_at = next slot   (first boot)
    any --ScheduleSynced--> code-owned fields rewritten            (boot, when they changed)
    enabled, next_run_at <= now: due
    due --ScheduleSlotEnqueued--> next_run_at = next slot after now
    due --ScheduleSlotsMissed + ScheduleSlotEnqueued--> newest slot enqueued, rest dropped
    due --ScheduleSlotsMissed + ScheduleSlotSkipped--> policy skip and late: nothing enqueued
    disabled --ScheduleEnabled--> enabled, next_run_at = next slot after now
    enabled --ScheduleDisabled--> disabled (the tick ignores it)
    any --ScheduleCronOverrideSet/Cleared--> next_run_at follows the effective cron
    any --ScheduleSlotRan / ScheduleSlotSkipped--> last_run_at / last_skipped_at (max)

Ownership: code owns cron, timezone, missed_slot_policy and runs_per_slot (rewritten by
boot sync); admins own enabled and cron_override; the engine owns the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from jobledger.domain.events import GENESIS_HASH, Event, EventType, new_event
from jobledger.domain.jobs import Change, Stamp
from jobledger.domain.schedules import cron as cronlib
from jobledger.domain.schedules.row import MissedSlotPolicy, Schedule
from jobledger.domain.timeutil import iso, parse_iso

# --- folding events into the row -------------------------------------------------------


def _time(value: Any) -> datetime | None:
    return parse_iso(value) if isinstance(value, str) else None


def _later(current: datetime | None, candidate: datetime | None) -> datetime | None:
    if candidate is None:
        return current
    if current is None or candidate > current:
        return candidate
    return current


def apply_schedule(row: Schedule | None, event: Event) -> Schedule:
    """The row after `event` (a schedule is never removed)."""
    data = event.data
    if event.type == EventType.SCHEDULE_DECLARED:
        if row is not None:
            raise ValueError(f"{event.stream}: declared twice")
        return Schedule(
            code=data["code"],
            cron=data["cron"],
            timezone=data["timezone"],
            missed_slot_policy=MissedSlotPolicy(data["missed_slot_policy"]),
            runs_per_slot=data["runs_per_slot"],
            enabled=data.get("enabled", True),
            cron_override=data.get("cron_override"),
            next_run_at=_time(data.get("next_run_at")),
            last_run_at=None,
            last_skipped_at=None,
            created_at=event.at,
            updated_at=event.at,
            stream_version=event.version,
            last_hash=event.hash,
        )
    if row is None:
        raise ValueError(f"{event.stream} v{event.version}: {event.type} before ScheduleDeclared")
    row = replace(row, stream_version=event.version, last_hash=event.hash, updated_at=event.at)
    kind = event.type
    if kind == EventType.SCHEDULE_SYNCED:
        row = replace(
            row,
            cron=data["cron"],
            timezone=data["timezone"],
            missed_slot_policy=MissedSlotPolicy(data["missed_slot_policy"]),
            runs_per_slot=data["runs_per_slot"],
        )
        return _moved(row, data)
    if kind == EventType.SCHEDULE_ENABLED:
        return _moved(replace(row, enabled=True), data)
    if kind == EventType.SCHEDULE_DISABLED:
        return replace(row, enabled=False)
    if kind == EventType.SCHEDULE_OVERRIDE_SET:
        return _moved(replace(row, cron_override=data["cron_override"]), data)
    if kind == EventType.SCHEDULE_OVERRIDE_CLEARED:
        return _moved(replace(row, cron_override=None), data)
    if kind == EventType.SCHEDULE_SLOT_ENQUEUED:
        return _moved(row, data)
    if kind == EventType.SCHEDULE_SLOTS_MISSED:
        return row
    if kind == EventType.SCHEDULE_SLOT_SKIPPED:
        row = replace(row, last_skipped_at=_later(row.last_skipped_at, _time(data["slot"])))
        if data.get("stage") == "run":
            row = replace(row, last_finished_at=event.at)
        return _moved(row, data)
    if kind == EventType.SCHEDULE_SLOT_RAN:
        return replace(
            row,
            last_run_at=_later(row.last_run_at, _time(data["slot"])),
            last_finished_at=event.at,
        )
    raise ValueError(f"{event.stream}: unknown schedule event {kind}")


def _moved(row: Schedule, data: Mapping[str, Any]) -> Schedule:
    """next_run_at as the event names it, when it names one (null: never fires again)."""
    if "next_run_at" not in data:
        return row
    return replace(row, next_run_at=_time(data["next_run_at"]))


def schedule_change(
    row: Schedule | None, stream: str, stamp: Stamp, *items: tuple[str, Mapping[str, Any]]
) -> Change:
    """The events `items` (type, data) appended to the schedule stream after `row`, folded:
    every schedule command (`commands`, `tick`, `slot_run`) ends here."""
    version = row.stream_version if row else 0
    prev = row.last_hash if row else GENESIS_HASH
    expected = version
    current = row
    events: list[Event] = []
    for kind, data in items:
        version += 1
        event = new_event(
            stream,
            version,
            kind,
            data,
            at=stamp.at,
            actor=stamp.actor,
            trace_id=stamp.trace_id,
            prev_hash=prev,
        )
        prev = event.hash
        events.append(event)
        current = apply_schedule(current, event)
    return Change(stream, expected, tuple(events), current)


def next_run_iso(cron: str, tz: str, after: datetime) -> str | None:
    """The cron's next slot after `after` as an event's next_run_at (None: never again)."""
    slot = cronlib.next_slot(cron, tz, after)
    return iso(slot) if slot is not None else None
