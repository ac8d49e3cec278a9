"""Every MongoDB filter, update, sort, pipeline and index the adapter sends — pure.

The executor (`store.py`) only passes these documents to PyMongo, so the shapes the
server needs are unit-tested here without a server (tests/unit/test_mongodb_builders.py).
Collections, mapped from the reference engine's onto the event log and its projections:

    events      the append-only log     {_id: "stream/version", stream, version, type, data,
                                         …, dedupe_key?, pending: true | position}
    jobs        open jobs (the queue)   {_id: job id, …rows.JOB_FIELDS, order_key}
    schedules   schedules read model    {_id: code, …rows.SCHEDULE_FIELDS}
    partitions  64 lease rows           {_id: partition, owner, lease_until}
    workers     liveness rows           {_id: pod id, heartbeat_at}
    checkpoints projection checkpoints  {_id: name, position, state, resume_token?}
    sequencer   the log's head          {_id: "events", high_water, steps}
    migrations  applied index versions  {_id: "indexes", version}

Indexes and their migrations are in `indexes.py`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from jobledger.domain.events import Event
from jobledger.domain.jobs import Change, Job, Lane
from jobledger.domain.schedules.row import Schedule
from jobledger.storage import jsontext, rows
from jobledger.storage.port import JobFilter

Doc = dict[str, Any]

PENDING = "PENDING"
RUNNING = "RUNNING"


# --- documents ----------------------------------------------------------------------------


def by_id(value: str | int) -> Doc:
    """The filter of one document by `_id` (a job id, a schedule code, a pod, a
    partition number, a checkpoint's name)."""
    return {"_id": value}


def fields(*names: str) -> Doc:
    """A projection returning only `names` and `_id`; with no names, `_id` alone (an
    empty projection would return whole documents)."""
    return dict.fromkeys(names, 1) if names else {"_id": 1}


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


def event_id(stream: str, version: int) -> str:
    """An event document's `_id`: its (stream, version) place, unique like the log's."""
    return f"{stream}/{version}"


def event_doc(event: Event) -> Doc:
    """The document a transaction inserts: no position yet, `pending` until a sequencing
    step gives it one (decisions D15), so the transaction writes only its own documents."""
    doc = rows.event_to_dict(event)
    doc.pop("position")
    doc["_id"] = event_id(event.stream, event.version)
    doc["pending"] = True
    key = rows.dedupe_key_of(event)
    if key is not None:
        doc["dedupe_key"] = key
    return doc


def event_from_doc(doc: Mapping[str, Any]) -> Event:
    """An event; `position` is None while it is pending."""
    record = dict(doc)
    record.pop("_id")
    record.pop("pending", None)
    record.pop("dedupe_key", None)
    return rows.event_from_dict(record)


# --- the log --------------------------------------------------------------------------------

HEAD_ID = "events"
"""The sequencer collection's one document: `{_id: "events", high_water, steps}`."""


def step_start() -> tuple[Doc, Doc]:
    """(filter, update) a sequencing step writes first, so two steps conflict at once:
    `find_one_and_update(..., upsert=True)` returns the high-water mark to number from."""
    return {"_id": HEAD_ID}, {"$inc": {"steps": 1}}


def step_finish(high_water: int) -> tuple[Doc, Doc]:
    return {"_id": HEAD_ID}, {"$set": {"high_water": high_water}}


PENDING_INDEX = "pending"
"""The partial index on the events waiting for a position: keys (stream, version),
filter `pending: true` (indexes.py)."""


def pending_query() -> tuple[Doc, Doc, list[tuple[str, int]]]:
    """(filter, projection, sort) of the events waiting for a position, in (stream,
    version) order. The filter names no key of the `pending` index, so it is the sort on
    the index's keys (and the hint, `PENDING_INDEX`) that lets the planner scan that
    index instead of the collection; the filter repeats the index's partial filter."""
    return {"pending": True}, {"stream": 1, "version": 1}, [("stream", 1), ("version", 1)]


def highest_position_query() -> tuple[Doc, list[tuple[str, int]]]:
    """(filter, sort) of the positioned event with the highest position: the `position`
    index read backwards, one entry (its filter repeats the index's partial filter)."""
    return {"position": {"$exists": True}}, [("position", -1)]


def seed_high_water(position: int) -> tuple[Doc, Doc]:
    """(filter, update) raising the log's mark to at least `position` (an upsert; `$max`
    never lowers it): a log whose positions were given before the sequencer existed."""
    return {"_id": HEAD_ID}, {"$max": {"high_water": position}}


def position_update(doc_id: str, position: int) -> tuple[Doc, Doc]:
    """Give one pending event its position (the filter makes it a one-time write)."""
    return {"_id": doc_id, "pending": True}, {
        "$set": {"position": position},
        "$unset": {"pending": ""},
    }


def read_log_query(after: int, high_water: int) -> tuple[Doc, list[tuple[str, int]]]:
    """Positioned events in (after, high_water] in position order (the `position` index)."""
    return {"position": {"$gt": after, "$lte": high_water}}, [("position", 1)]


def log_newest_query(before: int | None) -> tuple[Doc, list[tuple[str, int]]]:
    """Positioned events below `before`, newest first (the `position` index); events
    still waiting for their position are left out."""
    bound = before if before is not None else 2**63 - 1
    return {"position": {"$lt": bound}}, [("position", -1)]


def stream_query(stream: str) -> Doc:
    return {"stream": stream}


def dedupe_query(keys: Sequence[str]) -> Doc:
    """Served by the partial unique `dedupe` index: the query repeats its filter
    (`$exists: true`), so the planner can prove the index holds every match."""
    return {"dedupe_key": {"$in": list(keys), "$exists": True}}


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


def row_update(change: Change) -> Doc:
    """The update of an existing row: a job's transition fields only (its identity,
    partition, lane and payload never change after JobEnqueued — decisions D12), as
    the SQL stores write them; a schedule's fields whole (a small row). The change
    stream learns a job's partition and lane from the looked-up document (`watch.py`):
    an update's `updatedFields` name only the fields whose value changed."""
    if isinstance(change.row, Job):
        fields = rows.job_transition_dict(change.row)
        fields.pop("id")
        return {"$set": fields}
    doc = row_document(change)
    doc.pop("_id")
    return {"$set": doc}


def running_code_conflict_query(change: Change) -> Doc | None:
    """Another RUNNING row with the same exclusive code, if this change makes one RUNNING."""
    row = change.row
    if isinstance(row, Job) and row.exclusive_code:
        return {"status": RUNNING, "running_code": row.exclusive_code, "_id": {"$ne": row.id}}
    return None


def lease_fence(pod: str, now: datetime, partition: int) -> tuple[Doc, Doc]:
    """(filter, update) a guarded write makes on a lease it relies on: a write, so a
    concurrent takeover conflicts with the transaction (writes.fence_leases)."""
    return {"_id": partition, "owner": pod, "lease_until": {"$gt": now}}, {"$inc": {"fence": 1}}


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


def renew_partition(pod: str, partition: int, now: datetime, until: datetime) -> tuple[Doc, Doc]:
    """(filter, update) extending one lease `pod` still holds: one atomic update, which
    matches iff the lease is still held (no read-then-write window)."""
    return (
        {"_id": partition, "owner": pod, "lease_until": {"$gt": now}},
        {"$set": {"lease_until": until}},
    )


def release_partitions(pod: str, partitions: Sequence[int]) -> tuple[Doc, Doc]:
    query = {"_id": {"$in": sorted(set(partitions))}, "owner": pod}
    return query, {"$set": {"owner": None, "lease_until": None}}


def heartbeat(
    pod: str, now: datetime, paused: Mapping[str, datetime] | None = None
) -> tuple[Doc, Doc]:
    """A pod's heartbeat: its time, and its paused targets as `rows.paused_text`'s JSON
    text (target names may hold dots or `$`, which a document's keys should not)."""
    return {"_id": pod}, {"$set": {"heartbeat_at": now, "paused": rows.paused_text(paused)}}


def live_pauses_query(since: datetime) -> Doc:
    return {"heartbeat_at": {"$gt": since}, "paused": {"$ne": None}}


def live_workers_query(since: datetime) -> Doc:
    return {"heartbeat_at": {"$gt": since}}


def checkpoint_update(position: int, state: Any, resume_token: Any = None) -> Doc:
    """A checkpoint's `$set`. The projection state is stored as JSON text, as the SQL
    stores keep it: its keys are target and code names, which may hold dots or start
    with `$` (field names an update's value should not carry), and its values come back
    exactly as saved. The change stream's resume token stays a document (the server
    takes it back as one)."""
    update: Doc = {"position": position, "state": None if state is None else jsontext.dumps(state)}
    if resume_token is not None:
        update["resume_token"] = resume_token
    return {"$set": update}


def checkpoint_from_doc(doc: Mapping[str, Any] | None) -> tuple[int, Any]:
    """(position, state) of a checkpoint document, (0, None) when there is none."""
    if doc is None:
        return 0, None
    state = doc.get("state")
    return int(doc["position"]), json.loads(state) if isinstance(state, str) else state
