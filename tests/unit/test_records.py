"""fast_init: the same constructor as the dataclass's, only quicker."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from jobledger.domain.events import SYSTEM, Event
from jobledger.domain.jobs import Change, Job, JobStatus, Lane, Outcome, Result, RunResult, Stamp
from jobledger.domain.records import fast_init

AT = datetime(2026, 11, 29, tzinfo=UTC)


def test_arguments_defaults_and_factories_are_the_dataclasses() -> None:
    event = Event("job:x", 1, "JobEnqueued", {"a": 1}, AT, SYSTEM, None, "", "h")
    assert event.position is None and event.hash == "h"
    assert (
        Event("job:x", 1, "JobEnqueued", {"a": 1}, AT, SYSTEM, None, "", "h", position=7).position
        == 7
    )
    change = Change("job:x", 0, (event,), None)
    assert (change.dedupe_key, change.partition) == (None, None)
    first, second = Outcome(change, "ok"), Outcome(change, "ok")
    assert first.extra == {} and first.extra is not second.extra  # a new dict each
    assert RunResult(Result.OK) == RunResult(result=Result.OK)
    assert Stamp(AT) == Stamp(at=AT, actor=None, trace_id=None)
    job = Job(
        "i", "c", "t", Lane.FAST, None, 1, 0, None, "d", JobStatus.PENDING, 0, AT, AT, AT, 1, "h"
    )
    assert job.closed_at is None and job.headers is None
    assert dataclasses.replace(job, attempts=2).attempts == 2


def test_instances_stay_frozen_and_bad_calls_still_fail() -> None:
    stamp = Stamp(AT)
    with pytest.raises(dataclasses.FrozenInstanceError):
        stamp.at = AT  # type: ignore[misc]
    with pytest.raises(TypeError):
        Stamp()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Stamp(AT, unknown=1)  # type: ignore[call-arg]


def test_a_class_it_cannot_copy_is_refused() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            pass

    with pytest.raises(TypeError, match="__post_init__"):
        fast_init(Checked)
