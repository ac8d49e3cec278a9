"""The job: its row in the queue projection, how events change it, and every command.

Commands are pure functions `(job, command arguments) -> Change`: a state and a command
go in, events and the new row come out. `apply(job, event)` is the only way a row
changes; the same function folds the log in `jobledger replay`, so the live queue and a
rebuilt one cannot disagree. State machine (reference §6, closing G2 and G6)::

    (new) --JobEnqueued--> PENDING
    PENDING --JobDispatched--> PENDING + in-flight mark        (fast lane, at-most-once)
    PENDING --JobClaimed--> RUNNING                            (long lane)
    RUNNING --JobClaimed--> RUNNING under a new token          (lease expired, at-least-once)
    PENDING|RUNNING --JobSucceeded--> (leaves the queue)
    PENDING|RUNNING --JobFailed--> PENDING, attempts+1, backoff
    PENDING|RUNNING --JobDeferred--> PENDING, no attempt spent (target unreachable,
                                     or a marked row that was not sent)
    PENDING --JobRequeued--> PENDING, mark dropped (takeover, at-least-once)
    (left) --JobRedelivered--> (left)           (a run whose outcome lost to another's)
    PENDING|RUNNING --JobDead--> DEAD
    DEAD --JobRetried--> PENDING, attempts 0                   (admin)
    DEAD --JobSkipped--> (leaves)                              (admin)
    PENDING|RUNNING --JobSkipped--> (leaves)                   (late schedule slot)
    PENDING --JobCancelled--> (leaves)                         (admin)
    DEAD --JobExpired--> (leaves)                              (retention)
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import Any

from jobledger.domain.errors import InvalidStatus
from jobledger.domain.events import GENESIS_HASH, Actor, Event, EventType, new_event
from jobledger.domain.policies import retry_delay
from jobledger.domain.records import compile_generated, fast_init
from jobledger.domain.timeutil import iso, parse_iso

MAX_ERROR_CHARS = 2000


class JobStatus(enum.StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    DEAD = "DEAD"


class Lane(enum.StrEnum):
    FAST = "fast"
    LONG = "long"


class DeliveryMode(enum.StrEnum):
    AT_MOST_ONCE = "at_most_once"
    AT_LEAST_ONCE = "at_least_once"


def job_stream(job_id: str) -> str:
    return f"job:{job_id}"


@fast_init
@dataclass(frozen=True, slots=True)
class Job:
    """One open job: a row of the queue projection (PENDING, RUNNING or DEAD)."""

    id: str
    code: str
    target: str
    lane: Lane
    key: str | None
    partition: int
    version: int
    payload: Any
    dedupe_key: str
    status: JobStatus
    attempts: int
    next_run_at: datetime
    created_at: datetime
    updated_at: datetime
    stream_version: int
    last_hash: str
    headers: Mapping[str, str] | None = None
    trace_id: str | None = None
    traceparent: str | None = None
    actor: Actor | None = None
    last_error: str | None = None
    dead_reason: str | None = None
    claimed_by: str | None = None
    claim_token: str | None = None
    lease_until: datetime | None = None
    inflight_token: str | None = None
    running_code: str | None = None
    closed_at: datetime | None = None

    @property
    def stream(self) -> str:
        return job_stream(self.id)

    @property
    def exclusive_code(self) -> str | None:
        """The code this row holds while it runs (at most one RUNNING row per exclusive
        code across pods; every store enforces it with a unique index or a check)."""
        return self.running_code if self.status == JobStatus.RUNNING else None

    @property
    def order_key(self) -> str:
        """The ordering key: `key`, or the row's own id when it has no key."""
        return self.key if self.key is not None else f"\x00{self.id}"


#: the job row's fields in their order: the one list every adapter's columns come from
#: (storage.rows, the SQL tables, the BSON documents)
JOB_FIELDS = tuple(f.name for f in fields(Job))

#: the fields a transition may change; the others are the job's identity, fixed by its
#: JobEnqueued (adapters rewrite only these on an update)
TRANSITION_FIELDS = (
    "status",
    "attempts",
    "next_run_at",
    "updated_at",
    "stream_version",
    "last_hash",
    "last_error",
    "dead_reason",
    "claimed_by",
    "claim_token",
    "lease_until",
    "inflight_token",
    "running_code",
    "closed_at",
)


@fast_init
@dataclass(frozen=True, slots=True)
class Change:
    """Events to append to one stream and the row they leave in its read model.

    The store applies a change only if the stream is still at `expected_version`
    (0: the stream must not exist yet), so a change computed from a stale row loses
    the race instead of overwriting it. `row` None removes the row from the read model.
    """

    stream: str
    expected_version: int
    events: tuple[Event, ...]
    row: Any  # Job | Schedule | None — typed per read model by the helpers below
    dedupe_key: str | None = None  # set on a new job: insert nothing if already seen
    partition: int | None = None  # a job change's partition (lease guards, wake-ups)
    #: events appended to a stream whose row already left the read model (a late run's
    #: JobRedelivered): the compare-and-set is on the log's (stream, version) alone
    closed_stream: bool = False

    @property
    def is_new(self) -> bool:
        return self.expected_version == 0


@dataclass(frozen=True, slots=True)
class NewJob:
    """What a business module asks for (reference §4 `enqueue`)."""

    target: str
    payload: Any = None
    code: str | None = None
    key: str | None = None
    version: int = 0
    dedupe_key: str | None = None
    headers: Mapping[str, str] | None = None
    run_at: datetime | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class Stamp:
    """The envelope every command needs: when, who, and under which trace."""

    at: datetime
    actor: Actor | None = None
    trace_id: str | None = None


# --- folding events into the row ------------------------------------------------------


_CLEARED: dict[str, Any] = {
    "claimed_by": None,
    "claim_token": None,
    "lease_until": None,
    "inflight_token": None,
    "running_code": None,
}
_LEAVES_QUEUE = frozenset(
    {EventType.JOB_SUCCEEDED, EventType.JOB_SKIPPED, EventType.JOB_CANCELLED, EventType.JOB_EXPIRED}
)


def evolve_source() -> str:
    """The source of `_evolve`: `dataclasses.replace` for `Job` without its per-call
    field introspection (every transition folds through it). One argument per field,
    in field order, positional as `Job(...)` takes them::

        def evolve(job, c):
            return Job(
                c["id"] if "id" in c else job.id,
                c["code"] if "code" in c else job.code,
                ...
                c["closed_at"] if "closed_at" in c else job.closed_at,
            )

    `evolve(job, {"status": JobStatus.DEAD})` equals
    `dataclasses.replace(job, status=JobStatus.DEAD)` (tests/unit/test_job_state_machine.py
    compares the two for every field); `inspect.getsource(_evolve)` and tracebacks show
    this text (`records.compile_generated` registers it as `<evolve Job>`).
    """
    args = "".join(f"        c[{n!r}] if {n!r} in c else job.{n},\n" for n in JOB_FIELDS)
    return f"def evolve(job, c):\n    return Job(\n{args}    )\n"


def _compile_evolve() -> Callable[[Job, dict[str, Any]], Job]:
    evolve: Callable[[Job, dict[str, Any]], Job] = compile_generated(
        evolve_source(), {"Job": Job}, "evolve", "evolve Job"
    )
    return evolve


_evolve = _compile_evolve()


def _changes_for(job: Job, event: Event) -> dict[str, Any]:
    """The fields `event` sets on `job` (besides version, hash and updated_at)."""
    data = event.data
    kind = event.type
    if kind == EventType.JOB_DISPATCHED:
        return {"inflight_token": data["token"], "claimed_by": data.get("pod")}
    if kind == EventType.JOB_CLAIMED:
        return {
            "status": JobStatus.RUNNING,
            "claimed_by": data.get("pod"),
            "claim_token": data["token"],
            "lease_until": parse_iso(data["lease_until"]),
            "running_code": data.get("running_code"),
            "inflight_token": None,
        }
    if kind == EventType.JOB_LEASE_RENEWED:
        return {"lease_until": parse_iso(data["lease_until"])}
    if kind == EventType.JOB_FAILED:
        return {
            **_CLEARED,
            "status": JobStatus.PENDING,
            "attempts": data["attempts"],
            "next_run_at": parse_iso(data["next_run_at"]),
            "last_error": data.get("error"),
        }
    if kind in (EventType.JOB_DEFERRED, EventType.JOB_REQUEUED):
        next_run = data.get("next_run_at")
        return {
            **_CLEARED,
            "status": JobStatus.PENDING,
            "next_run_at": parse_iso(next_run) if next_run else job.next_run_at,
            "last_error": data.get("error", job.last_error),
        }
    if kind == EventType.JOB_DEAD:
        return {
            **_CLEARED,
            "status": JobStatus.DEAD,
            "attempts": data.get("attempts", job.attempts),
            "last_error": data.get("error", job.last_error),
            "dead_reason": data.get("reason"),
            "closed_at": event.at,
        }
    if kind == EventType.JOB_RETRIED:
        return {
            **_CLEARED,
            "status": JobStatus.PENDING,
            "attempts": 0,
            "next_run_at": event.at,
            "dead_reason": None,
            "closed_at": None,
        }
    raise ValueError(f"{event.stream}: unknown job event {kind}")


def apply(job: Job | None, event: Event) -> Job | None:
    """The row after `event`; None once the job has left the queue."""
    data = event.data
    if event.type == EventType.JOB_ENQUEUED:
        if job is not None:
            raise ValueError(f"{event.stream}: enqueued twice")
        return Job(
            id=data["id"],
            code=data["code"],
            target=data["target"],
            lane=Lane(data["lane"]),
            key=data.get("key"),
            partition=data["partition"],
            version=data.get("version", 0),
            payload=data.get("payload"),
            dedupe_key=data["dedupe_key"],
            status=JobStatus.PENDING,
            attempts=0,
            next_run_at=parse_iso(data["run_at"]) if data.get("run_at") else event.at,
            created_at=event.at,
            updated_at=event.at,
            stream_version=event.version,
            last_hash=event.hash,
            headers=data.get("headers"),
            trace_id=event.trace_id,
            traceparent=data.get("traceparent"),
            actor=event.actor,
        )
    if event.type == EventType.JOB_REDELIVERED and job is None:
        return None  # a late run's record, after the job left the queue
    if job is None:
        raise ValueError(f"{event.stream} v{event.version}: {event.type} before JobEnqueued")
    if event.type in _LEAVES_QUEUE:
        return None
    changes = _changes_for(job, event)
    changes.update(stream_version=event.version, last_hash=event.hash, updated_at=event.at)
    return _evolve(job, changes)


def fold(events: list[Event]) -> Job | None:
    job: Job | None = None
    for event in events:
        job = apply(job, event)
    return job


# --- commands ---------------------------------------------------------------------------


def _change(job: Job, stamp: Stamp, *items: tuple[str, Mapping[str, Any]]) -> Change:
    """Append `items` as events after `job`'s last one and fold them into the row."""
    events: list[Event] = []
    stream = job.stream
    version, prev = job.stream_version, job.last_hash
    row: Job | None = job
    for kind, data in items:
        version += 1
        event = new_event(
            stream,
            version,
            kind,
            data,
            at=stamp.at,
            actor=stamp.actor,
            trace_id=stamp.trace_id or job.trace_id,
            prev_hash=prev,
        )
        prev = event.hash
        events.append(event)
        row = apply(row, event)
    return Change(stream, job.stream_version, tuple(events), row, partition=job.partition)


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
    return _change(job, stamp, (EventType.JOB_DISPATCHED, {"token": token, "pod": pod}))


def unmark(job: Job, stamp: Stamp, cause: str) -> Change:
    """Fast lane: release an in-flight mark whose row was *not* sent (its target paused
    mid-round, the lease ending before the send, the round given up). A deferral that
    clears the mark: no attempt spent, the row PENDING as it was, so it neither holds its
    key nor is declared DEAD "in flight" by the next owner."""
    if job.inflight_token is None:
        raise InvalidStatus(f"cannot unmark job {job.id}: it carries no in-flight mark")
    data = {"reason": "not_sent", "cause": cause, "token": job.inflight_token}
    return _change(job, stamp, (EventType.JOB_DEFERRED, data))


def claim(
    job: Job, *, token: str, pod: str, lease: timedelta, exclusive: bool, stamp: Stamp
) -> Change:
    """Long lane: reserve the row under `token` until now + `lease`."""
    data = {
        "token": token,
        "pod": pod,
        "lease_until": iso(stamp.at + lease),
        "running_code": job.code if exclusive else None,
        "reclaimed_from": job.claim_token if job.status == JobStatus.RUNNING else None,
    }
    return _change(job, stamp, (EventType.JOB_CLAIMED, data))


def renew_lease(job: Job, *, lease: timedelta, stamp: Stamp) -> Change:
    _require(job, JobStatus.RUNNING, "renew")
    return _change(
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


def _error_text(error: str | None) -> str | None:
    return error[:MAX_ERROR_CHARS] if error is not None else None


# --- the one outcome path ---------------------------------------------------------------


class Result(enum.StrEnum):
    """How one run ended, as the handler signalled it (reference §4 handler errors)."""

    OK = "ok"
    ANSWERED = "answered"  # any ordinary exception
    UNREACHABLE = "unreachable"  # TargetUnreachable
    UNKNOWN = "unknown"  # TargetOutcomeUnknown
    DEAD_NOW = "dead_now"  # DeadNow / {dead_now: true}
    SKIPPED = "skipped"  # SkipRun(reason): a late schedule slot


@fast_init
@dataclass(frozen=True, slots=True)
class RunResult:
    result: Result
    error: str | None = None
    target_up: bool = False
    duration_ms: float = 0.0


@fast_init
@dataclass(frozen=True, slots=True)
class OutcomePolicy:
    """What the outcome path needs to know about the job's target."""

    delivery_mode: DeliveryMode
    max_attempts: int
    retry_delays_minutes: tuple[float, ...]


@fast_init
@dataclass(frozen=True, slots=True)
class Outcome:
    """The decision for one run: the change to write and what it means for the target."""

    change: Change
    label: str  # the run log line's result= value
    pause_target: bool = False
    dead: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def decide_outcome(job: Job, run: RunResult, policy: OutcomePolicy, stamp: Stamp) -> Outcome:
    """Reference §5/§6: one function for both lanes.

    ok → succeeded (leaves the queue); answered → attempts + 1 and backoff, DEAD at the
    max; unreachable → no attempt spent, target paused; unknown → at-most-once DEAD (and
    paused unless the target is up), at-least-once treated as unreachable; dead_now →
    DEAD, pause state left as it is.
    """
    error = _error_text(run.error)
    if run.result == Result.OK:
        data: dict[str, Any] = {"attempts": job.attempts, "duration_ms": round(run.duration_ms, 3)}
        return Outcome(_change(job, stamp, (EventType.JOB_SUCCEEDED, data)), "ok")
    if run.result == Result.ANSWERED:
        attempts = job.attempts + 1
        if attempts >= policy.max_attempts:
            return _dead(job, stamp, "max_attempts", error, attempts)
        next_run = stamp.at + retry_delay(attempts, policy.retry_delays_minutes)
        failed: dict[str, Any] = {
            "attempts": attempts,
            "error": error,
            "next_run_at": iso(next_run),
        }
        return Outcome(_change(job, stamp, (EventType.JOB_FAILED, failed)), "failed")
    if run.result == Result.DEAD_NOW:
        return _dead(job, stamp, "dead_now", error, job.attempts)
    if run.result == Result.SKIPPED:
        return Outcome(skip_slot(job, stamp, run.error or "skipped"), "skipped")
    if run.result == Result.UNKNOWN and policy.delivery_mode == DeliveryMode.AT_MOST_ONCE:
        outcome = _dead(job, stamp, "outcome_unknown", error, job.attempts)
        return replace(outcome, pause_target=not run.target_up)
    # unreachable, or an unknown outcome on an at-least-once target
    reason = "unreachable" if run.result == Result.UNREACHABLE else "outcome_unknown"
    deferred: dict[str, Any] = {"reason": reason, "error": error}
    change = _change(job, stamp, (EventType.JOB_DEFERRED, deferred))
    return Outcome(change, "deferred", pause_target=True)


def _dead(job: Job, stamp: Stamp, reason: str, error: str | None, attempts: int) -> Outcome:
    data = {"reason": reason, "error": error, "attempts": attempts}
    return Outcome(_change(job, stamp, (EventType.JOB_DEAD, data)), "dead", dead=True)


def redelivered(
    stream: str,
    version: int,
    last_hash: str,
    *,
    partition: int,
    pod: str,
    run: RunResult,
    label: str,
    stamp: Stamp,
) -> Change:
    """A run whose outcome lost its compare-and-set to another run's outcome that closed
    the job (a new owner's resend after a takeover, or the old owner's late one), so the
    log would not show this delivery at all. Appended after the closed stream's last
    event (`version`, `last_hash`); it changes no row. Only written on this rare path,
    never before a send: see docs/events.md, "Every delivery in the log"."""
    data: dict[str, Any] = {
        "pod": pod,
        "result": label,
        "duration_ms": round(run.duration_ms, 3),
        "error": _error_text(run.error),
    }
    event = new_event(
        stream,
        version + 1,
        EventType.JOB_REDELIVERED,
        data,
        at=stamp.at,
        actor=stamp.actor,
        trace_id=stamp.trace_id,
        prev_hash=last_hash,
    )
    return Change(stream, version, (event,), None, partition=partition, closed_stream=True)


def take_over(job: Job, mode: DeliveryMode, stamp: Stamp) -> Outcome:
    """A fast-lane row left in flight by a dead or stalled owner (reference §9)."""
    if mode == DeliveryMode.AT_MOST_ONCE:
        return _dead(
            job, stamp, "in flight when its partition was taken over", job.last_error, job.attempts
        )
    requeued: dict[str, Any] = {
        "reason": "in flight when its partition was taken over",
        "token": job.inflight_token,
    }
    return Outcome(_change(job, stamp, (EventType.JOB_REQUEUED, requeued)), "requeued")


def reclaim_expired(
    job: Job,
    mode: DeliveryMode,
    *,
    token: str,
    pod: str,
    lease: timedelta,
    exclusive: bool,
    stamp: Stamp,
) -> Outcome:
    """Long lane: a RUNNING row whose lease expired (closes G6).

    at-least-once → claimed again and run from the start; at-most-once → the first run
    may have finished its side effect, so the row goes DEAD with that reason.
    """
    if mode == DeliveryMode.AT_MOST_ONCE:
        return _dead(
            job,
            stamp,
            "lease expired while running; the first run may have finished",
            job.last_error,
            job.attempts,
        )
    change = claim(job, token=token, pod=pod, lease=lease, exclusive=exclusive, stamp=stamp)
    return Outcome(change, "reclaimed")


# --- admin and system commands -----------------------------------------------------------


def retry(job: Job, stamp: Stamp) -> Change:
    _require(job, JobStatus.DEAD, "retry")
    return _change(job, stamp, (EventType.JOB_RETRIED, {}))


def skip(job: Job, stamp: Stamp, reason: str = "admin") -> Change:
    _require(job, JobStatus.DEAD, "skip")
    return _change(job, stamp, (EventType.JOB_SKIPPED, {"reason": reason}))


def skip_slot(job: Job, stamp: Stamp, reason: str) -> Change:
    """A schedule slot skipped at run time (started too late)."""
    return _change(job, stamp, (EventType.JOB_SKIPPED, {"reason": reason}))


def cancel(job: Job, stamp: Stamp) -> Change:
    """Admin cancel of a PENDING row that is not in flight (closes G2)."""
    if job.status != JobStatus.PENDING or job.inflight_token is not None:
        state = "in flight" if job.inflight_token else job.status.value
        raise InvalidStatus(f"cannot cancel job {job.id}: it is {state}")
    return _change(job, stamp, (EventType.JOB_CANCELLED, {}))


def expire(job: Job, stamp: Stamp, retention: timedelta) -> Change:
    _require(job, JobStatus.DEAD, "expire")
    return _change(
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
        return _dead(job, stamp, reason, _error_text(error), attempts).change
    if attempts > 0:
        failed: dict[str, Any] = {
            "attempts": attempts,
            "error": _error_text(error),
            "next_run_at": iso(next_run_at),
        }
        return _change(job, stamp, (EventType.JOB_FAILED, failed))
    return _change(job, stamp)
