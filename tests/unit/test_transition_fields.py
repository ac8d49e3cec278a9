"""Every transition changes only `TRANSITION_FIELDS`: the PostgreSQL adapter rewrites
only those on an update, so a transition that touched an identity field would be lost."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime, timedelta

from jobledger.domain import job_commands, job_outcomes
from jobledger.domain.events import SYSTEM
from jobledger.domain.job_outcomes import OutcomePolicy, Result, RunResult
from jobledger.domain.jobs import TRANSITION_FIELDS, DeliveryMode, Job, Lane, NewJob, Stamp

AT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
STAMP = Stamp(AT + timedelta(seconds=1), SYSTEM, "trace")
IDENTITY = [f.name for f in fields(Job) if f.name not in TRANSITION_FIELDS]


def _pending(lane: Lane = Lane.FAST) -> Job:
    change = job_commands.enqueued(
        job_id="0193abcd12347abc9def0123456789ab",
        spec=NewJob("kafka:t", {"n": 1}, key="k", version=2, headers={"h": "v"}),
        code="kafka:t",
        lane=lane,
        partition=9,
        dedupe_key="d",
        stamp=Stamp(AT, SYSTEM, "t"),
        traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
    )
    assert isinstance(change.row, Job)
    return change.row


def _rows_after_every_transition() -> list[tuple[str, Job, Job]]:
    pending = _pending()
    long_pending = _pending(Lane.LONG)
    marked = job_commands.dispatch(pending, token="tok", pod="p", stamp=STAMP).row
    claimed = job_commands.claim(
        long_pending, token="c", pod="p", lease=timedelta(minutes=5), exclusive=True, stamp=STAMP
    ).row
    out: list[tuple[str, Job, Job]] = [
        ("dispatch", pending, marked),
        ("claim", long_pending, claimed),
    ]
    out.append(
        (
            "renew",
            claimed,
            job_commands.renew_lease(claimed, lease=timedelta(minutes=5), stamp=STAMP).row,
        )
    )
    policy = OutcomePolicy(DeliveryMode.AT_LEAST_ONCE, 2, (1.0,))
    for result in Result:
        run = RunResult(result, error="boom", duration_ms=1.0)
        for base in (marked, claimed):
            row = job_outcomes.decide_outcome(base, run, policy, STAMP).change.row
            if isinstance(row, Job):
                out.append((f"outcome {result}", base, row))
    for mode in DeliveryMode:
        row = job_outcomes.take_over(marked, mode, STAMP).change.row
        if isinstance(row, Job):
            out.append((f"take_over {mode}", marked, row))
        row = job_outcomes.reclaim_expired(
            claimed,
            mode,
            token="c2",
            pod="q",
            lease=timedelta(minutes=5),
            exclusive=True,
            stamp=STAMP,
        ).change.row
        if isinstance(row, Job):
            out.append((f"reclaim {mode}", claimed, row))
    dead = job_outcomes.decide_outcome(
        marked, RunResult(Result.DEAD_NOW, error="x"), policy, STAMP
    ).change.row
    assert isinstance(dead, Job)
    out.append(("retry", dead, job_commands.retry(dead, STAMP).row))
    return [(name, before, after) for name, before, after in out if isinstance(after, Job)]


def test_no_transition_changes_an_identity_field() -> None:
    checked = _rows_after_every_transition()
    assert len(checked) > 10
    for name, before, after in checked:
        for field in IDENTITY:
            assert getattr(after, field) == getattr(before, field), (name, field)


def test_the_transition_fields_are_job_fields() -> None:
    names = {f.name for f in fields(Job)}
    assert set(TRANSITION_FIELDS) <= names
    assert "id" not in TRANSITION_FIELDS and "payload" not in TRANSITION_FIELDS
