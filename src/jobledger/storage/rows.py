"""Plain-dict forms of events, jobs and schedules, shared by every adapter.

Each adapter stores these dicts its own way (SQL columns, BSON documents); keeping the
mapping here means no adapter grows its own idea of a field. Datetimes stay aware
`datetime` objects; JSON-ish values (payload, data, headers, actor) stay Python values.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from jobledger.domain.events import Actor, Event
from jobledger.domain.jobs import Job, JobStatus, Lane
from jobledger.domain.schedule_row import MissedSlotPolicy, Schedule
from jobledger.domain.timeutil import at_ms

JOB_FIELDS = (
    "id", "code", "target", "lane", "key", "partition", "version", "payload", "dedupe_key",
    "status", "attempts", "next_run_at", "created_at", "updated_at", "stream_version",
    "last_hash", "headers", "trace_id", "traceparent", "actor", "last_error", "dead_reason",
    "claimed_by", "claim_token", "lease_until", "inflight_token", "running_code", "closed_at",
)

SCHEDULE_FIELDS = (
    "code", "cron", "timezone", "missed_slot_policy", "runs_per_slot", "enabled",
    "cron_override", "next_run_at", "last_run_at", "last_skipped_at", "created_at",
    "updated_at", "stream_version", "last_hash", "last_finished_at",
)

EVENT_FIELDS = (
    "position", "stream", "version", "type", "data", "at", "actor", "trace_id", "prev_hash",
    "hash",
)


def as_utc(value: Any) -> datetime | None:
    """A stored time back as an aware UTC datetime (drivers may return naive UTC)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return at_ms(value)


def job_to_dict(job: Job) -> dict[str, Any]:
    record = {name: getattr(job, name) for name in JOB_FIELDS}
    record["lane"] = job.lane.value
    record["status"] = job.status.value
    record["actor"] = job.actor.to_json() if job.actor else None
    record["headers"] = dict(job.headers) if job.headers is not None else None
    record["order_key"] = job.order_key
    return record


def job_from_dict(record: dict[str, Any]) -> Job:
    values: dict[str, Any] = {name: record.get(name) for name in JOB_FIELDS}
    values["lane"] = Lane(values["lane"])
    values["status"] = JobStatus(values["status"])
    values["actor"] = Actor.from_json(values["actor"])
    for name in ("next_run_at", "created_at", "updated_at", "lease_until", "closed_at"):
        values[name] = as_utc(values[name])
    values["version"] = values["version"] or 0
    return Job(**values)


def schedule_to_dict(schedule: Schedule) -> dict[str, Any]:
    record = {name: getattr(schedule, name) for name in SCHEDULE_FIELDS}
    record["missed_slot_policy"] = schedule.missed_slot_policy.value
    return record


def schedule_from_dict(record: dict[str, Any]) -> Schedule:
    values: dict[str, Any] = {name: record.get(name) for name in SCHEDULE_FIELDS}
    values["missed_slot_policy"] = MissedSlotPolicy(values["missed_slot_policy"])
    values["enabled"] = bool(values["enabled"])
    for name in (
        "next_run_at", "last_run_at", "last_skipped_at", "created_at", "updated_at",
        "last_finished_at",
    ):
        values[name] = as_utc(values[name])
    return Schedule(**values)


def event_to_dict(event: Event) -> dict[str, Any]:
    record = {name: getattr(event, name) for name in EVENT_FIELDS}
    record["data"] = dict(event.data)
    record["actor"] = event.actor.to_json() if event.actor else None
    return record


def event_from_dict(record: dict[str, Any]) -> Event:
    at = as_utc(record["at"])
    assert at is not None
    return Event(
        stream=record["stream"],
        version=record["version"],
        type=record["type"],
        data=record["data"],
        at=at,
        actor=Actor.from_json(record.get("actor")),
        trace_id=record.get("trace_id"),
        prev_hash=record["prev_hash"],
        hash=record["hash"],
        position=record.get("position"),
    )


def dedupe_key_of(event: Event) -> str | None:
    """The dedupe key a JobEnqueued carries (the log's unique dedupe index)."""
    if event.type != "JobEnqueued":
        return None
    key = event.data.get("dedupe_key")
    return key if isinstance(key, str) else None
