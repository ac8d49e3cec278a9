"""Changes as the parameters of the PostgreSQL statements (`sql.py`; pure: no I/O).

Rows go through `storage.rows` like every adapter's; this module only adds what the
SQL needs: which change each row and event belongs to, the event slots (positions are
`base + 1 + slot`, so a losing change leaves a gap, never a reuse), and the order key
as bytea text (PostgreSQL text cannot hold the NUL that starts a keyless order key;
bytea compares bytewise, which is the code-point order Python sorts `str` by).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import orjson

from jobledger.domain.events import GENESIS_HASH, Event, EventType, actor_json
from jobledger.domain.jobs import Change, Job, JobStatus, Lane, apply, job_stream
from jobledger.domain.schedules.row import Schedule
from jobledger.domain.timeutil import iso, parse_iso
from jobledger.storage.jsontext import dumps, json_bytes
from jobledger.storage.postgres.sql import (
    EVENT_INSERT,
    MAX_NOTIFY,
    ONE_EVENT_FIELDS,
    ONE_JOB_FIELDS,
    ROW_FROM_EVENT,
)
from jobledger.storage.rows import (
    JOB_FIELDS,
    actor_from_json,
    dedupe_key_of,
    event_record,
    job_columns,
    job_to_dict,
    job_transition_dict,
    schedule_to_dict,
)


def job_record(job: Job) -> dict[str, Any]:
    record = job_to_dict(job)
    record["order_key"] = record["order_key"].encode()
    return record


def is_running_code(change: Change) -> bool:
    """A change that can collide on the unique running_code index: applied in a savepoint."""
    row = change.row
    return isinstance(row, Job) and row.exclusive_code is not None


def _dedupe_key(change: Change, n: int, event: Event) -> str | None:
    """What the log's unique dedupe index holds for the `n`-th event of `change`."""
    return dedupe_key_of(event) or (change.dedupe_key if change.is_new and n == 0 else None)


def opens_job(change: Change) -> bool:
    """A change the enqueue statement takes: a new job stream of one event."""
    return change.is_new and len(change.events) == 1 and isinstance(change.row, Job)


_PAYLOAD = JOB_FIELDS.index("payload")
#: the jsonb columns of `jobs` (the payload is json: its text is kept, see migration 3)
_JSONB_FIELDS = tuple(JOB_FIELDS.index(name) for name in ("headers", "actor"))


def _job_values(job: Job) -> list[Any]:
    """The row in `JOB_FIELDS` order, in `rows.job_to_dict`'s stored forms (enums as
    values, actor and headers as plain dicts); the order key is left to the caller."""
    record = job_to_dict(job)
    del record["order_key"]
    return list(record.values())


def _opening(change: Change) -> list[Any]:
    """One element of `rows`: `_job_values`, the order key as bytea hex input, then the
    event's `OPENING_EVENT_FIELDS` (the event's data travels in `data`, and the row's
    payload with it: the statement reads it from there)."""
    job: Job = change.row
    event = change.events[0]
    row = _job_values(job)
    row[_PAYLOAD] = None
    row.append("\\x" + job.order_key.encode().hex())
    row += (
        event.stream,
        event.version,
        event.type,
        event.at,
        actor_json(event.actor),
        event.trace_id,
        event.prev_hash,
        event.hash,
        _dedupe_key(change, 0, event),
    )
    return row


def opening_params(changes: Sequence[Change]) -> dict[str, str]:
    """The parameters of `Statements.enqueue` for changes that all pass `opens_job`.

    Positional rows (`rows`, read as jsonb: one parse, constant-time access by index)
    and the events' data apart (`data`, read as json: the exact text is kept, see
    docs/postgres.md), element k of both belonging to `changes[k]`.
    """
    return {
        "rows": dumps([_opening(c) for c in changes]),
        "data": dumps([dict(c.events[0].data) for c in changes]),
    }


#: jsonb's binary input: a format version byte, then the JSON text
_JSONB = b"\x01"


def _jsonb(value: Any) -> bytes | None:
    return None if value is None else _JSONB + json_bytes(value)


def job_copy_row(change: Change) -> list[Any]:
    """The row of `Statements.copy_jobs` (binary COPY, `copy_job_types`) for a change
    that passes `opens_job`: enums as their values, JSON columns pre-encoded."""
    job: Job = change.row
    row = _job_values(job)
    for k in _JSONB_FIELDS:
        row[k] = _jsonb(row[k])
    payload = row[_PAYLOAD]
    row[_PAYLOAD] = None if payload is None else json_bytes(payload)  # json's binary input
    row.append(job.order_key.encode())
    return row


def event_copy_row(change: Change, position: int) -> tuple[Any, ...]:
    """The row of `Statements.copy_events` (binary COPY, `copy_event_types`) for the
    event of a change that passes `opens_job`, written at `position`; `json` columns
    as their text (json's binary input)."""
    return (position, *_first_event_columns(change, json_bytes))


def one_params(change: Change) -> list[Any]:
    """The parameters of `Statements.enqueue_one` for a change that passes `opens_one`:
    the event's `ONE_EVENT_FIELDS`, the row's `ONE_JOB_FIELDS` (JSON columns as their
    text, the payload's the same as in the event's data, as `job_copy_row` writes it),
    then the wake-up's payload (`hint_payload`: the event)."""
    event_columns = _first_event_columns(change, dumps)
    row = _one_job_columns(change.row)
    for k in _ONE_JSON:
        if row[k] is not None:
            row[k] = dumps(row[k])
    row[-1] = row[-1].encode()  # the order key as bytea
    return [*_one_event(event_columns), *row, hint_payload(change, event_columns[_DATA])]


def has_own_dedupe_key(change: Change) -> bool:
    """Whether a new job's dedupe key is the caller's (else it is the job's own id, and
    `Statements.enqueue_one` writes it without `ON CONFLICT`)."""
    job: Job = change.row
    return change.dedupe_key != job.id


#: `ONE_JOB_FIELDS` of a job in `job_to_dict`'s forms and the positions of its JSON
#: columns; `ONE_EVENT_FIELDS` of `_first_event_columns`, and where its data is
_one_job_columns = job_columns(ONE_JOB_FIELDS)
_ONE_JSON = tuple(ONE_JOB_FIELDS.index(name) for name in ("payload", "headers"))
_EVENT_COLUMNS = EVENT_INSERT.split(", ")[1:]
_one_event = operator.itemgetter(*(_EVENT_COLUMNS.index(name) for name in ONE_EVENT_FIELDS))
_DATA = _EVENT_COLUMNS.index("data")


def opens_one(change: Change) -> bool:
    """A change `Statements.enqueue_one` takes: it `opens_job` with a JobEnqueued, and
    its row holds what the statement reads from the event and leaves out as
    `jobs._enqueued_fields` makes them (checked, so the row written is the change's)."""
    row, events = change.row, change.events
    if not (change.is_new and len(events) == 1 and isinstance(row, Job)):
        return False
    event = events[0]
    return (
        event.type == EventType.JOB_ENQUEUED
        and event.version == 1
        and event.prev_hash == GENESIS_HASH
        and _LEFT_OUT(row) == _NEW_ROW
        and _FROM_EVENT(row)
        == (
            _dedupe_key(change, 0, event),
            event.at,
            event.at,
            event.version,
            event.hash,
            event.trace_id,
            event.actor,
        )
    )


#: the row's columns `Statements.enqueue_one` reads from its event (`ROW_FROM_EVENT`)
_FROM_EVENT = operator.attrgetter(*(c for c, _ in ROW_FROM_EVENT))
#: the columns it leaves out (NULL, attempts its default 0; status 'PENDING') and
#: their values in a new row
NEW_ROW = {
    "status": JobStatus.PENDING,
    "attempts": 0,
    "last_error": None,
    "dead_reason": None,
    "claimed_by": None,
    "claim_token": None,
    "lease_until": None,
    "inflight_token": None,
    "running_code": None,
    "closed_at": None,
}
_LEFT_OUT = operator.attrgetter(*NEW_ROW)
_NEW_ROW = tuple(NEW_ROW.values())


def is_guarded_update(change: Change) -> bool:
    """A change `Statements.guarded_update` takes (with a lease guard): one event
    appended to an open job's stream, its row updated, no running code to collide on."""
    return (
        not change.is_new
        and not change.closed_stream
        and len(change.events) == 1
        and isinstance(change.row, Job)
        and change.partition is not None
        and change.row.exclusive_code is None
    )


def guarded_update_params(change: Change, pod: str, now: datetime) -> list[Any]:
    """The parameters of `Statements.guarded_update` (see `sql.guarded_update_sql`)."""
    job: Job = change.row
    transition = job_transition_dict(job)
    del transition["id"]
    return [
        change.partition,
        pod,
        now,
        *transition.values(),
        job.id,
        change.expected_version,
        *_first_event_columns(change, dumps),
        f'{{"p":[{change.partition}],"l":["{job.lane.value}"],"s":false}}',
    ]


def first_mark_params(job: Job) -> list[Any]:
    """What `Statements.first_mark` takes after `guarded_update_params`' expected stream
    version: the chain check's row — its partition, order key, target, version (twice)
    and id."""
    return [job.partition, job.order_key.encode(), job.target, job.version, job.version, job.id]


def _first_event_columns(change: Change, encode: Callable[[Any], Any]) -> tuple[Any, ...]:
    """The columns of a change's first event after its position, in the log's column
    order; its data and actor through `encode` (bytes for COPY, text for parameters)."""
    event = change.events[0]
    actor = actor_json(event.actor)
    return (
        event.stream,
        event.version,
        event.type,
        encode(dict(event.data)),
        event.at,
        None if actor is None else encode(actor),
        event.trace_id,
        event.prev_hash,
        event.hash,
        _dedupe_key(change, 0, event),
    )


def wake_params(changes: Sequence[Change]) -> dict[str, list[Any]]:
    """The parameters of `Statements.notify_jobs`: the new rows' partitions and lanes,
    each once (the statement unnests them side by side and skips the NULLs that pad
    the shorter array)."""
    rows: list[Job] = [c.row for c in changes]
    return {
        "parts": sorted({j.partition for j in rows}),
        "lanes": sorted({j.lane.value for j in rows}),
    }


def encode(items: Sequence[tuple[int, Change]]) -> dict[str, str]:
    """The parameters for one apply statement; `items` are (index, change), one per stream.

    Each event's record is built in one dict display (`rows.event_to_dict`'s fields but
    the position, then the statement's own): a fast-lane outcome batch encodes one per
    job it ran."""
    changes: list[dict[str, Any]] = []
    jobs: list[dict[str, Any]] = []
    schedules: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for index, change in items:
        kind, _, ident = change.stream.partition(":")
        row = change.row
        # a closed stream's append is an insert like a new stream's first event: the
        # log's unique (stream, version) refuses it if the stream moved on
        opens = change.is_new or change.closed_stream
        changes.append(
            {
                "i": index,
                "stream": change.stream,
                "kind": kind,
                "ident": ident,
                "expected": change.expected_version,
                "isnew": opens,
                "del": row is None,
                "part": change.partition,
                "lane": row.lane.value if isinstance(row, Job) else None,
            }
        )
        if isinstance(row, Job):
            # an update rewrites only what a transition can change
            jobs.append(job_record(row) if change.is_new else job_transition_dict(row))
        elif isinstance(row, Schedule):
            schedules.append(schedule_to_dict(row))
        for n, event in enumerate(change.events):
            events.append(
                {
                    **event_record(event),
                    "i": index,
                    "slot": len(events),
                    "fst": opens and n == 0,
                    "dedupe_key": _dedupe_key(change, n, event),
                }
            )
    return {
        "changes": dumps(changes),
        "jobs": dumps(jobs),
        "schedules": dumps(schedules),
        "events": dumps(events),
    }


def rounds(changes: Sequence[Change]) -> list[list[tuple[int, Change]]]:
    """Split `changes` so no stream appears twice in one statement (round k holds the
    k-th change of each stream); usually a single round."""
    if changes and len({change.stream for change in changes}) == len(changes):
        return [list(enumerate(changes))]  # every stream once: the one round, in order
    out: list[list[tuple[int, Change]]] = []
    seen: dict[str, int] = {}
    for index, change in enumerate(changes):
        k = seen.get(change.stream, 0)
        seen[change.stream] = k + 1
        if k == len(out):
            out.append([])
        out[k].append((index, change))
    return out


# --- the single enqueue's wake-up hint ---------------------------------------------------
# A single enqueue's NOTIFY carries the JobEnqueued it wrote (`hint_payload`), so the lane
# of an idle partition folds it into the row (`hint_jobs`), plans on that row and marks
# it through `Writes.mark_first` without reading the partition first.


def hint_payload(change: Change, data: str) -> str:
    """The NOTIFY payload of a single enqueue (`listen.parse_wake` reads it): the
    partition and lane and, for a fast-lane job, its JobEnqueued (`"e"`: the event's
    `data` as the statement writes it, its time, hash, trace and actor; the rest of a
    job stream's first event is fixed) when the payload stays under PostgreSQL's limit.
    The lane folds that event into the row the statement wrote (`hint_jobs`)."""
    job: Job = change.row
    plain = f'{{"p":[{job.partition}],"l":["{job.lane.value}"],"s":false'
    if job.lane != Lane.FAST or len(data) > MAX_NOTIFY:
        return plain + "}"
    event = change.events[0]
    hinted = {
        "data": orjson.Fragment(data),
        "at": iso(event.at),
        "hash": event.hash,
        "trace_id": event.trace_id,
        "actor": actor_json(event.actor),
    }
    try:
        text = orjson.dumps(hinted).decode()
    except orjson.JSONEncodeError:  # a lone surrogate in the trace id
        return plain + "}"
    if len(text) + len(plain) + 8 > MAX_NOTIFY:
        return plain + "}"
    return f'{plain},"e":[{text}]}}'


def hint_jobs(events: Any) -> tuple[Job, ...]:
    """The rows the JobEnqueued events of a hint's `e` fold into (`jobs.apply`, as
    every row is made); raises ValueError, KeyError or TypeError for one that is not."""
    if not events:
        return ()
    return tuple(_folded(hinted) for hinted in events)


def _folded(hinted: dict[str, Any]) -> Job:
    data = hinted["data"]
    event = Event(
        job_stream(data["id"]),
        1,
        EventType.JOB_ENQUEUED,
        data,
        parse_iso(hinted["at"]),
        actor_from_json(hinted.get("actor")),
        hinted.get("trace_id"),
        GENESIS_HASH,
        hinted["hash"],
    )
    job = apply(None, event)
    assert job is not None  # a JobEnqueued opens a row
    return job
