"""A schedule's commands: the boot sync (declare, sync) and the admin's (enable, disable,
cron override) — pure: a row and a stamp in, the `Change` to apply out (None: nothing to
write). `jobledger.admin.schedules` applies them under the stream's compare-and-set.
"""

from __future__ import annotations

from typing import Any

from jobledger.domain.events import EventType
from jobledger.domain.jobs import Change, Stamp
from jobledger.domain.schedules import cron as cronlib
from jobledger.domain.schedules.changes import next_run_iso, schedule_change
from jobledger.domain.schedules.row import MissedSlotPolicy, Schedule, schedule_stream
from jobledger.domain.schedules.spec import CODE_OWNED, ScheduleSpec

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
