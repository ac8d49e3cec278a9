"""The PostgreSQL store's row decoding (`rows.job_from_text_row`, JSON columns as their
text) and its outcome encoding (`encode.encode`): the same values as the general forms
(`rows.job_from_row`, `rows.event_to_dict`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import orjson

from jobledger.domain.events import SYSTEM, Actor, new_event
from jobledger.domain.job_commands import enqueued
from jobledger.domain.jobs import Change, Job, Lane, NewJob, Stamp
from jobledger.storage import jsontext
from jobledger.storage.postgres import encode
from jobledger.storage.postgres.sql import JOB_COLUMNS, JOB_SELECT
from jobledger.storage.rows import (
    JOB_FIELDS,
    dedupe_key_of,
    event_to_dict,
    job_from_row,
    job_from_text_row,
    job_to_dict,
)

AT = datetime(2026, 11, 29, 14, 33, 18, 123000, tzinfo=UTC)
JSON_FIELDS = ("payload", "headers", "actor")


def _change(n: int, payload: Any = None, actor: Actor | None = SYSTEM) -> Change:
    change = enqueued(
        job_id=f"0193abcd-1234-7abc-9def-0123456789{n:02d}",
        spec=NewJob("kafka:t", payload, key=f"k{n}", version=n, headers={"h": f"v{n}"}),
        code="kafka:t",
        lane=Lane.FAST,
        partition=7,
        dedupe_key=f"d{n}",
        stamp=Stamp(AT, actor, "t"),
    )
    assert isinstance(change.row, Job)
    return change


def _text_row(job: Job, zone: Any = UTC, micro: int = 0) -> tuple[Any, ...]:
    """The row as `JOB_SELECT` reads it: JSON columns as text, times in `zone`."""
    record = job_to_dict(job)
    values = []
    for name in JOB_FIELDS:
        value = record[name]
        if name in JSON_FIELDS and value is not None:
            value = jsontext.dumps(value)
        elif isinstance(value, datetime):
            value = (value + timedelta(microseconds=micro)).astimezone(zone)
        values.append(value)
    return tuple(values)


def test_the_select_list_is_the_columns_with_json_as_text() -> None:
    names = [part.split(" AS ")[-1] for part in JOB_SELECT.split(", ")]
    assert ", ".join(names) == JOB_COLUMNS
    assert JOB_SELECT.count("::text") == len(JSON_FIELDS)


def test_a_text_row_decodes_as_the_row_of_python_values() -> None:
    payloads: list[Any] = [
        None,
        {"n": 1, "big": 2**70, "s": "Grüße 🚚"},
        [1, 2.5, None],
        "text",
        0,
    ]
    for n, payload in enumerate(payloads):
        for actor in (SYSTEM, None, Actor("u1", via="api", role="admin")):
            job = _change(n, payload, actor).row
            record = job_to_dict(job)
            back = job_from_text_row(_text_row(job))
            assert back == job == job_from_row([record[name] for name in JOB_FIELDS])
            assert type(back.payload) is type(job.payload)
            assert back.created_at.tzinfo is UTC


def test_times_in_another_zone_or_below_a_millisecond_go_through_as_utc() -> None:
    job = _change(1, {"n": 1}).row
    for zone in (ZoneInfo("Etc/UTC"), timezone(timedelta(hours=2)), UTC):
        for micro in (0, 456):
            back = job_from_text_row(_text_row(job, zone, micro))
            assert back == job
            assert back.next_run_at.tzinfo is UTC
            assert back.updated_at.tzinfo is UTC


def _reference(items: list[tuple[int, Change]]) -> list[dict[str, Any]]:
    """The events parameter as `encode` wrote it through `rows.event_to_dict`."""
    out: list[dict[str, Any]] = []
    for index, change in items:
        for n, event in enumerate(change.events):
            record = event_to_dict(event)
            record.pop("position")
            record["i"] = index
            record["slot"] = len(out)
            record["fst"] = (change.is_new or change.closed_stream) and n == 0
            record["dedupe_key"] = dedupe_key_of(event) or (
                change.dedupe_key if change.is_new and n == 0 else None
            )
            out.append(record)
    return out


def test_the_events_parameter_is_each_events_dict() -> None:
    opened = [_change(n, {"n": n}) for n in range(3)]
    items: list[tuple[int, Change]] = [(0, opened[0])]
    for k, change in enumerate(opened[1:], start=1):
        job: Job = change.row
        done = new_event(
            job.stream,
            2,
            "JobSucceeded",
            {"attempts": 0},
            at=AT,
            actor=SYSTEM,
            trace_id="t",
            prev_hash=job.last_hash,
        )
        failed = new_event(
            job.stream,
            3,
            "JobFailed",
            {"error": "x"},
            at=AT,
            actor=None,
            trace_id=None,
            prev_hash=done.hash,
        )
        closed = k == 2
        items.append(
            (k, Change(job.stream, 1, (done, failed), None, partition=7, closed_stream=closed))
        )
    params = encode.encode(items)
    assert orjson.loads(params["events"]) == orjson.loads(jsontext.dumps(_reference(items)))
