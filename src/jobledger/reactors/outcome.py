"""The one outcome path both lanes share.

    run      the handler inside the job's context, its exception classified
    judge    domain.job_outcomes.decide_outcome with the target's policy (pure), and its
             effect on the target's pause state at once
    settle   after the store applied (or refused) the change: one `job run` log line,
             observers, the `job dead alert` on DEAD, and a run whose outcome lost its
             compare-and-set recorded (`record_lost`)
    judged   a row judged without a run of its own (a takeover, an expired long lease)

The lanes only choose *when* to run and *how many* changes share a commit: the fast
lane settles a round's runs after their group commit, the long lane each run after its
own write.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from time import perf_counter
from typing import TYPE_CHECKING, Any

from jobledger.core.context import enter_job, leave
from jobledger.core.registry import Target
from jobledger.domain import job_outcomes
from jobledger.domain.errors import RunTimedOut, SkipRun, TargetOutcomeUnknown, TargetUnreachable
from jobledger.domain.events import SYSTEM
from jobledger.domain.failures import (
    MAX_TRACEBACK_FRAMES,
    cut_traceback,
    qualified_class,
    reason_of,
)
from jobledger.domain.job_outcomes import (
    Outcome,
    OutcomeLabel,
    OutcomePolicy,
    Result,
    RunResult,
)
from jobledger.domain.jobs import DeliveryMode, Job, Stamp
from jobledger.observability.logs import log_run_line, run_line_level
from jobledger.observability.observe import RunRecord
from jobledger.observability.tracing import traced_run
from jobledger.reactors.pause import PauseMap
from jobledger.storage.port import LeaseGuard

if TYPE_CHECKING:
    from jobledger.engine import Engine

run_log = logging.getLogger("jobledger.run")
logger = logging.getLogger("jobledger.outcome")

_OK = OutcomeLabel.OK


def error_of(exc: BaseException) -> str:
    """`str(exc)`, or the class name when that is empty or `__str__` itself raises: the
    run's outcome must still be written, or the job would run again and again with
    nothing recorded."""
    if isinstance(exc, SystemExit):  # `str(SystemExit(3))` is "3": say what it was
        return f"the handler called sys.exit({exc.code!r})"
    try:
        return str(exc) or type(exc).__name__
    except Exception:
        return f"{type(exc).__name__} (its message could not be read)"


def traceback_of(exc: BaseException) -> str | None:
    """`exc`'s traceback, bounded (`failures.cut_traceback`: whole frames, the innermost
    kept; only the innermost `MAX_TRACEBACK_FRAMES` are formatted at all), or None when
    it cannot be formatted."""
    try:
        frames = 0
        tb = exc.__traceback__
        while tb is not None:
            frames += 1
            tb = tb.tb_next
        limit = MAX_TRACEBACK_FRAMES
        formatted = traceback.TracebackException.from_exception(exc, limit=-limit).format()
        return cut_traceback(list(formatted), skipped=max(frames - limit, 0))
    except Exception:  # a broken __str__ or source lookup must not lose the outcome
        return None


def classify(exc: BaseException | None, duration_ms: float) -> RunResult:
    """How a handler's run ended, from what it raised (None: it returned). A failed run
    carries its exception's class, bounded traceback and reason, read only here: a run
    that succeeded pays for none of it."""
    if exc is None:
        return RunResult(Result.OK, duration_ms=duration_ms)
    if isinstance(exc, SkipRun):
        return RunResult(Result.SKIPPED, error=exc.reason, duration_ms=duration_ms)
    text = error_of(exc)
    up = False
    if isinstance(exc, TargetUnreachable):
        result = Result.UNREACHABLE
    elif isinstance(exc, TargetOutcomeUnknown):
        result, up = Result.UNKNOWN, exc.target_up
    elif getattr(exc, "dead_now", False) is True:
        result = Result.DEAD_NOW
    elif isinstance(exc, RunTimedOut):
        result = Result.TIMED_OUT
    else:
        result = Result.ANSWERED
    return RunResult(
        result,
        text,
        up,
        duration_ms,
        qualified_class(exc),
        traceback_of(exc),
        reason_of(exc).value,
        exc,
    )


@dataclass(slots=True)
class Ran:
    """One run, judged: the row as it was run, its target, how the run ended, and the
    outcome to write."""

    job: Job
    target: Target
    run: RunResult
    outcome: Outcome


class OutcomePath:
    def __init__(self, engine: Engine, pauses: PauseMap) -> None:
        self.engine = engine
        self.pauses = pauses

    async def run(self, target: Target, job: Job) -> RunResult:
        """Run `target`'s handler for `job` under the enqueuer's trace and actor."""
        started = perf_counter()
        error: BaseException | None = None
        token = enter_job(job.trace_id, job.traceparent, job.actor)
        try:
            if self.engine.observers.observers:  # a tracing observer opens the run span
                with traced_run(self.engine.observers, job) as span:  # spans nest under it
                    try:
                        await target.handler(job)
                    except (Exception, SystemExit) as exc:
                        error = exc
                        span.failed(exc)
            else:  # no observer, no span: the lanes' hot path
                try:
                    await target.handler(job)
                # every handler failure is classified; a handler's sys.exit() is one (it
                # must not end the lane's task, and with it the pod, on every pod it reaches)
                except (Exception, SystemExit) as exc:
                    error = exc
        finally:
            leave(token)
        return classify(error, (perf_counter() - started) * 1000.0)

    def policy(self, target: Target, job: Job) -> OutcomePolicy:
        return OutcomePolicy(
            target.delivery_mode,
            self.engine.targets.max_attempts(job.code, target),
            self.engine.settings.retry_delays_minutes,
            target.retry,
        )

    def judge(
        self, target: Target, job: Job, run: RunResult, now: datetime | None = None
    ) -> Outcome:
        """The decision for one run, and its effect on the target's pause state; `now`,
        the clock read once the run ended, if the caller has it (the fast lane's chain
        reads it once for this stamp and its next send's lease check).

        The pause takes effect at once, before the change is written, so the rest of
        the target's batch is skipped while the commit is still on its way.
        """
        stamp = Stamp(self.engine.clock.now() if now is None else now, SYSTEM, job.trace_id)
        if run.result == Result.OK:  # the common case needs no policy
            outcome = job_outcomes.succeeded(job, run, stamp)
            self.pauses.resume(job.target)  # the target answered
            return outcome
        outcome = job_outcomes.decide_outcome(job, run, self.policy(target, job), stamp)
        if outcome.pause_target:
            self.pauses.pause(job.target)
        elif run.result in (Result.ANSWERED, Result.SKIPPED):
            self.pauses.resume(job.target)  # the target answered
        return outcome

    async def settle(self, ran: Sequence[Ran], applied: Sequence[bool], pod: str) -> None:
        """After the store's answer to `ran`'s outcomes (`applied`, one flag each): each
        run's line, observers and DEAD alert (`finish`); a run of `pod` whose outcome lost
        its compare-and-set is recorded (`record_lost`). An applied "ok" with nothing to log
        or observe is skipped without a call (asked once per settle)."""
        quiet_ok = not self._recorded(_OK)
        for item, ok in zip(ran, applied, strict=True):
            if ok and quiet_ok and item.outcome.label is _OK:
                continue
            self.finish(item.job, item.run, item.outcome, ok)
            if not ok:
                await self.record_lost(item.job, item.run, item.outcome, pod)

    def judged(self, job: Job, outcome: Outcome, reason: str) -> None:
        """A row judged without a run of its own (in flight at a takeover, a long lease
        expired): its run line, and the DEAD alert when it went DEAD, both naming the
        ending its failure record names (the row's last error before it otherwise)."""
        failure = _failure_of(outcome)
        error = failure.get("message") if failure else job.last_error
        row = outcome.change.row if isinstance(outcome.change.row, Job) else job
        self.log_run(job, outcome.label, 0.0, row.attempts, error, failure=failure)
        if outcome.dead:
            self.dead(row, reason, error)

    async def judge_left_behind(
        self,
        rows: Sequence[Job],
        decide: Callable[[Job, DeliveryMode, Stamp], Outcome | None],
        reason: str,
        *,
        guard: LeaseGuard | None = None,
    ) -> list[tuple[Job, Outcome, bool]]:
        """Rows another run left behind (in flight at a takeover, claimed by a pod that
        died, cut short by this pod's stop): each judged by `decide` with its target's
        delivery mode, all written in one apply (lease-guarded with `guard`), those
        applied settled with `judged`. Rows of a target this pod does not know, and rows
        `decide` answers None for, are left as they are. Returns each judged row, its
        outcome and whether it was applied."""
        engine = self.engine
        decided: list[tuple[Job, Outcome]] = []
        for job in rows:
            target = engine.targets.find(job.target)
            if target is None:
                logger.warning("job %s: target %s is not registered here", job.id, job.target)
                continue
            stamp = Stamp(engine.clock.now(), SYSTEM, job.trace_id)
            outcome = decide(job, target.delivery_mode, stamp)
            if outcome is not None:
                decided.append((job, outcome))
        if not decided:
            return []
        flags = await engine.store.writes.apply([o.change for _, o in decided], guard=guard)
        for (job, outcome), ok in zip(decided, flags, strict=True):
            if ok:
                self.judged(job, outcome, reason)
        return [(job, outcome, ok) for (job, outcome), ok in zip(decided, flags, strict=True)]

    def finish(self, job: Job, run: RunResult, outcome: Outcome, applied: bool) -> None:
        """The run line, observers and the DEAD alert once the change was written (or
        lost its compare-and-set to a takeover: result=lost)."""
        label = outcome.label if applied else OutcomeLabel.LOST
        row = outcome.change.row if isinstance(outcome.change.row, Job) else None
        if self._recorded(label):
            attempts = row.attempts if row is not None else _attempts_of(outcome, job)
            failure = _failure_of(outcome) if run.exc is not None else None
            self.log_run(job, label, run.duration_ms, attempts, run.error, run.exc, failure)
        if applied and outcome.dead:
            self.dead(row or job, _reason_of(outcome), run.error)

    def _recorded(self, label: OutcomeLabel) -> bool:
        """Whether a run with this result is seen at all: an observer, or a log level
        that writes its `job run` line. If not, the hot path builds no record."""
        return bool(self.engine.observers.observers) or run_log.isEnabledFor(run_line_level(label))

    async def record_lost(self, job: Job, run: RunResult, outcome: Outcome, pod: str) -> None:
        """The handler ran, yet its outcome lost the compare-and-set to another run's.
        When that other outcome closed the job, append a `JobRedelivered` after it, so
        the log shows both deliveries. An open row is left alone: an event there would
        move its stream under the run that owns it now and make that run's outcome
        lose in turn; the `job run … result=lost` line is this delivery's only trace
        then. Never raises into the lane."""
        store = self.engine.store
        stamp = Stamp(self.engine.clock.now(), SYSTEM, job.trace_id)
        try:
            for _ in range(3):  # a compare-and-set too: retry when the stream moved on
                if await store.admin.get_job(job.id) is not None:
                    return
                history = await store.log.read_stream(job.stream)
                if not history:
                    return
                change = job_outcomes.redelivered(
                    job.stream,
                    history[-1].version,
                    history[-1].hash,
                    partition=job.partition,
                    pod=pod,
                    run=run,
                    label=outcome.label.value,
                    stamp=stamp,
                )
                (ok,) = await store.writes.apply([change])
                if ok:
                    return
            run_log.info("job %s: a late run by %s was not recorded in the log", job.id, pod)
        except Exception:
            run_log.exception("job %s: recording a redelivery failed", job.id)

    def log_run(
        self,
        job: Job,
        label: OutcomeLabel,
        duration_ms: float,
        attempts: int,
        error: str | None,
        exc: BaseException | None = None,
        failure: Mapping[str, Any] | None = None,
    ) -> None:
        """The run line and observers; a failed run's line carries its exception
        (`exc_info`) and its failure record's attempt, reason and class."""
        observers = self.engine.observers
        if not self._recorded(label):
            return  # the hot path builds no record nobody reads
        now = self.engine.clock.now()
        record = RunRecord(job, label.value, duration_ms, attempts, error, now, exc, failure)
        log_run_line(record)
        if observers.observers:
            observers.run_finished(record)

    def dead(self, job: Job, reason: str, error: str | None) -> None:
        """The DEAD alert: an error-level line and `observers.job_dead` (every DEAD)."""
        run_log.error(
            "job dead alert code=%s target=%s dedupe_key=%s attempts=%d reason=%s error=%s",
            job.code,
            job.target,
            job.dedupe_key,
            job.attempts,
            reason,
            error,
            extra={
                "job_id": job.id,
                "code": job.code,
                "target": job.target,
                "dedupe_key": job.dedupe_key,
                "attempts": job.attempts,
                "reason": reason,
                "error": error,
                "result": "dead",
            },
        )
        self.engine.observers.job_dead(job, reason, error)


def _reason_of(outcome: Outcome) -> str:
    for event in outcome.change.events:
        reason = event.data.get("reason")
        if isinstance(reason, str):
            return reason
    return outcome.label.value


def _failure_of(outcome: Outcome) -> Mapping[str, Any] | None:
    """The failure record the outcome's events carry, if any."""
    for event in outcome.change.events:
        failure = event.data.get("failure")
        if isinstance(failure, Mapping):
            return failure
    return None


def _attempts_of(outcome: Outcome, job: Job) -> int:
    for event in outcome.change.events:
        attempts = event.data.get("attempts")
        if isinstance(attempts, int):
            return attempts
    return job.attempts
