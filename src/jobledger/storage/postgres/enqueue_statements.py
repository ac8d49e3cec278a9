"""The enqueue statements of the PostgreSQL store (pure: no I/O): new job streams of
one event each, from a batch (`enqueue_sql`) or a single job (`enqueue_one_sql`)."""

from __future__ import annotations

from jobledger.domain.events import GENESIS_HASH, EventType
from jobledger.storage.postgres.sql_parts import (
    EVENT_INSERT,
    EVENT_TYPES,
    JOB_TYPES,
    base,
    field,
    notify,
)
from jobledger.storage.rows import JOB_FIELDS

#: the enqueue statement's rows: the job row (`JOB_FIELDS`), `order_key`, then these
#: fields of the stream's first event (see `encode.opening_params`)
OPENING_EVENT_FIELDS = (
    "stream",
    "version",
    "type",
    "at",
    "actor",
    "trace_id",
    "prev_hash",
    "hash",
    "dedupe_key",
)
_PAYLOAD_FROM_DATA = (
    "CASE WHEN json_typeof(x.d->'payload') = 'null' THEN NULL ELSE x.d->'payload' END"
)


def enqueue_sql(s: str, channel: str) -> str:
    """New job streams of one event each, from `encode.opening_params`: the events with
    `ON CONFLICT DO NOTHING` (a seen dedupe key drops that job alone), the winners'
    rows, the wake-up; returns the winners' indexes."""
    job_cols = (*JOB_FIELDS, "order_key")
    at = {name: len(job_cols) + k for k, name in enumerate(OPENING_EVENT_FIELDS)}
    event_values = ", ".join(
        "x.d" if f == "data" else field(at[f], EVENT_TYPES.get(f))
        for f in EVENT_INSERT.split(", ")[1:]
    )
    # the payload's JSON text comes from the event's data (json keeps it; the jsonb row
    # would rewrite its numbers); a JSON null is SQL NULL, as json_populate_recordset has it
    job_values = ", ".join(
        _PAYLOAD_FROM_DATA if c == "payload" else field(k, JOB_TYPES.get(c))
        for k, c in enumerate(job_cols)
    )
    part, lane = job_cols.index("partition"), job_cols.index("lane")
    return f"""
WITH x AS (
  SELECT r, d, n::int - 1 AS slot
  FROM ROWS FROM (jsonb_array_elements(%(rows)s::jsonb), json_array_elements(%(data)s::json))
    WITH ORDINALITY AS x(r, d, n)
),
{base("SELECT count(*) FROM x")},
nf AS (
  INSERT INTO {s}.events ({EVENT_INSERT})
  SELECT base.b + 1 + x.slot, {event_values} FROM x CROSS JOIN base ORDER BY x.slot
  ON CONFLICT DO NOTHING
  RETURNING stream
),
w AS (SELECT x.* FROM x JOIN nf ON nf.stream = x.r->>{at["stream"]}),
jn AS (INSERT INTO {s}.jobs ({", ".join(job_cols)}) SELECT {job_values} FROM w x),
n AS ({notify(channel, f"(x.r->>{part})::int", f"x.r->>{lane}", "false", "w x")})
SELECT coalesce((SELECT array_agg(slot) FROM w), '{{}}'::int[]), (SELECT count(*) FROM n)
"""


def enqueue_one_sql(s: str, channel: str, *, dedupe: bool) -> str:
    """One new job stream of one JobEnqueued, from `encode.one_params`: scalar
    parameters (no JSON array to parse on the server), the event at this transaction's
    next position, the row, and the wake-up with the payload the caller wrote; one row
    back when the job was written. What a stream's first event fixes (its version,
    type and previous hash) is written as constants; what the row repeats of its event
    (`jobs._enqueued_fields`: the time, version, hash, trace, actor, dedupe key) is read
    from the inserted event, not sent twice; the columns a new row leaves NULL are left
    out (attempts: its default 0).

    With `dedupe` (the caller named a dedupe key) the event goes in with `ON CONFLICT
    DO NOTHING`: a seen key writes nothing. Without, the key is the job's own fresh id
    (`Engine.enqueued_change`), which no event holds, so the plain insert skips the
    speculative insertion (25k server instructions of ~400k, docs/performance.md); a
    collision, impossible but for a broken id generator, raises instead of deduping."""
    event_values = ", ".join(
        _FIRST_EVENT.get(c, f"%s::{EVENT_TYPES.get(c, 'text')}")
        for c in EVENT_INSERT.split(", ")[1:]
    )
    sent = (f"%s::{JOB_TYPES.get(c, 'text')}" for c in ONE_JOB_FIELDS)
    columns = (*ONE_JOB_FIELDS, "status", *(c for c, _ in ROW_FROM_EVENT))
    values = (*sent, "'PENDING'", *(v for _, v in ROW_FROM_EVENT))
    conflict = "\n  ON CONFLICT DO NOTHING" if dedupe else ""
    return f"""
WITH {base("1")},
e AS (
  INSERT INTO {s}.events ({EVENT_INSERT}) SELECT base.b + 1, {event_values} FROM base{conflict}
  RETURNING version, at, actor, trace_id, hash, dedupe_key
)
INSERT INTO {s}.jobs ({", ".join(columns)}) SELECT {", ".join(values)} FROM e
RETURNING pg_notify('{channel}', %s)
"""


#: the columns of a job stream's first event that `enqueue_one_sql` writes as constants
#: (`encode.opens_one` checks the event has them)
_FIRST_EVENT = {
    "version": "1",
    "type": f"'{EventType.JOB_ENQUEUED}'",
    "prev_hash": f"'{GENESIS_HASH}'",
}
#: the event's columns `Statements.enqueue_one` takes as parameters, in order
ONE_EVENT_FIELDS = tuple(c for c in EVENT_INSERT.split(", ")[1:] if c not in _FIRST_EVENT)


#: the row's columns `Statements.enqueue_one` takes as parameters (`encode.one_params`),
#: after the event's: those a JobEnqueued's row does not repeat from its event
ONE_JOB_FIELDS = (
    "id",
    "code",
    "target",
    "lane",
    "key",
    "partition",
    "version",
    "payload",
    "headers",
    "next_run_at",
    "traceparent",
    "order_key",
)
#: the row's columns it reads from the inserted event `e` (`jobs._enqueued_fields`)
ROW_FROM_EVENT = (
    ("dedupe_key", "e.dedupe_key"),
    ("created_at", "e.at"),
    ("updated_at", "e.at"),
    ("stream_version", "e.version"),
    ("last_hash", "e.hash"),
    ("trace_id", "e.trace_id"),
    ("actor", "e.actor::jsonb"),
)
