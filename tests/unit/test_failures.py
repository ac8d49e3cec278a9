"""The failure record: what a failed run leaves in its outcome event (class, message,
bounded traceback, attempt, duration, reason), covered by the hash chain; engine-decided
endings named; old events without it still replay and verify; attempts count runs."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from jobledger.admin.jobs import JobAdmin
from jobledger.core.clock import FakeClock
from jobledger.domain import job_outcomes, jobs
from jobledger.domain.chain import verify_chain
from jobledger.domain.errors import DeadNow, RunTimedOut, TargetUnreachable
from jobledger.domain.events import SYSTEM, EventType, new_event
from jobledger.domain.failures import (
    MAX_TRACEBACK_CHARS,
    FailureReason,
    attempt_history,
    cut_traceback,
    qualified_class,
    reason_of,
)
from jobledger.domain.job_outcomes import OutcomePolicy, Result, RunResult
from jobledger.domain.jobs import DeliveryMode, Job, NewJob, Stamp
from jobledger.projections.audit import verify_log
from jobledger.projections.replay import replay
from jobledger.reactors.outcome import classify
from jobledger.storage.port import Store
from tests.builders import T0, a_job, make_engine

POLICY = OutcomePolicy(DeliveryMode.AT_LEAST_ONCE, 3, (1.0, 2.0))


def _stamp(minutes: int = 0) -> Stamp:
    return Stamp(T0 + timedelta(minutes=minutes), SYSTEM, None)


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def _deep(n: int) -> None:
    if n == 0:
        raise KeyError("missing")
    _deeper(n - 1)  # two functions in turn: no "previous line repeated" collapse


def _deeper(n: int) -> None:
    _deep(n)


class Declined(Exception):
    pass


def test_reasons_of_exceptions() -> None:
    assert reason_of(KeyError("x")) == FailureReason.HANDLER_ERROR
    assert reason_of(RunTimedOut("slow", 30)) == FailureReason.TIMEOUT
    assert reason_of(TargetUnreachable()) == FailureReason.UNREACHABLE
    assert reason_of(DeadNow()) == FailureReason.DEAD_NOW

    class JobTimeout(Exception):  # another branch's class naming its reason
        failure_reason = "timeout"

    assert reason_of(JobTimeout()) == FailureReason.TIMEOUT
    assert qualified_class(KeyError("x")) == "builtins.KeyError"
    assert qualified_class(Declined()) == f"{__name__}.Declined"


def test_a_failed_run_records_class_message_traceback_attempt_duration() -> None:
    run = classify(_raised(KeyError("missing")), 12.5)
    outcome = job_outcomes.decide_outcome(a_job(), run, POLICY, _stamp())
    (event,) = outcome.change.events
    assert event.type == EventType.JOB_FAILED
    failure = event.data["failure"]
    assert failure["reason"] == "handler_error"
    assert failure["error_class"] == "builtins.KeyError"
    assert failure["message"] == "'missing'"
    assert failure["attempt"] == 1 and failure["duration_ms"] == 12.5
    assert "_raised" in failure["traceback"] and failure["traceback"].endswith(
        "KeyError: 'missing'\n"
    )
    assert event.data["error"] == "'missing'"  # the old field stays


def test_a_timed_out_run_is_an_attempt_spent_with_reason_timeout() -> None:
    run = classify(_raised(RunTimedOut("past", 30)), 30000.0)
    assert run.result == Result.TIMED_OUT
    outcome = job_outcomes.decide_outcome(a_job(), run, POLICY, _stamp())
    assert outcome.change.events[0].data["failure"]["reason"] == "timeout"
    assert outcome.change.row.attempts == 1


def test_a_successful_run_captures_nothing() -> None:
    run = classify(None, 3.0)
    assert (run.error_class, run.traceback, run.reason, run.exc) == (None, None, None, None)


def test_the_traceback_is_bounded_and_keeps_the_innermost_frames() -> None:
    exc: BaseException = RecursionError()
    try:
        _deep(200)
    except KeyError as deep:
        exc = deep
    run = classify(exc, 1.0)
    text = run.traceback
    assert text is not None and len(text) <= MAX_TRACEBACK_CHARS
    assert text.startswith("Traceback (most recent call last):\n  [... ")
    assert "earlier frames and lines left out" in text
    assert text.endswith("KeyError: 'missing'\n")
    # cut at a frame boundary: every frame kept is whole (its file line and source line)
    body = text.split("left out ...]\n", 1)[1]
    assert body.startswith('  File "')
    assert 'raise KeyError("missing")' in text  # the innermost frame is there


def test_cut_traceback_keeps_whole_chunks() -> None:
    chunks = ["Traceback (most recent call last):\n"] + [f"  frame {n}\n" * 40 for n in range(50)]
    chunks.append("ValueError: x\n")
    text = cut_traceback(chunks, limit=2000)
    assert len(text) <= 2000
    kept = [c for c in chunks[1:-1] if c in text]
    assert kept == chunks[len(chunks) - 1 - len(kept) : -1]  # the last ones, whole
    assert cut_traceback(["T\n", "a\n"], limit=2000) == "T\na\n"


def test_three_failures_then_success_count_four_runs() -> None:
    job: Job | None = a_job()
    events = []
    for n in range(3):
        assert job is not None
        run = classify(_raised(ValueError(f"try {n}")), 1.0)
        outcome = job_outcomes.decide_outcome(
            job, run, dataclasses.replace(POLICY, max_attempts=5), _stamp(n)
        )
        events += outcome.change.events
        job = outcome.change.row
    assert job is not None and job.attempts == 3  # three runs happened, three shown
    done = job_outcomes.decide_outcome(job, RunResult(Result.OK), POLICY, _stamp(9))
    assert done.change.events[0].data["attempts"] == 4
    history = attempt_history([*events, *done.change.events])
    assert [h["attempt"] for h in history] == [1, 2, 3, 4]
    assert [h["outcome"] for h in history] == ["failed"] * 3 + ["succeeded"]


def test_dead_now_counts_its_run() -> None:
    job = dataclasses.replace(a_job(), attempts=2)
    outcome = job_outcomes.decide_outcome(job, classify(_raised(DeadNow()), 1.0), POLICY, _stamp())
    assert outcome.change.row.attempts == 3
    assert outcome.change.events[0].data["failure"]["reason"] == "dead_now"


def test_engine_endings_are_named() -> None:
    long_job = a_job(lane=jobs.Lane.LONG)
    dead, again = (
        job_outcomes.reclaim_expired(
            long_job,
            mode,
            token="t",
            pod="p",
            lease=timedelta(minutes=1),
            exclusive=False,
            stamp=_stamp(),
        )
        for mode in (DeliveryMode.AT_MOST_ONCE, DeliveryMode.AT_LEAST_ONCE)
    )
    data = dead.change.events[0].data
    assert data["failure"]["reason"] == "lease_expired"
    assert data["error"] and dead.change.row.last_error  # the alert's error= names it
    assert again.change.events[0].data["failure"]["reason"] == "lease_expired"
    taken = job_outcomes.take_over(a_job(), DeliveryMode.AT_LEAST_ONCE, _stamp())
    assert taken.change.events[0].data["failure"]["reason"] == "taken_over"
    died = job_outcomes.claim_of_dead_pod(long_job, DeliveryMode.AT_MOST_ONCE, _stamp())
    assert died.change.events[0].data["failure"]["reason"] == "pod_died"
    unknown = job_outcomes.decide_outcome(
        a_job(),
        RunResult(Result.UNKNOWN, "lost"),
        dataclasses.replace(POLICY, delivery_mode=DeliveryMode.AT_MOST_ONCE),
        _stamp(),
    )
    assert unknown.change.events[0].data["failure"]["reason"] == "outcome_unknown"


def test_the_failure_record_is_hashed() -> None:
    job = a_job()
    enqueued = new_event(
        job.stream, 1, EventType.JOB_ENQUEUED, {}, at=T0, actor=None, trace_id=None, prev_hash=""
    )
    job = dataclasses.replace(job, last_hash=enqueued.hash)
    run = classify(_raised(KeyError("missing")), 1.0)
    (event,) = job_outcomes.decide_outcome(job, run, POLICY, _stamp()).change.events
    assert verify_chain([enqueued, event]) == []
    failure = {**event.data["failure"], "traceback": "edited"}
    edited = dataclasses.replace(event, data={**event.data, "failure": failure})
    assert verify_chain([enqueued, edited]) == [
        f"{job.stream} v2 (position None): content does not match its hash"
    ]


def test_an_old_event_without_the_record_replays_verifies_and_shows_unknown_class() -> None:
    """A JobFailed as the engine wrote it before failure records: replay folds it, the
    chain verifies, the history shows it with an unknown class."""
    job = a_job()
    first = new_event(
        job.stream,
        1,
        EventType.JOB_ENQUEUED,
        {
            "id": job.id, "code": job.code, "target": job.target, "lane": "fast",
            "key": job.key, "partition": job.partition, "version": 0, "payload": None,
            "dedupe_key": job.dedupe_key, "headers": None, "run_at": None, "traceparent": None,
        },
        at=T0, actor=None, trace_id=None, prev_hash="",
    )  # fmt: skip
    old = new_event(
        job.stream,
        2,
        EventType.JOB_FAILED,
        {"attempts": 1, "error": "'missing'", "next_run_at": "2026-03-02T09:01:00.000Z"},
        at=T0,
        actor=SYSTEM,
        trace_id=None,
        prev_hash=first.hash,
    )
    assert verify_chain([first, old]) == []
    row = jobs.fold([first, old])
    assert row is not None and row.attempts == 1 and row.last_error == "'missing'"
    (entry,) = attempt_history([first, old])
    assert entry["error_class"] is None and entry["reason"] == "handler_error"
    assert entry["recorded"] is False
    assert entry["message"] == "'missing'" and entry["attempt"] == 1


def test_the_history_is_bounded() -> None:
    job: Job | None = a_job()
    events = []
    for n in range(60):
        assert job is not None
        run = RunResult(Result.ANSWERED, f"e{n}")
        outcome = job_outcomes.decide_outcome(
            job, run, dataclasses.replace(POLICY, max_attempts=100), _stamp(n)
        )
        events += outcome.change.events
        job = outcome.change.row
    history = attempt_history(events, limit=50)
    assert len(history) == 50 and history[-1]["attempt"] == 60


async def test_old_and_new_shapes_replay_verify_and_show_on_every_store(
    store: Store, clock: FakeClock
) -> None:
    """A job whose first failure was written in the old shape (no record) and whose
    second carries one: replay finds the live rows equal to the log's fold, verify
    finds the chains whole, and the detail shows the old attempt with an unknown class."""
    engine = make_engine(store, clock)
    engine.targets.register("kafka:orders", "fast", _noop)
    async with engine.transaction() as tx:
        (done,) = await engine.enqueue_many([NewJob("kafka:orders", {"n": 1})], tx=tx)
    assert done.job_id is not None
    row = await store.admin.get_job(done.job_id)
    assert row is not None
    old = {"attempts": 1, "error": "'missing'", "next_run_at": "2026-03-02T09:01:00.000Z"}
    change = jobs.append_events(row, Stamp(clock.now(), SYSTEM, None), (EventType.JOB_FAILED, old))
    assert await store.writes.apply([change]) == [True]
    clock.advance(minutes=1)
    row = change.row
    run = classify(_raised(KeyError("missing")), 2.0)
    new = job_outcomes.decide_outcome(row, run, POLICY, Stamp(clock.now(), SYSTEM, None))
    assert await store.writes.apply([new.change]) == [True]

    assert (await replay(store)).ok
    assert (await verify_log(store)).problems == []
    detail = await JobAdmin(store, clock).detail(done.job_id)
    assert detail.job.attempts == 2
    first, second = detail.attempts
    assert (first["error_class"], first["reason"], first["attempt"]) == (None, "handler_error", 1)
    assert (second["error_class"], second["attempt"]) == ("builtins.KeyError", 2)


async def _noop(job: Job) -> None:
    return None


def test_a_run_given_back_by_a_stop_reads_as_stopped_in_the_history() -> None:
    """A stopping pod's give-back writes no failure record and spends no attempt; the
    history still names why that run ended."""
    given_back = new_event(
        "job:1",
        3,
        EventType.JOB_REQUEUED,
        {"reason": "stopped", "token": "t", "next_run_at": "2026-03-02T09:00:00.000Z"},
        at=T0,
        actor=SYSTEM,
        trace_id=None,
        prev_hash="",
    )
    [entry] = attempt_history([given_back])
    assert entry["outcome"] == "requeued"
    assert entry["reason"] == "stopped"
    assert entry["recorded"] is True
    assert entry["attempt"] is None
