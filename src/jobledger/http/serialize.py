"""JSON forms of the read models, with the field names the TypeScript engine's API used.

A job row carries `_id` (the job id) and, in lists, no payload unless asked for. Times are ISO 8601 UTC with milliseconds; unset fields are
null rather than absent, so every row has the same keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from jobledger.domain.events import Event
from jobledger.domain.jobs import Job
from jobledger.domain.schedules.row import Schedule
from jobledger.domain.timeutil import iso


def _time(value: datetime | None) -> str | None:
    return iso(value) if value is not None else None


def job_json(job: Job, *, payload: bool = False, status: str | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "_id": job.id,
        "code": job.code,
        "target": job.target,
        "lane": job.lane.value,
        "key": job.key,
        "partition": job.partition,
        "version": job.version,
        "dedupe_key": job.dedupe_key,
        "status": status or job.status.value,
        "attempts": job.attempts,
        "next_run_at": _time(job.next_run_at),
        "last_error": job.last_error,
        "dead_reason": job.dead_reason,
        "claimed_by": job.claimed_by,
        "lease_until": _time(job.lease_until),
        "claim_token": job.claim_token,
        "outcome_token": job.inflight_token,
        "running_code": job.running_code,
        "closed_at": _time(job.closed_at),
        "trace_id": job.trace_id,
        "actor": job.actor.to_json() if job.actor else None,
        "headers": dict(job.headers) if job.headers is not None else None,
        "created_at": _time(job.created_at),
        "updated_at": _time(job.updated_at),
    }
    if payload:
        row["payload"] = job.payload
    return row


def schedule_json(schedule: Schedule) -> dict[str, Any]:
    return {
        "code": schedule.code,
        "cron": schedule.cron,
        "cron_override": schedule.cron_override,
        "effective_cron": schedule.effective_cron,
        "timezone": schedule.timezone,
        "enabled": schedule.enabled,
        "missed_slot_policy": schedule.missed_slot_policy.value,
        "retry_count": schedule.runs_per_slot,
        "next_run_at": _time(schedule.next_run_at),
        "last_run_at": _time(schedule.last_run_at),
        "last_skipped_at": _time(schedule.last_skipped_at),
        "created_at": _time(schedule.created_at),
        "updated_at": _time(schedule.updated_at),
    }


def event_json(event: Event) -> dict[str, Any]:
    return event.to_json()


def attempt_json(entry: Mapping[str, Any]) -> dict[str, Any]:
    """One run of `domain.failures.attempt_history`, its time as ISO text."""
    return {**entry, "at": _time(entry["at"])}
