"""The generated `evolve` of domain/jobs.py (the fold's `dataclasses.replace`): its text
is what its docstring shows, and it builds what the plain constructor builds."""

from __future__ import annotations

import dataclasses
import inspect
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobledger.domain import job_commands, jobs
from jobledger.domain.events import Actor
from jobledger.domain.jobs import JOB_FIELDS, Job, JobStatus, Lane, NewJob, Stamp

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def _job() -> Job:
    change = job_commands.enqueued(
        job_id="j1",
        spec=NewJob("kafka:t", {"n": 1}, key="k", version=3, headers={"h": "v"}),
        code="code",
        lane=Lane.FAST,
        partition=7,
        dedupe_key="d1",
        stamp=Stamp(T0, Actor("u", "http"), "trace"),
    )
    assert isinstance(change.row, Job)
    return change.row


#: a value of the right type for every field, different from `_job()`'s
OTHER: dict[str, Any] = {
    "id": "j2",
    "code": "other",
    "target": "kafka:u",
    "lane": Lane.LONG,
    "key": None,
    "partition": 9,
    "version": 4,
    "payload": [1, 2],
    "dedupe_key": "d2",
    "status": JobStatus.DEAD,
    "attempts": 5,
    "next_run_at": T0 + timedelta(minutes=1),
    "created_at": T0 - timedelta(days=1),
    "updated_at": T0 + timedelta(seconds=1),
    "stream_version": 9,
    "last_hash": "abc",
    "headers": None,
    "trace_id": "t2",
    "traceparent": "00-x",
    "actor": None,
    "last_error": "boom",
    "dead_reason": "max_attempts",
    "claimed_by": "pod",
    "claim_token": "tok",
    "lease_until": T0 + timedelta(minutes=5),
    "inflight_token": "mark",
    "running_code": "code",
    "closed_at": T0,
}


def test_the_record_is_the_one_list_of_fields() -> None:
    assert tuple(f.name for f in dataclasses.fields(Job)) == JOB_FIELDS
    assert set(OTHER) == set(JOB_FIELDS)
    assert set(jobs.TRANSITION_FIELDS) <= set(JOB_FIELDS)


def test_the_generated_text_is_one_argument_per_field_in_order() -> None:
    source = jobs.evolve_source()
    lines = source.splitlines()
    assert lines[:2] == ["def evolve(job, c):", "    return Job("]
    assert lines[2:-1] == [f"        c[{n!r}] if {n!r} in c else job.{n}," for n in JOB_FIELDS]
    assert lines[-1] == "    )"
    assert inspect.getsource(jobs._evolve) == source  # readable at run time too


@pytest.mark.parametrize("name", JOB_FIELDS)
def test_evolve_changes_one_field_as_the_plain_constructor_does(name: str) -> None:
    job = _job()
    assert jobs._evolve(job, {name: OTHER[name]}) == dataclasses.replace(job, **{name: OTHER[name]})


def test_evolve_with_every_field_or_none_equals_the_plain_constructor() -> None:
    job = _job()
    assert jobs._evolve(job, {}) == job
    assert jobs._evolve(job, dict(OTHER)) == Job(**OTHER)
