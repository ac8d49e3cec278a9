"""The single-enqueue statement's parameters (storage/postgres/encode.one_params): every
column of a new row is sent, read from the event, or left out as a new row has it, and a
change whose row is not what its JobEnqueued makes goes to the general statement."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from jobledger.domain import job_commands
from jobledger.domain.events import Actor
from jobledger.domain.jobs import JOB_FIELDS, Change, JobStatus, Lane, NewJob, Stamp
from jobledger.storage.postgres import encode, sql
from jobledger.storage.postgres.listen import parse_wake

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def opening(**spec: object) -> Change:
    return job_commands.enqueued(
        job_id="a" * 32,
        spec=NewJob("kafka:t", **spec),  # type: ignore[arg-type]
        code="code-1",
        lane=Lane.FAST,
        partition=7,
        dedupe_key="d-1",
        stamp=Stamp(NOW, Actor(id="u", via="api"), "t" * 32),
        traceparent="00-" + "t" * 32 + "-" + "s" * 16 + "-01",
    )


def test_every_column_of_a_new_row_is_sent_read_from_the_event_or_left_out() -> None:
    sent = set(sql.ONE_JOB_FIELDS)
    from_event = {c for c, _ in sql.ROW_FROM_EVENT}
    left_out = set(encode.NEW_ROW)
    assert not sent & from_event and not sent & left_out and not from_event & left_out
    assert sent | from_event | left_out == {*JOB_FIELDS, "order_key"}
    # opens_one compares them in this order with the event's dedupe key, time (twice),
    # version, hash, trace id and actor
    assert [c for c, _ in sql.ROW_FROM_EVENT] == [
        "dedupe_key",
        "created_at",
        "updated_at",
        "stream_version",
        "last_hash",
        "trace_id",
        "actor",
    ]
    built = sql.build("s")
    params = encode.one_params(opening(payload={"n": 1}, key="k"))
    for text in (built.enqueue_one.decode(), built.enqueue_one_dedupe.decode()):
        assert text.count("%s") == len(params)
    # the fixed columns of a stream's first event are constants, the rest are sent
    assert set(sql.ONE_EVENT_FIELDS) == {
        "stream",
        "data",
        "at",
        "actor",
        "trace_id",
        "hash",
        "dedupe_key",
    }


def test_only_a_callers_dedupe_key_can_collide_so_only_it_gets_on_conflict() -> None:
    built = sql.build("s")
    assert "ON CONFLICT" not in built.enqueue_one.decode()
    assert "ON CONFLICT DO NOTHING" in built.enqueue_one_dedupe.decode()
    own = opening(payload=None)
    assert encode.has_own_dedupe_key(own)  # opening() names the dedupe key "d-1"
    fresh = job_commands.enqueued(
        job_id="b" * 32,
        spec=NewJob("kafka:t"),
        code="kafka:t",
        lane=Lane.FAST,
        partition=7,
        dedupe_key="b" * 32,
        stamp=Stamp(NOW),
    )
    assert encode.opens_one(fresh) and not encode.has_own_dedupe_key(fresh)


@pytest.mark.parametrize(
    "spec",
    [
        {"payload": {"n": 1}, "key": "k"},
        {"payload": None},
        {"payload": [1, "ü", None], "headers": {"h": "v"}, "version": 3},
        {"payload": {"n": 1}, "run_at": NOW + timedelta(seconds=5)},
    ],
)
def test_the_hint_carries_the_row_and_the_parameters_the_row(spec: dict[str, object]) -> None:
    change = opening(**spec)
    assert encode.opens_one(change)
    params = encode.one_params(change)
    assert parse_wake(params[-1]).jobs == (change.row,)
    sent = len(sql.ONE_EVENT_FIELDS)
    event = dict(zip(sql.ONE_EVENT_FIELDS, params[:sent], strict=True))
    assert (event["stream"], event["hash"]) == (change.stream, change.events[0].hash)
    job = dict(zip(sql.ONE_JOB_FIELDS, params[sent:-1], strict=True))
    row = change.row
    assert (job["id"], job["code"], job["lane"], job["key"]) == (row.id, "code-1", "fast", row.key)
    assert job["next_run_at"] == row.next_run_at and job["order_key"] == row.order_key.encode()
    assert job["headers"] == (None if row.headers is None else '{"h":"v"}')


@pytest.mark.parametrize(
    "change",
    [
        dataclasses.replace(opening(), row=dataclasses.replace(opening().row, attempts=2)),
        dataclasses.replace(
            opening(), row=dataclasses.replace(opening().row, status=JobStatus.DEAD)
        ),
        dataclasses.replace(
            opening(), row=dataclasses.replace(opening().row, updated_at=NOW + timedelta(1))
        ),
        dataclasses.replace(opening(), row=dataclasses.replace(opening().row, trace_id=None)),
        dataclasses.replace(opening(), row=dataclasses.replace(opening().row, last_hash="x")),
        # an event the statement's constants would not write as it is
        dataclasses.replace(
            opening(), events=(dataclasses.replace(opening().events[0], version=2),)
        ),
        dataclasses.replace(
            opening(), events=(dataclasses.replace(opening().events[0], prev_hash="p"),)
        ),
    ],
)
def test_a_row_that_is_not_what_its_event_makes_goes_to_the_general_statement(
    change: Change,
) -> None:
    assert encode.opens_job(change) and not encode.opens_one(change)
