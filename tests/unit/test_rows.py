"""The plain-dict and tuple forms every adapter stores rows and events through."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from jobledger.domain.events import SYSTEM, new_event
from jobledger.domain.job_commands import enqueued
from jobledger.domain.jobs import TRANSITION_FIELDS, Job, Lane, NewJob, Stamp
from jobledger.storage.rows import (
    EVENT_FIELDS,
    JOB_FIELDS,
    event_from_dict,
    event_to_dict,
    job_from_dict,
    job_from_row,
    job_to_dict,
    job_transition_dict,
)

AT = datetime(2026, 11, 29, 14, 33, 18, 123000, tzinfo=UTC)


def _job() -> Job:
    change = enqueued(
        job_id="0193abcd-1234-7abc-9def-0123456789ab",
        spec=NewJob("kafka:t", {"n": 1}, key="k", version=3, headers={"h": "v"}),
        code="kafka:t",
        lane=Lane.FAST,
        partition=7,
        dedupe_key="d",
        stamp=Stamp(AT, SYSTEM, "t"),
    )
    assert isinstance(change.row, Job)
    return change.row


def test_an_event_round_trips_through_its_dict() -> None:
    event = new_event(
        "job:x", 1, "JobSucceeded", {"attempts": 0}, at=AT, actor=SYSTEM, trace_id="t", prev_hash=""
    )
    record = event_to_dict(event)
    assert tuple(record) == EVENT_FIELDS
    assert event_from_dict(record) == event


def test_a_job_round_trips_through_its_dict_and_its_row() -> None:
    job = _job()
    record = job_to_dict(job)
    assert tuple(record) == (*JOB_FIELDS, "order_key")
    assert job_from_dict(record) == job
    assert job_from_row([record[name] for name in JOB_FIELDS]) == job


def test_an_update_writes_the_id_and_the_transition_fields() -> None:
    job = _job()
    record = job_transition_dict(job)
    assert tuple(record) == ("id", *TRANSITION_FIELDS)
    assert record == {name: job_to_dict(job)[name] for name in record}


def test_a_row_in_any_zero_offset_zone_or_another_zone_comes_back_in_utc() -> None:
    job = _job()
    for zone in (ZoneInfo("Etc/UTC"), UTC, timezone(timedelta(hours=2))):
        values = [
            v.astimezone(zone) if isinstance(v, datetime) else v
            for v in (job_to_dict(job)[name] for name in JOB_FIELDS)
        ]
        back = job_from_row(values)
        assert back == job
        assert back.created_at.tzinfo is UTC
