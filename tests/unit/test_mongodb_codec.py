"""Every document and filter the MongoDB adapter sends survives BSON with the store's codec
options (tz-aware UTC dates), and the rows read back are the rows written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import bson
import pytest

from jobledger.domain import job_commands
from jobledger.domain.jobs import Lane
from jobledger.domain.schedule_row import MissedSlotPolicy, Schedule
from jobledger.storage.mongodb import builders as b
from jobledger.storage.mongodb import indexes as ix
from jobledger.storage.mongodb import watch
from jobledger.storage.mongodb.codec import CODEC
from jobledger.storage.port import JobFilter
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


def _everything_sent() -> list[Any]:
    change = _new()
    claimed = job_commands.dispatch(change.row, token="t", pod="p", stamp=STAMP)
    until = NOW + timedelta(seconds=30)
    sent: list[Any] = [
        b.job_doc(change.row),
        b.event_doc(change.events[0]),
        b.schedule_doc(_schedule()),
        b.row_update(claimed),
        b.cas_query(claimed),
        b.running_code_conflict_query(claimed),
        b.dedupe_query(["a"]),
        b.stream_exists_query(["job:x"]),
        b.stream_query("job:x"),
        b.events_at_query([("job:x", 1)]),
        b.read_log_query(1, 9),
        b.pending_query(),
        b.position_update("job:x/1", 3),
        b.step_start(),
        b.step_finish(3),
        b.fast_pending_query(3, "k"),
        b.long_candidates_query(NOW),
        b.running_codes_query(NOW),
        b.inflight_query(3),
        b.next_due_query([1, 2], Lane.FAST),
        b.list_jobs_query(JobFilter(target="kafka:t")),
        b.list_jobs_page({}, before="x"),
        b.closed_streams_pipeline(NOW, 10),
        b.delete_streams_query(["job:x"]),
        b.seed_partition(1),
        b.take_partition(1, "p", NOW, until),
        b.renew_partition("p", 1, NOW, until),
        b.lease_fence("p", NOW, 1),
        b.release_partitions("p", [1]),
        b.heartbeat("p", NOW),
        b.live_workers_query(NOW),
        b.checkpoint_update(3, {"s": [1, 2]}, {"_data": "tok"}),
        watch.change_stream_pipeline(),
        ix.dead_ttl_spec(60).options,
        ix.ttl_change(60),
    ]
    sent += [(spec.keys, spec.options) for m in ix.MIGRATIONS for spec in m.create]
    return sent


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
