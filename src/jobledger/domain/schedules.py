"""Schedules: events, the row they fold into, boot sync and admin commands — pure.

Every change of a schedule is a `Change` on stream `schedule:<code>`; the store applies
it only if the stream is still at the version the change was computed from, which is
the reference's "next_run_at advance guarded on its old value" (§9). `apply_schedule`
folds one event into the row; the commands below and `jobledger replay` both use it.
The tick lives in `schedule_tick.py`, the slot run's verdict in `schedule_slot_run.py`,
the declaration's validation in `schedule_spec.py`; all three append to the stream with
`schedule_change`.

Schedule row states (reference §6)::

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

from jobledger.domain import cron as cronlib
from jobledger.domain.events import GENESIS_HASH, Event, EventType, new_event
from jobledger.domain.jobs import Change, Stamp
from jobledger.domain.schedule_row import (
    MissedSlotPolicy,
    Schedule,
    schedule_stream,
)
from jobledger.domain.schedule_spec import CODE_OWNED, ScheduleSpec
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


def fold_schedule(events: list[Event]) -> Schedule | None:
    row: Schedule | None = None
    for event in events:
        row = apply_schedule(row, event)
    return row


def schedule_change(
    row: Schedule | None, stream: str, stamp: Stamp, *items: tuple[str, Mapping[str, Any]]
) -> Change:
    """The events `items` (type, data) appended to the schedule stream after `row`, folded:
    every schedule command (here, in `schedule_tick` and in `schedule_slot_run`) ends here."""
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


# --- boot: declare and sync ------------------------------------------------------------


def declared(spec: ScheduleSpec, stamp: Stamp) -> Change:
    """First boot that declares the code: the row, enabled, with its next slot."""
    data = {
        "code": spec.code,
        "cron": spec.cron,
        "timezone": spec.timezone,
        "missed_slot_policy": spec.missed_slot_policy.value,
        "runs_per_slot": spec.runs_per_slot,
        "enabled": True,
        "next_run_at": next_run_iso(spec.cron, spec.timezone, stamp.at),
    }
    return schedule_change(
        None, schedule_stream(spec.code), stamp, (EventType.SCHEDULE_DECLARED, data)
    )


def synced(row: Schedule, spec: ScheduleSpec, stamp: Stamp) -> Change | None:
    """Boot sync: rewrite the code-owned fields when they differ from the declaration.

    When the effective cron (no override in place) or the time zone changes, next_run_at
    moves to the new cron's next slot after now; slots of the old cron still due are
    dropped rather than run at times the new cron never names.
    """
    changed = [name for name in CODE_OWNED if getattr(row, name) != getattr(spec, name)]
    if not changed:
        return None
    data: dict[str, Any] = {
        "cron": spec.cron,
        "timezone": spec.timezone,
        "missed_slot_policy": spec.missed_slot_policy.value,
        "runs_per_slot": spec.runs_per_slot,
        "changed": changed,
        "previous": {
            name: (
                getattr(row, name).value
                if isinstance(getattr(row, name), MissedSlotPolicy)
                else getattr(row, name)
            )
            for name in changed
        },
    }
    new_effective = row.cron_override or spec.cron
    if new_effective != row.effective_cron or spec.timezone != row.timezone:
        data["next_run_at"] = next_run_iso(new_effective, spec.timezone, stamp.at)
    return schedule_change(row, row.stream, stamp, (EventType.SCHEDULE_SYNCED, data))


# --- admin commands --------------------------------------------------------------------


def enabled(row: Schedule, stamp: Stamp) -> Change | None:
    """disabled → enabled; next_run_at = the next slot after now, so slots missed while
    disabled are dropped. Already enabled: nothing to write (None)."""
    if row.enabled:
        return None
    data = {"next_run_at": next_run_iso(row.effective_cron, row.timezone, stamp.at)}
    return schedule_change(row, row.stream, stamp, (EventType.SCHEDULE_ENABLED, data))


def disabled(row: Schedule, stamp: Stamp) -> Change | None:
    if not row.enabled:
        return None
    return schedule_change(row, row.stream, stamp, (EventType.SCHEDULE_DISABLED, {}))


def override_set(row: Schedule, cron: str, stamp: Stamp) -> Change:
    """cron_override = `cron` (InvalidCron when bad); next_run_at follows it."""
    text = cronlib.validate(cron, row.timezone, stamp.at)
    data = {
        "cron_override": text,
        "previous": row.cron_override,
        "next_run_at": next_run_iso(text, row.timezone, stamp.at),
    }
    return schedule_change(row, row.stream, stamp, (EventType.SCHEDULE_OVERRIDE_SET, data))


def override_cleared(row: Schedule, stamp: Stamp) -> Change | None:
    """Override unset, next_run_at back on the code cron. No override: None."""
    if row.cron_override is None:
        return None
    data = {
        "previous": row.cron_override,
        "next_run_at": next_run_iso(row.cron, row.timezone, stamp.at),
    }
    return schedule_change(row, row.stream, stamp, (EventType.SCHEDULE_OVERRIDE_CLEARED, data))
