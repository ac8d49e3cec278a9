"""Job commands: enqueue, the fast lane's in-flight mark, the long lane's claim and
lease, and the admin and system commands (retry, skip, cancel, expire, migration).

Each is a pure function `(job, command arguments) -> Change` over `domain.jobs`: the
events to append and the row they fold into; a command the row's state does not allow
raises `InvalidStatus`. The outcome of a run is decided in `job_outcomes`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from jobledger.domain.errors import InvalidStatus
from jobledger.domain.events import GENESIS_HASH, EventType, new_event
from jobledger.domain.failures import Failure
from jobledger.domain.jobs import (
    Change,
    Job,
    JobStatus,
    Lane,
    NewJob,
    Stamp,
    append_events,
    apply,
    error_text,
    job_stream,
)
from jobledger.domain.timeutil import iso


def enqueued(
    *,
    job_id: str,
    spec: NewJob,
    code: str,
    lane: Lane,
    partition: int,
    dedupe_key: str,
    stamp: Stamp,
    traceparent: str | None = None,
) -> Change:
    """The first event of a job's stream and its PENDING row."""
    data: dict[str, Any] = {
        "id": job_id,
        "code": code,
        "target": spec.target,
        "lane": lane.value,
        "key": spec.key,
        "partition": partition,
        "version": spec.version,
        "payload": spec.payload,
        "dedupe_key": dedupe_key,
        "headers": dict(spec.headers) if spec.headers else None,
        "run_at": iso(spec.run_at) if spec.run_at else None,
        "traceparent": traceparent,
    }
    event = new_event(
        job_stream(job_id),
        1,
        EventType.JOB_ENQUEUED,
        data,
        at=stamp.at,
        actor=stamp.actor,
        trace_id=stamp.trace_id,
        prev_hash=GENESIS_HASH,
    )
    return Change(
        event.stream, 0, (event,), apply(None, event), dedupe_key=dedupe_key, partition=partition
    )


def dispatch(job: Job, *, token: str, pod: str, stamp: Stamp) -> Change:
    """Fast lane: the durable in-flight mark written before an at-most-once send."""
    _require(job, JobStatus.PENDING, "dispatch")
    return append_events(job, stamp, (EventType.JOB_DISPATCHED, {"token": token, "pod": pod}))


def unmark(job: Job, stamp: Stamp, cause: str) -> Change:
    """Fast lane: release an in-flight mark whose row was *not* sent (its target paused
    mid-round, the lease ending before the send, the round given up). A deferral that
    clears the mark: no attempt spent, the row PENDING as it was, so it neither holds its
    key nor is declared DEAD "in flight" by the next owner."""
    if job.inflight_token is None:
        raise InvalidStatus(f"cannot unmark job {job.id}: it carries no in-flight mark")
    data = {"reason": "not_sent", "cause": cause, "token": job.inflight_token}
    return append_events(job, stamp, (EventType.JOB_DEFERRED, data))


def claim(
    job: Job,
    *,
    token: str,
    pod: str,
    lease: timedelta,
    exclusive: bool,
    stamp: Stamp,
    failure: Failure | None = None,
) -> Change:
    """Long lane: reserve the row under `token` until now + `lease`; `failure`, the
    record of the run whose expired lease this claim takes back."""
    data: dict[str, Any] = {
        "token": token,
        "pod": pod,
        "lease_until": iso(stamp.at + lease),
        "running_code": job.code if exclusive else None,
        "reclaimed_from": job.claim_token if job.status == JobStatus.RUNNING else None,
    }
    if failure is not None:
        data["failure"] = failure.to_json()
    return append_events(job, stamp, (EventType.JOB_CLAIMED, data))


def renew_lease(job: Job, *, lease: timedelta, stamp: Stamp) -> Change:
    _require(job, JobStatus.RUNNING, "renew")
    return append_events(
        job,
        stamp,
        (
            EventType.JOB_LEASE_RENEWED,
            {"token": job.claim_token, "lease_until": iso(stamp.at + lease)},
        ),
    )


def _require(job: Job, status: JobStatus, what: str) -> None:
    if job.status != status:
        raise InvalidStatus(f"cannot {what} job {job.id}: it is {job.status.value}")


def dead_change(
    job: Job,
    stamp: Stamp,
    reason: str,
    error: str | None,
    attempts: int,
    failure: dict[str, Any] | None = None,
) -> Change:
    """JobDead: the row is DEAD until retried, skipped or expired; `failure`, the record
    of the run that ended it (`domain.failures.Failure.to_json`)."""
    data: dict[str, Any] = {"reason": reason, "error": error, "attempts": attempts}
    if failure is not None:
        data["failure"] = failure
    return append_events(job, stamp, (EventType.JOB_DEAD, data))


# --- admin and system commands -----------------------------------------------------------


def retry(job: Job, stamp: Stamp) -> Change:
    _require(job, JobStatus.DEAD, "retry")
    return append_events(job, stamp, (EventType.JOB_RETRIED, {}))


def skip(job: Job, stamp: Stamp, reason: str = "admin") -> Change:
    _require(job, JobStatus.DEAD, "skip")
    return append_events(job, stamp, (EventType.JOB_SKIPPED, {"reason": reason}))


def skip_slot(job: Job, stamp: Stamp, reason: str) -> Change:
    """A schedule slot skipped at run time (started too late)."""
    return append_events(job, stamp, (EventType.JOB_SKIPPED, {"reason": reason}))


def cancel(job: Job, stamp: Stamp) -> Change:
    """Admin cancel of a PENDING row that is not in flight (closes G2)."""
    if job.status != JobStatus.PENDING or job.inflight_token is not None:
        state = "in flight" if job.inflight_token else job.status.value
        raise InvalidStatus(f"cannot cancel job {job.id}: it is {state}")
    return append_events(job, stamp, (EventType.JOB_CANCELLED, {}))


def expire(job: Job, stamp: Stamp, retention: timedelta) -> Change:
    _require(job, JobStatus.DEAD, "expire")
    return append_events(
        job, stamp, (EventType.JOB_EXPIRED, {"retention_days": retention.total_seconds() / 86400})
    )


def carried_over(
    job: Job,
    stamp: Stamp,
    *,
    status: JobStatus,
    attempts: int,
    error: str | None,
    next_run_at: datetime,
    reason: str,
) -> Change:
    """State a job had in another engine, as events after its JobEnqueued (migration).

    DEAD → JobDead with `reason`; PENDING with spent attempts → JobFailed keeping them;
    a fresh PENDING row needs nothing more (the change then carries no event).
    """
    if status == JobStatus.DEAD:
        return dead_change(job, stamp, reason, error_text(error), attempts)
    if attempts > 0:
        failed: dict[str, Any] = {
            "attempts": attempts,
            "error": error_text(error),
            "next_run_at": iso(next_run_at),
        }
        return append_events(job, stamp, (EventType.JOB_FAILED, failed))
    return append_events(job, stamp)
