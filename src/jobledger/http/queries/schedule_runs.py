"""A schedule's run history, read from its stream in the log
(`GET /api/v1/schedules/{code}/history`, `/admin/schedules/{code}`).

The schedule stream records every slot: `ScheduleSlotsMissed` (several slots due at
once, or one slot late: the older ones are dropped), `ScheduleSlotEnqueued` (the slot's
job), `ScheduleSlotSkipped` (not run: at the tick under policy skip, or at run time when
late, with the reason), `ScheduleSlotRan` (the handler returned); and the admin and
code changes (declared, synced, enabled, disabled, cron override set or cleared).

**Bounded.** A page is at most `limit` events of the stream, read by (stream, version)
from the newest backwards (`LogReads.read_events_at`, the unique index every store has),
never the whole stream: a schedule that fires every minute writes ~3,000 events a day.
A slot enqueued in the page whose outcome is not in it is looked up in its job's own
stream (`JobAdmin.detail`: still PENDING or RUNNING, DEAD after its runs, or how it
ended), so a slot whose job failed shows the job's error; at most one look-up per slot
of the page.
"""

from __future__ import annotations

from typing import Any

from jobledger.admin.jobs import JobAdmin
from jobledger.domain.errors import NotFound
from jobledger.domain.events import Event, EventType
from jobledger.domain.schedules.row import Schedule, schedule_stream
from jobledger.domain.timeutil import iso
from jobledger.storage.port import Store

SLOT_EVENTS = {
    EventType.SCHEDULE_SLOT_ENQUEUED,
    EventType.SCHEDULE_SLOT_SKIPPED,
    EventType.SCHEDULE_SLOT_RAN,
}


def _change_text(event: Event) -> str:
    data = event.data
    kind = event.type
    if kind in (EventType.SCHEDULE_DECLARED, EventType.SCHEDULE_SYNCED):
        verb = "declared" if kind == EventType.SCHEDULE_DECLARED else "code changed"
        return (
            f"{verb}: cron {data.get('cron')} ({data.get('timezone')}),"
            f" missed slots {data.get('missed_slot_policy')}, {data.get('runs_per_slot')} runs/slot"
        )
    if kind == EventType.SCHEDULE_ENABLED:
        return f"enabled: next run {data.get('next_run_at')} (slots missed while disabled dropped)"
    if kind == EventType.SCHEDULE_DISABLED:
        return "disabled: no slot runs until it is enabled"
    if kind == EventType.SCHEDULE_OVERRIDE_SET:
        return f"cron override {data.get('previous') or 'none'} → {data.get('cron_override')}"
    if kind == EventType.SCHEDULE_OVERRIDE_CLEARED:
        return f"cron override {data.get('previous')} cleared: back on the code's cron"
    return kind


def entries(events: list[Event]) -> list[dict[str, Any]]:
    """The page's events (any order) as history entries, newest first: one per slot
    (its outcome so far), one per missed-slots record, one per change."""
    slots: dict[str, dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for event in sorted(events, key=lambda e: e.version):
        data, at = event.data, iso(event.at)
        actor = event.actor.to_json() if event.actor else None
        if event.type in SLOT_EVENTS:
            slot = str(data.get("slot"))
            entry = slots.get(slot)
            if entry is None:
                entry = slots[slot] = {"kind": "slot", "slot": slot, "outcome": "enqueued"}
                entry.update(reason=None, detail=None, stage=None, job_id=None, attempts=None)
                entry.update(versions=[])
                out.append(entry)
            entry["at"] = at
            entry["versions"].append(event.version)
            entry["job_id"] = data.get("job_id") or entry["job_id"]
            if event.type == EventType.SCHEDULE_SLOT_RAN:
                entry.update(outcome="ran", attempts=data.get("attempts"))
            elif event.type == EventType.SCHEDULE_SLOT_SKIPPED:
                entry.update(outcome="skipped", stage=data.get("stage"))
                entry.update(reason=data.get("reason"), detail=data.get("detail"))
        elif event.type == EventType.SCHEDULE_SLOTS_MISSED:
            count = int(data.get("count", 1))
            out.append(
                {
                    "kind": "missed",
                    "at": at,
                    "versions": [event.version],
                    "dropped": max(count - 1, 0),
                    "count_exact": bool(data.get("count_exact", True)),
                    "first_slot": data.get("first_slot"),
                    "newest_slot": data.get("newest_slot"),
                    "reason": data.get("reason"),
                    "detail": data.get("detail"),
                    "action": data.get("action"),
                }
            )
        else:
            out.append(
                {
                    "kind": "change",
                    "at": at,
                    "versions": [event.version],
                    "event": event.type,
                    "actor": actor,
                    "detail": _change_text(event),
                }
            )
    return sorted(out, key=lambda e: e["versions"][-1], reverse=True)


async def _settle(jobs: JobAdmin, entry: dict[str, Any]) -> None:
    """An enqueued slot without its outcome in the page: what its job says."""
    try:
        detail = await jobs.detail(entry["job_id"])
    except NotFound:
        entry.update(outcome="unknown", detail="its job is no longer in the log")
        return
    entry["outcome"] = {"SUCCEEDED": "ran"}.get(detail.status, detail.status.lower())
    entry["attempts"] = detail.job.attempts
    if detail.status == "DEAD":
        entry["reason"] = detail.job.dead_reason
        entry["detail"] = detail.job.last_error
    elif detail.status == "SUCCEEDED":
        entry["detail"] = "its job succeeded (the slot's record is in a newer page)"


def state_note(row: Schedule, now_iso: str) -> tuple[str | None, str]:
    """The next run to show (None when nothing will run) and why."""
    if not row.enabled:
        return None, "disabled: no slot runs until it is enabled (then the next slot after that)"
    if row.next_run_at is None:
        return None, "its cron has no future slot"
    next_run = iso(row.next_run_at)
    if next_run < now_iso:
        return next_run, "overdue: due, waiting for a worker's tick (is a worker running?)"
    return next_run, "enabled"


async def history(
    store: Store, jobs: JobAdmin, code: str, now_iso: str, *, before: int | None, limit: int
) -> dict[str, Any]:
    """One page of `code`'s history: the `limit` events before version `before`."""
    row = await store.admin.get_schedule(code)
    if row is None:
        raise NotFound(f"schedule {code} not found")
    top = row.stream_version if before is None else min(before - 1, row.stream_version)
    first = max(top - limit + 1, 1)
    stream = schedule_stream(code)
    events = (
        await store.log.read_events_at([(stream, v) for v in range(first, top + 1)]) if top else []
    )
    page = entries(events)
    for entry in page:
        if entry["kind"] == "slot" and entry["outcome"] == "enqueued" and entry["job_id"]:
            await _settle(jobs, entry)
    slots = [e for e in page if e["kind"] == "slot"]
    next_run, note = state_note(row, now_iso)
    counts = {o: sum(e["outcome"] == o for e in slots) for o in ("ran", "skipped", "dead")}
    counts["missed"] = sum(e["dropped"] for e in page if e["kind"] == "missed")
    counts["other"] = len(slots) - counts["ran"] - counts["skipped"] - counts["dead"]
    return {
        "code": code,
        "next_run_at": next_run,
        "state": note,
        "entries": page,
        "counts": counts,
        "first_version": first if top else None,
        "last_version": top or None,
        "stream_version": row.stream_version,
        "next": first if top and first > 1 else None,
        "limit": limit,
    }
