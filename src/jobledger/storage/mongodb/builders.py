"""Every MongoDB filter, update, sort, pipeline and index the adapter sends — pure.

The executor (`store.py`) only passes these documents to PyMongo, so the shapes the
server needs are unit-tested here without a server (tests/unit/test_mongodb_builders.py).
Collections, mapped from reference §3 onto the event log and its projections:

    events      the append-only log     {_id: position, stream, version, type, data, …, dedupe_key?}
    jobs        open jobs (the queue)   {_id: job id, …rows.JOB_FIELDS, order_key}
    schedules   schedules read model    {_id: code, …rows.SCHEDULE_FIELDS}
    partitions  64 lease rows           {_id: partition, owner, lease_until}
    workers     liveness rows           {_id: pod id, heartbeat_at}
    checkpoints projection checkpoints  {_id: name, position, state, resume_token?}
    counters    log position counter    {_id: "events", value}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from jobledger.domain.events import Event
from jobledger.domain.jobs import Change, Job, Lane
from jobledger.domain.schedule_row import Schedule
from jobledger.storage import rows
from jobledger.storage.port import JobFilter, Wake

Doc = dict[str, Any]

PENDING = "PENDING"
RUNNING = "RUNNING"


# --- indexes ------------------------------------------------------------------------------


def index_specs(
    dead_ttl_seconds: int | None = None,
) -> list[tuple[str, list[tuple[str, int]], Doc]]:
    """(collection, keys, options) for every index, partial where the reference has them.

    The fast-lane read is index-backed on (partition, order_key, version, _id) of PENDING
    fast rows (closes G10); the admin filters have their own indexes; the dedupe key is
    unique in the log, so it outlives the job row (the dedupe window is the log's
    retention). `dead_ttl_seconds` adds a TTL on DEAD rows' `closed_at` — but jobledger
    expires DEAD rows through JobExpired events (retention service), so the TTL is only
    for deployments that want the server to enforce it and is off by default.
    """
    specs: list[tuple[str, list[tuple[str, int]], Doc]] = [
        ("events", [("stream", 1), ("version", 1)], {"unique": True, "name": "stream_version"}),
        (
            "events",
            [("dedupe_key", 1)],
            {
                "unique": True,
                "name": "dedupe_key",
                "partialFilterExpression": {"dedupe_key": {"$type": "string"}},
            },
        ),
        ("events", [("at", 1)], {"name": "at"}),
        (
            "jobs",
            [("partition", 1), ("order_key", 1), ("version", 1), ("_id", 1)],
            {
                "name": "fast_pending",
                "partialFilterExpression": {"status": PENDING, "lane": Lane.FAST.value},
            },
        ),
        (
            "jobs",
            [("lane", 1), ("next_run_at", 1)],
            {"name": "pending_due", "partialFilterExpression": {"status": PENDING}},
        ),
        (
            "jobs",
            [("lease_until", 1)],
            {"name": "running_lease", "partialFilterExpression": {"status": RUNNING}},
        ),
        (
            "jobs",
            [("running_code", 1)],
            {
                "unique": True,
                "name": "running_code",
                "partialFilterExpression": {
                    "status": RUNNING,
                    "running_code": {"$type": "string"},
                },
            },
        ),
        (
            "jobs",
            [("partition", 1), ("inflight_token", 1)],
            {
                "name": "inflight",
                "partialFilterExpression": {"inflight_token": {"$type": "string"}},
            },
        ),
        ("jobs", [("status", 1), ("_id", -1)], {"name": "status_newest"}),
        ("jobs", [("target", 1), ("_id", -1)], {"name": "target_newest"}),
        ("jobs", [("code", 1), ("_id", -1)], {"name": "code_newest"}),
        ("jobs", [("key", 1), ("_id", -1)], {"name": "key_newest"}),
        ("workers", [("heartbeat_at", 1)], {"name": "heartbeat"}),
        (
            "schedules",
            [("next_run_at", 1)],
            {"name": "due", "partialFilterExpression": {"enabled": True}},
        ),
    ]
    if dead_ttl_seconds is not None:
        specs.append(
            (
                "jobs",
                [("closed_at", 1)],
                {
                    "name": "dead_ttl",
                    "expireAfterSeconds": dead_ttl_seconds,
                    "partialFilterExpression": {"status": "DEAD"},
                },
            )
        )
    return specs


# --- documents ----------------------------------------------------------------------------


def job_doc(job: Job) -> Doc:
    doc = rows.job_to_dict(job)
    doc["_id"] = doc.pop("id")
    return doc


def job_from_doc(doc: Mapping[str, Any]) -> Job:
    record = dict(doc)
    record["id"] = record.pop("_id")
    return rows.job_from_dict(record)


def schedule_doc(schedule: Schedule) -> Doc:
    doc = rows.schedule_to_dict(schedule)
    doc["_id"] = doc["code"]
    return doc


def schedule_from_doc(doc: Mapping[str, Any]) -> Schedule:
    record = dict(doc)
    record.pop("_id", None)
    return rows.schedule_from_dict(record)


def event_doc(event: Event, position: int) -> Doc:
    doc = rows.event_to_dict(event)
    doc.pop("position")
    doc["_id"] = position
    key = rows.dedupe_key_of(event)
    if key is not None:
        doc["dedupe_key"] = key
    return doc


def event_from_doc(doc: Mapping[str, Any]) -> Event:
    record = dict(doc)
    record["position"] = record.pop("_id")
    return rows.event_from_dict(record)


# --- the log --------------------------------------------------------------------------------


def reserve_positions(count: int) -> tuple[Doc, Doc]:
    """(filter, update) for the counter: `find_one_and_update(..., upsert, return after)`.

    Incrementing one counter document inside the transaction makes concurrent appenders
    conflict, so positions are handed out in commit order (readers never skip a late
    commit); the driver's transaction retry resolves the conflict.
    """
    return {"_id": "events"}, {"$inc": {"value": count}}


def read_log_query(after: int) -> Doc:
    return {"_id": {"$gt": after}}


def stream_query(stream: str) -> Doc:
    return {"stream": stream}


def dedupe_query(keys: Sequence[str]) -> Doc:
    return {"dedupe_key": {"$in": list(keys)}}


def stream_exists_query(streams: Sequence[str]) -> Doc:
    return {"stream": {"$in": list(streams)}, "version": 1}


def closed_streams_pipeline(before: datetime, limit: int) -> list[Doc]:
    """Job streams whose newest event is older than `before` and that have no open row.

    Served by the `at` index for the first match; the lookup keeps open jobs out.
    """
    return [
        {"$match": {"at": {"$lt": before}, "stream": {"$regex": "^job:"}}},
        {"$group": {"_id": "$stream"}},
        {
            "$lookup": {
                "from": "events",
                "let": {"s": "$_id"},
                "as": "newer",
                "pipeline": [
                    {
                        "$match": {
                            "$expr": {
                                "$and": [{"$eq": ["$stream", "$$s"]}, {"$gte": ["$at", before]}]
                            }
                        }
                    },
                    {"$limit": 1},
                ],
            }
        },
        {"$match": {"newer": {"$size": 0}}},
        {"$addFields": {"job_id": {"$substrCP": ["$_id", 4, 64]}}},
        {"$lookup": {"from": "jobs", "localField": "job_id", "foreignField": "_id", "as": "open"}},
        {"$match": {"open": {"$size": 0}}},
        {"$limit": limit},
        {"$project": {"_id": 1}},
    ]


def delete_streams_query(streams: Sequence[str]) -> Doc:
    return {"stream": {"$in": list(streams)}}


# --- compare-and-set on the read models -------------------------------------------------


def collection_of(change: Change) -> str:
    return "jobs" if change.stream.startswith("job:") else "schedules"


def row_id(change: Change) -> str:
    return change.stream.split(":", 1)[1]


def cas_query(change: Change) -> Doc:
    """The row must still be at the version the change was computed from."""
    return {"_id": row_id(change), "stream_version": change.expected_version}


def row_document(change: Change) -> Doc:
    if isinstance(change.row, Job):
        return job_doc(change.row)
    if isinstance(change.row, Schedule):
        return schedule_doc(change.row)
    raise TypeError(f"no row document for {type(change.row).__name__}")


def running_code_conflict_query(change: Change) -> Doc | None:
    """Another RUNNING row with the same exclusive code, if this change makes one RUNNING."""
    row = change.row
    if isinstance(row, Job) and row.exclusive_code:
        return {"status": RUNNING, "running_code": row.exclusive_code, "_id": {"$ne": row.id}}
    return None


def lease_held_query(pod: str, now: datetime, partitions: Sequence[int]) -> Doc:
    return {"_id": {"$in": sorted(set(partitions))}, "owner": pod, "lease_until": {"$gt": now}}


# --- the queue --------------------------------------------------------------------------------


def fast_pending_query(partition: int, after_key: str | None) -> tuple[Doc, list[tuple[str, int]]]:
    query: Doc = {"status": PENDING, "lane": Lane.FAST.value, "partition": partition}
    if after_key is not None:
        query["order_key"] = {"$gt": after_key}
    return query, [("order_key", 1), ("version", 1), ("_id", 1)]


def long_candidates_query(now: datetime) -> tuple[Doc, list[tuple[str, int]]]:
    query = {
        "lane": Lane.LONG.value,
        "$or": [
            {"status": PENDING, "next_run_at": {"$lte": now}},
            {"status": RUNNING, "lease_until": {"$lte": now}},
        ],
    }
    return query, [("next_run_at", 1), ("_id", 1)]


def running_codes_query(now: datetime) -> Doc:
    return {"status": RUNNING, "running_code": {"$type": "string"}, "lease_until": {"$gt": now}}


def inflight_query(partition: int) -> Doc:
    return {"partition": partition, "lane": Lane.FAST.value, "inflight_token": {"$type": "string"}}


def next_due_query(partitions: Sequence[int], lane: Lane) -> tuple[Doc, list[tuple[str, int]]]:
    query: Doc = {"status": PENDING, "lane": lane.value}
    if lane == Lane.FAST:
        query["partition"] = {"$in": sorted(set(partitions))}
    return query, [("next_run_at", 1)]


def list_jobs_query(flt: JobFilter) -> Doc:
    query: Doc = {}
    if flt.status is not None:
        query["status"] = flt.status.value
    for name in ("target", "code", "key"):
        value = getattr(flt, name)
        if value is not None:
            query[name] = value
    return query


def list_jobs_page(
    query: Doc, *, before: str | None = None, after: str | None = None
) -> tuple[Doc, int]:
    """The page filter with the keyset cursors on `_id`, and its sort direction."""
    bounds: Doc = {}
    if before is not None:
        bounds["$lt"] = before
    if after is not None:
        bounds["$gt"] = after
    page = {**query, "_id": bounds} if bounds else dict(query)
    return page, 1 if after is not None else -1


def events_at_query(places: Sequence[tuple[str, int]]) -> Doc:
    """Events at (stream, version) places: each branch is served by `stream_version`."""
    return {"$or": [{"stream": stream, "version": version} for stream, version in places]}


# --- coordination -------------------------------------------------------------------------


def seed_partition(partition: int) -> tuple[Doc, Doc]:
    """(filter, update) for an upsert that creates the lease row once.

    `_id` is the partition number, so the unique `_id` index makes a racing second
    insert fail with a duplicate key that the executor ignores: no duplicate can exist
    (the reference's duplicate repair is unnecessary by construction).
    """
    return {"_id": partition}, {"$setOnInsert": {"owner": None, "lease_until": None}}


def take_partition(partition: int, pod: str, now: datetime, until: datetime) -> tuple[Doc, Doc]:
    query = {
        "_id": partition,
        "$or": [{"owner": None}, {"owner": pod}, {"lease_until": {"$lte": now}}],
    }
    return query, {"$set": {"owner": pod, "lease_until": until}}


def renew_partitions(
    pod: str, partitions: Sequence[int], now: datetime, until: datetime
) -> tuple[Doc, Doc]:
    return lease_held_query(pod, now, partitions), {"$set": {"lease_until": until}}


def release_partitions(pod: str, partitions: Sequence[int]) -> tuple[Doc, Doc]:
    query = {"_id": {"$in": sorted(set(partitions))}, "owner": pod}
    return query, {"$set": {"owner": None, "lease_until": None}}


def heartbeat(pod: str, now: datetime) -> tuple[Doc, Doc]:
    return {"_id": pod}, {"$set": {"heartbeat_at": now}}


def live_workers_query(since: datetime) -> Doc:
    return {"heartbeat_at": {"$gt": since}}


def checkpoint_update(position: int, state: Any, resume_token: Any = None) -> Doc:
    fields: Doc = {"position": position, "state": state}
    if resume_token is not None:
        fields["resume_token"] = resume_token
    return {"$set": fields}


# --- change streams ---------------------------------------------------------------------------


def change_stream_pipeline() -> list[Doc]:
    """Watch the queue: inserts and replacements (the adapter writes whole rows).

    Deletes are left out: a row leaves the queue through the pod that owns its
    partition, which goes on reading that partition anyway. Only the fields a wake-up
    needs are projected, so a change event stays small.
    """
    return [
        {
            "$match": {
                "ns.coll": {"$in": ["jobs", "schedules"]},
                "operationType": {"$in": ["insert", "replace"]},
            }
        },
        {
            "$project": {
                "operationType": 1,
                "ns": 1,
                "fullDocument.partition": 1,
                "fullDocument.lane": 1,
                "documentKey": 1,
            }
        },
    ]


def wake_from_change(change: Mapping[str, Any]) -> Wake:
    """Turn one change-stream document into a wake-up hint."""
    collection = change.get("ns", {}).get("coll")
    if collection == "schedules":
        return Wake(frozenset(), frozenset(), True)
    document = change.get("fullDocument") or {}
    partition = document.get("partition")
    lane = document.get("lane")
    if partition is None or lane is None:
        # a change without the row's fields: anything may be runnable
        return Wake(None, None, False)
    return Wake(frozenset({int(partition)}), frozenset({Lane(lane)}), False)


HISTORY_LOST_CODES = frozenset({286, 280})  # ChangeStreamHistoryLost, ChangeStreamFatalError
