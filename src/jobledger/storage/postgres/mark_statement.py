"""The at-most-once mark's statements (pure: no I/O): one job row's update under the
lease guard, with its one event and the wake-up, from scalar parameters — and the
wake-up hint that lets an idle lane write that mark without reading the row first.

The general apply statement (`statements.apply_sql`) parses JSON arrays of changes,
rows and events and runs every branch of the compare-and-set for a batch; a mark alone
(the first send of an idle at-most-once partition: the handler waits for its commit)
needs one of them. The guard is the general statement's: the partition's lease row,
held by this pod and not expired, locked `FOR SHARE` until the commit; then the
compare-and-set on the row's stream version.

The first mark (`first_mark_sql`, `Store.mark_first`): a single enqueue's NOTIFY
carries the JobEnqueued it wrote (`hint_payload`), so the lane of an idle partition
folds it into the row, plans on that row and marks it without the read. What the read
would have told it, the statement checks: no PENDING row of the same partition, target
and order key comes before it in (version, id) order. The compare-and-set proves the
row is still as the hint has it; the lease guard is the same. Refused, the lane reads
as before.
"""

from __future__ import annotations

from typing import Any

import orjson

from jobledger.domain.events import GENESIS_HASH, Event, EventType, actor_json
from jobledger.domain.jobs import TRANSITION_FIELDS, Change, Job, Lane, apply, job_stream
from jobledger.domain.timeutil import iso, parse_iso
from jobledger.storage.postgres.sql_parts import (
    EVENT_INSERT,
    EVENT_TYPES,
    JOB_TYPES,
    MAX_NOTIFY,
    base,
)
from jobledger.storage.rows import actor_from_json


def _statement(s: str, channel: str, first: bool) -> str:
    columns = ", ".join(TRANSITION_FIELDS)
    values = ", ".join(f"%s::{JOB_TYPES.get(f, 'text')}" for f in TRANSITION_FIELDS)
    event_values = ", ".join(
        f"%s::{EVENT_TYPES.get(c, 'text')}" for c in EVENT_INSERT.split(", ")[1:]
    )
    # the chain's earlier rows, through jobs_fast_pending (partition, order_key, version, id)
    before = (
        f"""
    AND NOT EXISTS (
      SELECT 1 FROM {s}.jobs o
      WHERE o.status = 'PENDING' AND o.lane = 'fast' AND o.partition = %s::integer
        AND o.order_key = %s::bytea AND o.target = %s
        AND (o.version < %s::bigint OR (o.version = %s::bigint AND o.id < %s)))"""
        if first
        else ""
    )
    # A first mark takes the wake-up's payload parameter and sends nothing: see
    # `first_mark_sql`. The lone mark keeps its NOTIFY, as the general statement has.
    wake = "%s::text" if first else f"pg_notify('{channel}', %s)"
    return f"""
WITH held AS (
  SELECT partition FROM {s}.partitions
  WHERE partition = %s::integer AND owner = %s AND lease_until > %s::timestamptz
  FOR SHARE
),
u AS (
  UPDATE {s}.jobs SET ({columns}) = ({values})
  WHERE id = %s AND stream_version = %s::integer AND EXISTS (SELECT 1 FROM held){before}
  RETURNING 1
),
{base("1")},
e AS (INSERT INTO {s}.events ({EVENT_INSERT}) SELECT base.b + 1, {event_values} FROM base, u)
SELECT {wake} FROM u
"""


def guarded_update_sql(s: str, channel: str) -> str:
    """Parameters, in order (`encode.guarded_update_params`): the partition, the pod and
    its clock's now; the row's `TRANSITION_FIELDS`; its id and expected stream version;
    the event's columns after its position; the wake-up's payload. One row back when
    the change was applied."""
    return _statement(s, channel, first=False)


def first_mark_sql(s: str, channel: str) -> str:
    """`guarded_update_sql` that also refuses a row with an earlier PENDING row of its
    chain. Parameters: `guarded_update_sql`'s with `first_mark_params(job)` after the
    expected stream version.

    It sends no wake-up (the payload parameter is taken and left unused). A mark makes
    nothing runnable: the row goes in flight, only the pod holding the partition's
    lease works on it, and that pod's worker is the one marking (it passes over the
    partition again after the round anyway). A NOTIFY in the mark's transaction would
    make its commit take PostgreSQL's notification-queue lock, which serialises every
    notifying commit of the server up to the end of its WAL flush: on the
    commit → handler path that queued the mark behind other transactions' flushes, and
    every pod's listener was sent a wake-up it had no use for (issue 21 wake tail,
    docs/performance.md)."""
    return _statement(s, channel, first=True)


def first_mark_params(job: Job) -> list[Any]:
    """The chain check's parameters: the row's partition, order key, target, version
    (twice) and id."""
    return [job.partition, job.order_key.encode(), job.target, job.version, job.version, job.id]


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
