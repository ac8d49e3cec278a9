"""The MongoDB adapter's documents, checked without a server.

Every filter, update, sort, pipeline and index the executor sends is built here; these
tests pin the shapes the server needs (operators, partial filters, sort keys) and that
round trips through the documents lose nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobledger.domain import job_commands, jobs
from jobledger.domain.events import Actor
from jobledger.domain.jobs import JobStatus, Lane, NewJob, Stamp
from jobledger.domain.policies import partition_of
from jobledger.domain.schedules.row import MissedSlotPolicy, Schedule
from jobledger.storage.mongodb import builders as b
from jobledger.storage.port import JobFilter
from jobledger.storage.rows import pauses_by_pod

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
STAMP = Stamp(NOW, Actor("alice", "http", "admin"), "trace-1")


def _new(target: str = "kafka:t", key: str | None = "DO-1", lane: Lane = Lane.FAST) -> jobs.Change:
    spec = NewJob(target, {"n": 1}, key=key, version=3, dedupe_key=f"d-{key}", headers={"h": "v"})
    return job_commands.enqueued(
        job_id="0" * 31 + "1",
        spec=spec,
        code="code",
        lane=lane,
        partition=partition_of(key, f"d-{key}"),
        dedupe_key=f"d-{key}",
        stamp=STAMP,
        traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
    )


def test_job_document_round_trip_keeps_every_field() -> None:
    change = _new()
    job = change.row
    doc = b.job_doc(job)
    assert doc["_id"] == job.id and "id" not in doc
    assert doc["order_key"] == "DO-1"
    assert doc["status"] == "PENDING" and doc["lane"] == "fast"
    assert doc["actor"] == {"id": "alice", "via": "http", "role": "admin"}
    assert b.job_from_doc(doc) == job


def test_keyless_job_orders_by_its_own_id() -> None:
    job = _new(key=None).row
    assert b.job_doc(job)["order_key"] == "\x00" + job.id


def test_event_document_is_pending_and_carries_dedupe_key_only_on_enqueue() -> None:
    change = _new()
    enq = b.event_doc(change.events[0])
    assert enq["_id"] == f"job:{change.row.id}/1" and enq["dedupe_key"] == "d-DO-1"
    assert enq["pending"] is True and "position" not in enq
    back = b.event_from_doc(enq)
    assert back == change.events[0] and back.position is None
    # what a sequencing step leaves: a position, no pending flag
    where, update = b.position_update(enq["_id"], 7)
    assert where == {"_id": enq["_id"], "pending": True}
    positioned = {**{k: v for k, v in enq.items() if k != "pending"}, **update["$set"]}
    assert b.event_from_doc(positioned).position == 7
    dispatched = job_commands.dispatch(change.row, token="tok", pod="pod-a", stamp=STAMP)
    doc = b.event_doc(dispatched.events[0])
    assert "dedupe_key" not in doc


def test_cas_query_names_row_and_expected_version() -> None:
    change = _new()
    claimed = job_commands.dispatch(change.row, token="t", pod="p", stamp=STAMP)
    assert b.collection_of(claimed) == "jobs"
    assert b.cas_query(claimed) == {"_id": change.row.id, "stream_version": 1}
    assert b.row_document(claimed)["inflight_token"] == "t"


def test_job_update_sets_transition_fields_never_the_payload() -> None:
    change = _new()
    claimed = job_commands.dispatch(change.row, token="t", pod="p", stamp=STAMP)
    fields = b.row_update(claimed)["$set"]
    assert set(fields) == set(jobs.TRANSITION_FIELDS)  # what the SQL stores update
    assert "payload" not in fields and "headers" not in fields and "_id" not in fields
    assert fields["inflight_token"] == "t" and "partition" not in fields and "lane" not in fields
    # applying the update to the stored document gives the new row
    stored = {**b.job_doc(change.row), **fields}
    assert b.job_from_doc(stored) == claimed.row


def test_schedule_change_goes_to_schedules() -> None:
    row = Schedule(
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
    change = jobs.Change("schedule:nightly", 1, (), row)
    assert b.collection_of(change) == "schedules"
    assert b.cas_query(change) == {"_id": "nightly", "stream_version": 1}
    doc = b.schedule_doc(row)
    assert doc["_id"] == "nightly" and doc["missed_slot_policy"] == "run_once"
    assert b.schedule_from_doc(doc) == row


def test_running_code_conflict_only_for_exclusive_running_rows() -> None:
    job = _new(target="schedule:nightly", lane=Lane.LONG).row
    exclusive = job_commands.claim(
        job, token="t", pod="p", lease=timedelta(minutes=5), exclusive=True, stamp=STAMP
    )
    assert b.running_code_conflict_query(exclusive) == {
        "status": "RUNNING",
        "running_code": "code",
        "_id": {"$ne": job.id},
    }
    plain = job_commands.claim(
        job, token="t", pod="p", lease=timedelta(minutes=5), exclusive=False, stamp=STAMP
    )
    assert b.running_code_conflict_query(plain) is None
    assert b.running_code_conflict_query(_new()) is None


def test_fast_pending_query_is_keyset_paged_in_key_version_order() -> None:
    query, sort = b.fast_pending_query(5, None)
    assert query == {"status": "PENDING", "lane": "fast", "partition": 5}
    assert sort == [("order_key", 1), ("version", 1), ("_id", 1)]
    query, _ = b.fast_pending_query(5, "DO-9")
    assert query["order_key"] == {"$gt": "DO-9"}


def test_long_candidates_due_pending_or_expired_running() -> None:
    query, sort = b.long_candidates_query(NOW)
    assert query == {
        "lane": "long",
        "$or": [
            {"status": "PENDING", "next_run_at": {"$lte": NOW}},
            {"status": "RUNNING", "lease_until": {"$lte": NOW}},
        ],
    }
    assert sort == [("next_run_at", 1), ("_id", 1)]
    assert b.running_codes_query(NOW) == {
        "status": "RUNNING",
        "running_code": {"$type": "string"},
        "lease_until": {"$gt": NOW},
    }


def test_next_due_filters_partitions_only_on_the_fast_lane() -> None:
    fast, sort = b.next_due_query([3, 1, 3], Lane.FAST)
    assert fast == {"status": "PENDING", "lane": "fast", "partition": {"$in": [1, 3]}}
    assert sort == [("next_run_at", 1)]
    long, _ = b.next_due_query([3], Lane.LONG)
    assert long == {"status": "PENDING", "lane": "long"}
    assert b.inflight_query(4) == {
        "partition": 4,
        "lane": "fast",
        "inflight_token": {"$type": "string"},
    }


def test_list_jobs_query_uses_only_given_filters() -> None:
    assert b.list_jobs_query(JobFilter()) == {}
    assert b.list_jobs_query(JobFilter(status=JobStatus.DEAD, target="kafka:t", key="K")) == {
        "status": "DEAD",
        "target": "kafka:t",
        "key": "K",
    }


def test_partition_lease_documents() -> None:
    until = NOW + timedelta(seconds=30)
    query, update = b.take_partition(7, "pod-a", NOW, until)
    assert query == {
        "_id": 7,
        "$or": [{"owner": None}, {"owner": "pod-a"}, {"lease_until": {"$lte": NOW}}],
    }
    assert update == {"$set": {"owner": "pod-a", "lease_until": until}}
    query, update = b.renew_partition("pod-a", 2, NOW, until)
    assert query == {"_id": 2, "owner": "pod-a", "lease_until": {"$gt": NOW}}
    assert update == {"$set": {"lease_until": until}}
    query, update = b.lease_fence("pod-a", NOW, 4)
    assert query == {"_id": 4, "owner": "pod-a", "lease_until": {"$gt": NOW}}
    assert update == {"$inc": {"fence": 1}}
    query, update = b.release_partitions("pod-a", [1])
    assert query == {"_id": {"$in": [1]}, "owner": "pod-a"}
    assert update == {"$set": {"owner": None, "lease_until": None}}
    assert b.seed_partition(3) == (
        {"_id": 3},
        {"$setOnInsert": {"owner": None, "lease_until": None}},
    )
    assert b.heartbeat("pod-a", NOW) == (
        {"_id": "pod-a"},
        {"$set": {"heartbeat_at": NOW, "paused": None}},
    )
    assert b.live_workers_query(NOW) == {"heartbeat_at": {"$gt": NOW}}


def test_log_documents() -> None:
    assert b.read_log_query(41, 50) == (
        {"position": {"$gt": 41, "$lte": 50}},
        [("position", 1)],
    )
    assert b.step_start() == ({"_id": "events"}, {"$inc": {"steps": 1}})
    assert b.step_finish(9) == ({"_id": "events"}, {"$set": {"high_water": 9}})
    assert b.pending_query() == (
        {"pending": True},
        {"stream": 1, "version": 1},
        [("stream", 1), ("version", 1)],
    )
    assert b.stream_query("job:x") == {"stream": "job:x"}
    # the query repeats the partial index's filter, so the planner can use the index
    assert b.dedupe_query(["a", "b"]) == {"dedupe_key": {"$in": ["a", "b"], "$exists": True}}
    assert b.stream_exists_query(["job:x"]) == {"stream": {"$in": ["job:x"]}, "version": 1}
    # the state as JSON text: its keys are target names, which may hold dots or a `$`
    state = {"open": {"kafka:lastmiles.oms.do-update": {"$code.x": {"PENDING": 2}}}}
    update = b.checkpoint_update(9, state)
    assert update == {
        "$set": {
            "position": 9,
            "state": '{"open":{"kafka:lastmiles.oms.do-update":{"$code.x":{"PENDING":2}}}}',
        }
    }
    assert b.checkpoint_from_doc({"_id": "stats", **update["$set"]}) == (9, state)
    assert b.checkpoint_from_doc(None) == (0, None)
    assert b.checkpoint_update(0, None)["$set"]["state"] is None
    assert b.checkpoint_update(0, None, {"_data": "tok"})["$set"]["resume_token"] == {
        "_data": "tok"
    }


def test_closed_streams_pipeline_keeps_open_and_recent_streams_out() -> None:
    pipeline = b.closed_streams_pipeline(NOW, 500)
    assert pipeline[0] == {"$match": {"at": {"$lt": NOW}, "stream": {"$regex": "^job:"}}}
    newer = pipeline[2]["$lookup"]
    assert newer["from"] == "events" and newer["pipeline"][0]["$match"]["$expr"]["$and"][1] == {
        "$gte": ["$at", NOW]
    }
    assert pipeline[3] == {"$match": {"newer": {"$size": 0}}}
    assert pipeline[5]["$lookup"]["from"] == "jobs"
    assert pipeline[6] == {"$match": {"open": {"$size": 0}}}
    assert pipeline[7] == {"$limit": 500}
    assert b.delete_streams_query(["job:a"]) == {"stream": {"$in": ["job:a"]}}


def test_a_projection_of_no_fields_returns_only_the_id() -> None:
    """An empty projection `{}` would return whole documents (payloads included) where
    the store only asks whether something exists."""
    assert b.fields() == {"_id": 1}
    assert b.fields("stream") == {"stream": 1}
    assert b.fields("stream", "version") == {"stream": 1, "version": 1}


def test_the_mark_is_seeded_from_the_highest_position_and_never_lowered() -> None:
    assert b.highest_position_query() == ({"position": {"$exists": True}}, [("position", -1)])
    assert b.seed_high_water(41) == ({"_id": "events"}, {"$max": {"high_water": 41}})


def test_a_heartbeat_keeps_the_paused_targets_as_json_text() -> None:
    """Target names hold dots and `$`: the heartbeat keeps them as JSON text, not as the
    keys of a document, and `live_pauses` reads them back."""
    now = NOW
    query, update = b.heartbeat("pod-a", now, {"kafka:a.b$c": now})
    assert query == {"_id": "pod-a"}
    text = update["$set"]["paused"]
    assert isinstance(text, str) and update["$set"]["heartbeat_at"] == now
    assert pauses_by_pod([("pod-a", text)]) == {"pod-a": {"kafka:a.b$c": now}}
    assert b.heartbeat("pod-a", now)[1]["$set"]["paused"] is None
    assert b.live_pauses_query(now) == {
        "heartbeat_at": {"$gt": now},
        "paused": {"$ne": None},
    }
