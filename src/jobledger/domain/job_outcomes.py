"""The one outcome path of both lanes, pure: how a run ended (`Result`, `RunResult`),
what follows from it (`decide_outcome`, an `Outcome` labelled by `OutcomeLabel`), and
the judgements of rows a run left behind: a fast-lane row in flight at a takeover
(`take_over`), a long-lane row whose pod died (`claim_of_dead_pod`), whose lease
expired (`reclaim_expired`) or whose run a stopping pod cut short
(`stopped_while_running`), a run whose outcome lost to another's (`redelivered`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from jobledger.domain.events import EventType, new_event
from jobledger.domain.failures import (
    LEASE_EXPIRED_TEXT,
    POD_DIED_REQUEUED_TEXT,
    POD_DIED_TEXT,
    TAKEN_OVER_TEXT,
    Failure,
    FailureReason,
    engine_failure,
    reason_named,
)
from jobledger.domain.job_commands import claim, dead_change, skip_slot
from jobledger.domain.jobs import (
    Change,
    DeliveryMode,
    Job,
    Stamp,
    append_events,
    error_text,
)
from jobledger.domain.policies import retry_delay
from jobledger.domain.records import fast_init
from jobledger.domain.run_policy import RetryPolicy
from jobledger.domain.timeutil import iso


class Result(enum.StrEnum):
    """How one run ended, as the handler signalled it (returned, or which error it raised)."""

    OK = "ok"
    ANSWERED = "answered"  # any ordinary exception
    UNREACHABLE = "unreachable"  # TargetUnreachable
    UNKNOWN = "unknown"  # TargetOutcomeUnknown
    DEAD_NOW = "dead_now"  # DeadNow / {dead_now: true}
    SKIPPED = "skipped"  # SkipRun(reason): a late schedule slot
    TIMED_OUT = "timed_out"  # RunTimedOut: the run outlived its target's timeout_s


class OutcomeLabel(enum.StrEnum):
    """What the lane decided for a row: the `result=` of its `job run` line and the
    `result` its observers and metrics see. The lanes branch on the member; its value is
    the text those write."""

    OK = "ok"  # succeeded: the row leaves the queue
    FAILED = "failed"  # answered failure: attempts + 1, retried after the backoff
    DEFERRED = "deferred"  # unreachable (or an unknown outcome, at-least-once): no attempt
    DEAD = "dead"
    SKIPPED = "skipped"  # a late schedule slot skipped (SkipRun)
    REQUEUED = "requeued"  # in flight at a takeover or a stop, at-least-once: sent again
    CLAIMED = "claimed"  # long lane: claimed under this pod's token
    RECLAIMED = "reclaimed"  # long lane: lease expired, at-least-once: claimed again
    LOST = "lost"  # the run's outcome lost its compare-and-set to another writer


@fast_init
@dataclass(frozen=True, slots=True)
class RunResult:
    """How one run ended. A failed run also carries what its failure record keeps: the
    exception's qualified class, its bounded traceback, and the reason when the
    exception names one (`failures.reason_of`; None: the one its `result` implies);
    `exc` is the exception itself, for the log line (never written to the store)."""

    result: Result
    error: str | None = None
    target_up: bool = False
    duration_ms: float = 0.0
    error_class: str | None = None
    traceback: str | None = None
    reason: str | None = None
    exc: BaseException | None = field(default=None, compare=False, repr=False)


#: the reason a failed run's result implies when its exception named none
_REASON_OF_RESULT = {
    Result.ANSWERED: FailureReason.HANDLER_ERROR,
    Result.UNREACHABLE: FailureReason.UNREACHABLE,
    Result.UNKNOWN: FailureReason.OUTCOME_UNKNOWN,
    Result.DEAD_NOW: FailureReason.DEAD_NOW,
    Result.TIMED_OUT: FailureReason.TIMEOUT,
}


def run_failure(job: Job, run: RunResult, error: str | None) -> Failure:
    """The failure record of `job`'s run that ended as `run` (not OK, not skipped), with
    `error`, the run's error text as `decide_outcome` has it."""
    reason = reason_named(run.reason) or _REASON_OF_RESULT.get(
        run.result, FailureReason.HANDLER_ERROR
    )
    return Failure(
        reason,
        run.error_class,
        error,
        run.traceback,
        job.attempts + 1,
        run.duration_ms,
    )


@fast_init
@dataclass(frozen=True, slots=True)
class OutcomePolicy:
    """What the outcome path needs to know about the job's target: its delivery mode,
    the runs allowed before DEAD, and the waits between them (`retry`, the target's own
    policy; None: `retry_delays_minutes`, the settings' table)."""

    delivery_mode: DeliveryMode
    max_attempts: int
    retry_delays_minutes: tuple[float, ...]
    retry: RetryPolicy | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class Outcome:
    """The decision for one run: the change to write and what it means for the target."""

    change: Change
    label: OutcomeLabel
    pause_target: bool = False
    dead: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def decide_outcome(job: Job, run: RunResult, policy: OutcomePolicy, stamp: Stamp) -> Outcome:
    """The decision for one run, one function for both lanes.

    ok → succeeded (leaves the queue); answered → attempts + 1 and backoff, DEAD at the
    max; unreachable → no attempt spent, target paused; unknown → at-most-once DEAD (and
    paused unless the target is up), at-least-once treated as unreachable; dead_now →
    DEAD, pause state left as it is; timed out → at-least-once an answered failure,
    at-most-once DEAD (the cancelled run may have had its effect), an attempt spent.
    """
    if run.result == Result.OK:
        return succeeded(job, run, stamp)
    error = error_text(run.error)
    if run.result == Result.SKIPPED:
        return Outcome(skip_slot(job, stamp, error or OutcomeLabel.SKIPPED), OutcomeLabel.SKIPPED)
    failure = run_failure(job, run, error)  # only a failed run pays for its record
    attempts = failure.attempt  # the runs that happened, this one included
    if run.result == Result.TIMED_OUT and policy.delivery_mode == DeliveryMode.AT_MOST_ONCE:
        return dead_outcome(job, stamp, "timeout", error, attempts, failure)
    if run.result == Result.ANSWERED or run.result == Result.TIMED_OUT:
        if attempts >= policy.max_attempts:
            return dead_outcome(job, stamp, "max_attempts", error, attempts, failure)
        if policy.retry is None:
            next_run = stamp.at + retry_delay(attempts, policy.retry_delays_minutes)
        else:
            next_run = stamp.at + policy.retry.delay(attempts, job.id)
        failed: dict[str, Any] = {
            "attempts": attempts,
            "error": error,
            "next_run_at": iso(next_run),
            "failure": failure.to_json(),
        }
        return Outcome(
            append_events(job, stamp, (EventType.JOB_FAILED, failed)), OutcomeLabel.FAILED
        )
    if run.result == Result.DEAD_NOW:
        return dead_outcome(job, stamp, "dead_now", error, attempts, failure)
    if run.result == Result.UNKNOWN and policy.delivery_mode == DeliveryMode.AT_MOST_ONCE:
        outcome = dead_outcome(job, stamp, "outcome_unknown", error, attempts, failure)
        return replace(outcome, pause_target=not run.target_up)
    # unreachable, or an unknown outcome on an at-least-once target: no attempt spent
    reason = "unreachable" if run.result == Result.UNREACHABLE else "outcome_unknown"
    deferred: dict[str, Any] = {"reason": reason, "error": error, "failure": failure.to_json()}
    change = append_events(job, stamp, (EventType.JOB_DEFERRED, deferred))
    return Outcome(change, OutcomeLabel.DEFERRED, pause_target=True)


def succeeded(job: Job, run: RunResult, stamp: Stamp) -> Outcome:
    """`decide_outcome` of a run that ended OK (no policy needed): the job leaves the
    queue. The lanes call it directly for their most common outcome. `attempts` counts
    the runs that happened, this one included."""
    data: dict[str, Any] = {
        "attempts": job.attempts + 1,
        "duration_ms": round(run.duration_ms, 3),
    }
    return Outcome(append_events(job, stamp, (EventType.JOB_SUCCEEDED, data)), OutcomeLabel.OK)


def dead_outcome(
    job: Job, stamp: Stamp, reason: str, error: str | None, attempts: int, failure: Failure
) -> Outcome:
    change = dead_change(job, stamp, reason, error, attempts, failure.to_json())
    return Outcome(change, OutcomeLabel.DEAD, dead=True)


def _ended_by_engine(
    job: Job, mode: DeliveryMode, stamp: Stamp, reason: FailureReason, text: str
) -> tuple[Failure, Outcome | None]:
    """The failure record of a run the engine ended (`reason`, worded `text`), and at
    most once the DEAD outcome it leads to: the run may have finished its side effect.
    At least once, the caller runs the row again (None)."""
    failure = engine_failure(reason, text, job.attempts + 1)
    if mode != DeliveryMode.AT_MOST_ONCE:
        return failure, None
    return failure, dead_outcome(job, stamp, text, text, failure.attempt, failure)


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
        "result": str(label),
        "duration_ms": round(run.duration_ms, 3),
        "error": error_text(run.error),
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
    """A fast-lane row left in flight by a dead or stalled owner: at-most-once → DEAD
    (the send may have happened), at-least-once → requeued (sent again)."""
    failure, dead = _ended_by_engine(job, mode, stamp, FailureReason.TAKEN_OVER, TAKEN_OVER_TEXT)
    if dead is not None:
        return dead
    return requeued(
        job,
        stamp,
        {"reason": TAKEN_OVER_TEXT, "token": job.inflight_token, "failure": failure.to_json()},
    )


def claim_of_dead_pod(job: Job, mode: DeliveryMode, stamp: Stamp) -> Outcome:
    """Long lane: a RUNNING row whose pod died (its liveness token is free) before the
    row's lease ran out. at-most-once → DEAD, since the run may have finished its side
    effect, as `reclaim_expired` decides; at-least-once → requeued (PENDING, the claim
    dropped), to run again from the start through the next reserve of any pod."""
    failure, dead = _ended_by_engine(job, mode, stamp, FailureReason.POD_DIED, POD_DIED_TEXT)
    if dead is not None:
        return dead
    return requeued(
        job,
        stamp,
        {"reason": POD_DIED_REQUEUED_TEXT, "token": job.claim_token, "failure": failure.to_json()},
    )


def stopped_while_running(job: Job, mode: DeliveryMode, stamp: Stamp) -> Outcome | None:
    """Long lane: a RUNNING row whose run its own pod cut short while stopping (the run
    outlived the stop's share of `stop_timeout_s`; it was cancelled and wrote nothing).

    at-least-once → given back: `JobRequeued{reason: stopped}` drops the claim, spends no
    attempt and makes the row due now, so the next reserve of any pod starts it at once
    instead of after its lease. at-most-once → None, the row is left as it is: the run
    may have made its side effect, so its claim stays and whoever takes the claim over
    (a pod finding this one's liveness token free, or any reserve once the lease has
    expired) judges it DEAD, as for a pod that died.
    """
    if mode == DeliveryMode.AT_MOST_ONCE:
        return None
    given_back = {
        "reason": FailureReason.STOPPED.value,
        "token": job.claim_token,
        "next_run_at": iso(stamp.at),
    }
    return requeued(job, stamp, given_back)


def requeued(job: Job, stamp: Stamp, data: dict[str, Any]) -> Outcome:
    """`job` PENDING again with the claim or mark dropped and no attempt spent
    (`JobRequeued` with `data`: its reason, the token dropped)."""
    return Outcome(append_events(job, stamp, (EventType.JOB_REQUEUED, data)), OutcomeLabel.REQUEUED)


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
    """Long lane: a RUNNING row whose lease expired.

    at-least-once → claimed again and run from the start; at-most-once → the first run
    may have finished its side effect, so the row goes DEAD with that reason.
    """
    failure, dead = _ended_by_engine(
        job, mode, stamp, FailureReason.LEASE_EXPIRED, LEASE_EXPIRED_TEXT
    )
    if dead is not None:
        return dead
    change = claim(
        job, token=token, pod=pod, lease=lease, exclusive=exclusive, stamp=stamp, failure=failure
    )
    return Outcome(change, OutcomeLabel.RECLAIMED)
