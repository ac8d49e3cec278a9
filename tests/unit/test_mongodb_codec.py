"""Every document and filter the MongoDB adapter sends survives BSON with the store's codec
options (tz-aware UTC dates), and the rows read back are the rows written."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime, timedelta
from typing import Any

import bson
import pytest
from hypothesis import given, settings

from jobledger.core.handlers import PayloadType
from jobledger.domain import job_commands, jobs
from jobledger.domain.enqueue_rules import check_new_job, plain_payload
from jobledger.domain.jobs import JobStatus, Lane, NewJob
from jobledger.domain.schedules.row import MissedSlotPolicy, Schedule
from jobledger.storage.mongodb import builders as b
from jobledger.storage.mongodb import indexes as ix
from jobledger.storage.mongodb import watch
from jobledger.storage.mongodb.codec import CODEC
from jobledger.storage.port import JobFilter
from tests.contract.writes.test_payload_codec import ORDERS, PAYLOADS, Order
from tests.unit.test_mongodb_builders import NOW, STAMP, _new


def _round_trip(doc: Any) -> Any:
    return bson.decode(bson.encode({"v": doc}), codec_options=CODEC)["v"]


def _plain(value: Any) -> Any:
    """What BSON gives back: tuples become lists."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _schedule() -> Schedule:
    return Schedule(
        code="nightly",
        cron="0 2 * * *",
        timezone="Europe/Berlin",
        missed_slot_policy=MissedSlotPolicy.RUN_ONCE,
        runs_per_slot=3,
        enabled=True,
        cron_override=None,
        next_run_at=NOW,
        last_run_at=None,
        last_skipped_at=None,
        created_at=NOW,
        updated_at=NOW,
        stream_version=1,
        last_hash="h",
    )


UNTIL = NOW + timedelta(seconds=30)
#: builders that read what the server returns (or name things); they send nothing
READERS = {
    "job_from_doc",
    "schedule_from_doc",
    "event_from_doc",
    "event_id",
    "collection_of",
    "row_id",
    "checkpoint_from_doc",
}


def _sent_by_builder() -> dict[str, list[Any]]:
    """Every builder of builders.py that makes a document the store sends, each with
    arguments covering its branches (the workload test below adds every real row,
    event and update)."""
    change = _new()
    claimed = job_commands.dispatch(change.row, token="t", pod="p", stamp=STAMP)
    exclusive = job_commands.claim(
        _new(target="schedule:nightly", lane=Lane.LONG).row,
        token="t",
        pod="p",
        lease=timedelta(minutes=5),
        exclusive=True,
        stamp=STAMP,
    )
    schedule_change = jobs.Change("schedule:nightly", 1, (), _schedule())
    return {
        "by_id": [b.by_id("job-1"), b.by_id(7)],
        "fields": [b.fields(), b.fields("running_code"), b.fields("stream", "version")],
        "job_doc": [b.job_doc(change.row), b.job_doc(exclusive.row)],
        "schedule_doc": [b.schedule_doc(_schedule())],
        "event_doc": [b.event_doc(e) for e in (*change.events, *claimed.events)],
        "row_document": [b.row_document(change), b.row_document(schedule_change)],
        "row_update": [b.row_update(claimed), b.row_update(schedule_change)],
        "cas_query": [b.cas_query(claimed)],
        "running_code_conflict_query": [b.running_code_conflict_query(exclusive)],
        "dedupe_query": [b.dedupe_query(["a", "b"])],
        "stream_exists_query": [b.stream_exists_query(["job:x"])],
        "stream_query": [b.stream_query("job:x")],
        "events_at_query": [b.events_at_query([("job:x", 1), ("job:y", 2)])],
        "read_log_query": [b.read_log_query(1, 9)],
        "log_newest_query": [b.log_newest_query(None), b.log_newest_query(12)],
        "pending_query": [b.pending_query()],
        "position_update": [b.position_update("job:x/1", 3)],
        "step_start": [b.step_start()],
        "step_finish": [b.step_finish(3)],
        "highest_position_query": [b.highest_position_query()],
        "seed_high_water": [b.seed_high_water(41)],
        "fast_pending_query": [b.fast_pending_query(3, None), b.fast_pending_query(3, "k")],
        "long_candidates_query": [b.long_candidates_query(NOW)],
        "running_codes_query": [b.running_codes_query(NOW)],
        "inflight_query": [b.inflight_query(3)],
        "next_due_query": [b.next_due_query([1, 2], Lane.FAST), b.next_due_query([], Lane.LONG)],
        "list_jobs_query": [
            b.list_jobs_query(JobFilter()),
            b.list_jobs_query(JobFilter(status=JobStatus.DEAD, target="t", code="c", key="k")),
        ],
        "list_jobs_page": [
            b.list_jobs_page({}, before="x"),
            b.list_jobs_page({"status": "DEAD"}, after="y"),
            b.list_jobs_page({}),
        ],
        "closed_streams_pipeline": [b.closed_streams_pipeline(NOW, 10)],
        "delete_streams_query": [b.delete_streams_query(["job:x"])],
        "seed_partition": [b.seed_partition(1)],
        "take_partition": [b.take_partition(1, "p", NOW, UNTIL)],
        "renew_partition": [b.renew_partition("p", 1, NOW, UNTIL)],
        "lease_fence": [b.lease_fence("p", NOW, 1)],
        "release_partitions": [b.release_partitions("p", [1, 0])],
        "heartbeat": [b.heartbeat("p", NOW), b.heartbeat("p", NOW, {"kafka:a.b$c": NOW})],
        "live_workers_query": [b.live_workers_query(NOW)],
        "live_pauses_query": [b.live_pauses_query(NOW)],
        "checkpoint_update": [
            b.checkpoint_update(3, {"s": [1, 2]}),
            b.checkpoint_update(0, None, {"_data": "826A1B"}),
        ],
    }


def _sent_elsewhere() -> list[Any]:
    """The documents the store sends that the change-stream watcher and the index
    migrations build."""
    sent: list[Any] = [
        watch.change_stream_pipeline(),
        ix.dead_ttl_spec(60).options,
        ix.ttl_change(60),
        ix.applied_update(2),
    ]
    sent += [(spec.keys, spec.options) for m in ix.MIGRATIONS for spec in m.create]
    return sent


def _everything_sent() -> list[Any]:
    return [doc for docs in _sent_by_builder().values() for doc in docs] + _sent_elsewhere()


def test_every_builder_that_makes_a_document_is_round_tripped() -> None:
    """A builder added to builders.py without an entry here fails this test."""
    public = {
        name
        for name, value in vars(b).items()
        if inspect.isfunction(value) and value.__module__ == b.__name__ and not name.startswith("_")
    }
    assert set(_sent_by_builder()) == public - READERS
    assert public >= READERS


@pytest.mark.parametrize("doc", _everything_sent(), ids=lambda d: str(d)[:40])
def test_every_document_survives_bson_with_the_store_codec(doc: Any) -> None:
    assert _round_trip(_plain(doc)) == _plain(doc)


def test_rows_and_events_read_back_equal_with_utc_datetimes() -> None:
    change = _new()
    job = b.job_from_doc(_round_trip(b.job_doc(change.row)))
    assert job == change.row
    assert job.created_at.tzinfo is not None and job.created_at.utcoffset() == timedelta(0)
    event = b.event_from_doc(_round_trip(b.event_doc(change.events[0])))
    assert event == change.events[0] and event.at.tzinfo is UTC
    assert b.schedule_from_doc(_round_trip(b.schedule_doc(_schedule()))) == _schedule()
    claimed = job_commands.dispatch(change.row, token="t", pod="p", stamp=STAMP)
    stored = _round_trip({**b.job_doc(change.row), **b.row_update(claimed)["$set"]})
    assert b.job_from_doc(stored) == claimed.row


def test_codec_gives_utc_whatever_the_clients_timezone() -> None:
    naive_client_doc = bson.encode({"at": datetime(2026, 1, 1, 12, 0)})
    assert bson.decode(naive_client_doc, codec_options=CODEC)["at"] == datetime(
        2026, 1, 1, 12, 0, tzinfo=UTC
    )


# --- the payload codec through BSON ------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(payload=PAYLOADS, order=ORDERS)
def test_a_payload_of_standard_types_survives_bson_and_comes_back_typed(
    payload: Any, order: Order
) -> None:
    """What the MongoDB store writes for a payload of standard types (the codec's JSON,
    in the job document and the event) reads back as that JSON, and as the typed
    payload for a target that declares it: the contract suite's check, without a
    server (tests/contract/writes/test_payload_codec.py)."""
    typed = PayloadType(Order)
    for value, expected in ((payload, payload), (typed.encode(order), order)):
        item = check_new_job(NewJob("kafka:t", value, key="k"), 1 << 20)
        change = job_commands.enqueued(
            job_id="0" * 31 + "1",
            spec=item,
            code="c",
            lane=Lane.FAST,
            partition=0,
            dedupe_key="d",
            stamp=STAMP,
            traceparent=None,
        )
        row = b.job_from_doc(_round_trip(b.job_doc(change.row)))
        event = b.event_from_doc(_round_trip(b.event_doc(change.events[0])))
        assert row.payload == _plain(plain_payload("kafka:t", value))
        assert event.data["payload"] == row.payload
        if expected is order:
            assert typed.decode(row.payload) == order
