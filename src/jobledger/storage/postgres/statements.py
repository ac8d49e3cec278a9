"""The SQL text of the PostgreSQL adapter, built once per schema (pure: no I/O).

The write path is one statement per call (`apply_sql`): data-modifying CTEs do the
compare-and-set updates, the deletes, the new streams' inserts (`ON CONFLICT DO NOTHING`
on the log's unique indexes: a lost race or a seen dedupe key drops that change alone
and never aborts the transaction), the winners' events, and the `pg_notify` — so a
fast-lane outcome batch of hundreds of rows is a single round trip. Enqueues have a
smaller statement of their own (`enqueue_sql`) and, for large batches, COPY texts.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobledger.domain.jobs import TRANSITION_FIELDS
from jobledger.storage.postgres.enqueue_statements import (
    OPENING_EVENT_FIELDS as OPENING_EVENT_FIELDS,
)
from jobledger.storage.postgres.enqueue_statements import enqueue_one_sql, enqueue_sql
from jobledger.storage.postgres.mark_statement import first_mark_sql, guarded_update_sql
from jobledger.storage.postgres.schema import ORDINAL_BITS, quoted_schema
from jobledger.storage.postgres.sql_parts import EVENT_COLUMNS as EVENT_COLUMNS
from jobledger.storage.postgres.sql_parts import EVENT_INSERT, base, copy_types, notify
from jobledger.storage.postgres.sql_parts import EVENT_TYPES as EVENT_TYPES
from jobledger.storage.postgres.sql_parts import JOB_COLUMNS as JOB_COLUMNS
from jobledger.storage.postgres.sql_parts import JOB_SELECT as JOB_SELECT
from jobledger.storage.postgres.sql_parts import JOB_TYPES as JOB_TYPES
from jobledger.storage.postgres.sql_parts import SCHEDULE_COLUMNS as SCHEDULE_COLUMNS
from jobledger.storage.rows import JOB_FIELDS, SCHEDULE_FIELDS


def _compare_and_set(s: str, kind: str, table: str, key: str, columns: str, rows: str) -> str:
    """The compare-and-set update and delete of `kind`'s streams that already exist: CTEs
    `<k>u` and `<k>d` (k = the kind's first letter), each returning the applied changes."""
    k = kind[0]
    return f"""{k}u AS (
  UPDATE {s}.{table} t SET {columns}
  FROM ok JOIN {rows} r ON r.{key} = ok.ident
  WHERE ok.kind = '{kind}' AND NOT ok.isnew AND NOT ok.del
    AND t.{key} = ok.ident AND t.stream_version = ok.expected
  RETURNING ok.i
),
{k}d AS (
  DELETE FROM {s}.{table} t USING ok
  WHERE ok.kind = '{kind}' AND NOT ok.isnew AND ok.del
    AND t.{key} = ok.ident AND t.stream_version = ok.expected
  RETURNING ok.i
),
"""


def _set(fields: tuple[str, ...], key: str) -> str:
    cols = [f for f in fields if f != key]
    return f"({', '.join(cols)}) = ({', '.join('r.' + c for c in cols)})"


@dataclass(frozen=True, slots=True)
class Statements:
    schema: str
    channel: str
    apply: str
    apply_guarded: str
    #: one job row's update under the guard (an at-most-once mark alone)
    guarded_update: str
    #: the same for a row the lane was handed by a wake-up, not read: first of its chain
    first_mark: str
    #: every change opens a new stream (no updates, no deletes)
    insert_new: str
    #: the enqueue path: every change opens a job stream with one event
    enqueue: str
    #: the same for a single job, with scalar parameters, when its dedupe key is its own
    #: id, and with the caller's dedupe key (`enqueue_one_sql`); as bytes, which psycopg
    #: takes as they are (a text query is encoded again on every call)
    enqueue_one: bytes
    enqueue_one_dedupe: bytes
    #: `Store.next_version`: the key's counter row, counted up (its row lock held to commit)
    next_version: str
    #: the enqueue path for large batches: COPY the events and the rows (see store.py)
    last_position: str
    copy_events: str
    copy_event_types: tuple[str, ...]
    copy_jobs: str
    copy_job_types: tuple[str, ...]
    notify_jobs: str
    fast_pending_first: str
    fast_pending_after: str
    long_candidates: str
    running_codes: str
    inflight: str
    inflight_in: str
    pending_partitions: str
    due_partitions: str
    next_due_fast: str
    next_due_long: str
    running: str
    read_log: str


#: step 1 of a log read: the next transaction id (xid8) of a snapshot taken *before*
#: the transactions still running in this database are listed (32-bit xids).
RUNNING = """
SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
  array(
    SELECT backend_xid::text::bigint FROM pg_stat_activity
    WHERE datname = current_database() AND backend_xid IS NOT NULL
    UNION ALL
    SELECT transaction::text::bigint FROM pg_prepared_xacts
    WHERE database = current_database())"""


def horizon(xmax: int, running: list[int]) -> int:
    """The first event position a log read must not return yet.

    `xmax` is the xid8 every transaction below had been assigned when the running ones
    were listed; `running` are their 32-bit xids. A transaction below the lowest
    running one that is not listed had finished before the list was read, so the next
    statement's snapshot sees all its events. A listed xid at or above `xmax` (assigned
    after the snapshot) does not lower the horizon.
    """
    lowest = xmax
    for xid in running:
        behind = (xmax - xid) % (1 << 32)
        if 0 < behind < (1 << 31):
            lowest = min(lowest, xmax - behind)
    return lowest << ORDINAL_BITS


def build(schema: str) -> Statements:
    s = quoted_schema(schema)
    channel = f"{schema}_wake"
    job_set = _set(("id", *TRANSITION_FIELDS), "id")  # identity fields never change
    schedule_set = _set(SCHEDULE_FIELDS, "code")
    event_values = (
        "base.b + 1 + e.slot, e.stream, e.version, e.type, e.data, e.at, e.actor,"
        " e.trace_id, e.prev_hash, e.hash, e.dedupe_key"
    )

    def apply_sql(guarded: bool, new_only: bool = False) -> str:
        held = (
            f"held AS (SELECT partition FROM {s}.partitions WHERE owner = %(pod)s"
            " AND lease_until > %(now)s AND partition IN (SELECT part FROM c) FOR SHARE),"
            " ok AS (SELECT * FROM c WHERE c.part IS NULL"
            " OR c.part IN (SELECT partition FROM held)),"
            if guarded
            else "ok AS (SELECT * FROM c),"
        )
        existing = (
            ""
            if new_only
            else (
                _compare_and_set(s, "job", "jobs", "id", job_set, "jr")
                + _compare_and_set(s, "schedule", "schedules", "code", schedule_set, "sr")
            )
        )
        winners = (
            "SELECT i FROM nw"
            if new_only
            else "SELECT i FROM ju UNION ALL SELECT i FROM jd UNION ALL SELECT i FROM su"
            " UNION ALL SELECT i FROM sd UNION ALL SELECT i FROM nw"
        )
        return f"""
WITH c AS (
  SELECT * FROM json_to_recordset(%(changes)s::json) AS c(
    i int, stream text, kind text, ident text, expected int, isnew bool, del bool,
    part int, lane text)
),
{held}
jr AS (SELECT * FROM json_populate_recordset(NULL::{s}.jobs, %(jobs)s::json)),
sr AS (SELECT * FROM json_populate_recordset(NULL::{s}.schedules, %(schedules)s::json)),
ev AS (
  SELECT * FROM json_to_recordset(%(events)s::json) AS e(
    i int, slot int, fst bool, stream text, version int, type text, data json,
    at timestamptz, actor json, trace_id text, prev_hash text, hash text, dedupe_key text)
),
{base("SELECT count(*) FROM ev")},
{existing}nf AS (
  INSERT INTO {s}.events ({EVENT_INSERT})
  SELECT {event_values} FROM ev e JOIN ok ON ok.i = e.i CROSS JOIN base
  WHERE ok.isnew AND e.fst ORDER BY e.slot
  ON CONFLICT DO NOTHING
  RETURNING stream
),
nw AS (SELECT ok.i, ok.kind, ok.ident, ok.del FROM ok JOIN nf ON nf.stream = ok.stream),
jn AS (
  INSERT INTO {s}.jobs ({JOB_COLUMNS}, order_key)
  SELECT {", ".join("r." + c for c in (*JOB_FIELDS, "order_key"))}
  FROM jr r JOIN nw ON nw.ident = r.id WHERE nw.kind = 'job' AND NOT nw.del
),
sn AS (
  INSERT INTO {s}.schedules ({SCHEDULE_COLUMNS})
  SELECT {", ".join("r." + c for c in SCHEDULE_FIELDS)}
  FROM sr r JOIN nw ON nw.ident = r.code WHERE nw.kind = 'schedule' AND NOT nw.del
),
w AS ({winners}),
er AS (
  INSERT INTO {s}.events ({EVENT_INSERT})
  SELECT {event_values} FROM ev e JOIN w ON w.i = e.i CROSS JOIN base
  WHERE NOT e.fst ORDER BY e.slot
),
n AS ({notify(channel, "c.part", "c.lane", "c.kind = 'schedule'", "w JOIN c ON c.i = w.i")})
SELECT coalesce((SELECT array_agg(i) FROM w), '{{}}'::int[]), (SELECT count(*) FROM n)
"""

    pending = f"FROM {s}.jobs WHERE status = 'PENDING' AND lane = 'fast' AND partition = %(p)s"
    order = "ORDER BY order_key, version, id LIMIT %(limit)s"
    return Statements(
        schema=s,
        channel=channel,
        apply=apply_sql(False),
        apply_guarded=apply_sql(True),
        guarded_update=guarded_update_sql(s, channel),
        first_mark=first_mark_sql(s, channel),
        insert_new=apply_sql(False, new_only=True),
        enqueue=enqueue_sql(s, channel),
        enqueue_one=enqueue_one_sql(s, channel, dedupe=False).encode(),
        enqueue_one_dedupe=enqueue_one_sql(s, channel, dedupe=True).encode(),
        next_version=f"INSERT INTO {s}.counters AS c (key, value) VALUES (%s, 1)"
        " ON CONFLICT (key) DO UPDATE SET value = c.value + 1 RETURNING value",
        last_position=f"WITH {base('%s')} SELECT b FROM base",
        copy_events=f"COPY {s}.events ({EVENT_INSERT}) FROM STDIN (FORMAT binary)",
        copy_event_types=copy_types(EVENT_INSERT, EVENT_TYPES),
        copy_jobs=f"COPY {s}.jobs ({JOB_COLUMNS}, order_key) FROM STDIN (FORMAT binary)",
        copy_job_types=copy_types(f"{JOB_COLUMNS}, order_key", JOB_TYPES),
        notify_jobs="SELECT count(*) FROM ("
        + notify(
            channel,
            "x.part",
            "x.lane",
            "false",
            "unnest(%(parts)s::int[], %(lanes)s::text[]) AS x(part, lane)",
        )
        + ") n",
        fast_pending_first=f"SELECT {JOB_SELECT} {pending} {order}",
        fast_pending_after=f"SELECT {JOB_SELECT} {pending} AND order_key > %(after)s {order}",
        long_candidates=f"""
SELECT {JOB_SELECT} FROM (
  (SELECT * FROM {s}.jobs
    WHERE status = 'PENDING' AND lane = 'long' AND next_run_at <= %(now)s
    ORDER BY next_run_at, id LIMIT %(limit)s)
  UNION ALL
  (SELECT * FROM {s}.jobs
    WHERE status = 'RUNNING' AND lane = 'long' AND lease_until <= %(now)s
    ORDER BY next_run_at, id LIMIT %(limit)s)
) x ORDER BY next_run_at, id LIMIT %(limit)s""",
        running_codes=(
            f"SELECT DISTINCT running_code FROM {s}.jobs WHERE status = 'RUNNING'"
            " AND running_code IS NOT NULL AND lease_until > %(now)s"
        ),
        inflight=(
            # in-flight rows stay PENDING: the partial index jobs_fast_pending finds them
            f"SELECT {JOB_SELECT} FROM {s}.jobs WHERE partition = %(p)s AND lane = 'fast'"
            " AND status = 'PENDING' AND inflight_token IS NOT NULL ORDER BY id"
        ),
        inflight_in=(
            f"SELECT {JOB_SELECT} FROM {s}.jobs WHERE partition = ANY(%(parts)s)"
            " AND lane = 'fast' AND status = 'PENDING' AND inflight_token IS NOT NULL"
            " ORDER BY partition, id"
        ),
        pending_partitions=f"""
SELECT p.n FROM unnest(%(parts)s::int[]) AS p(n) WHERE EXISTS (
  SELECT 1 FROM {s}.jobs WHERE status = 'PENDING' AND lane = 'fast' AND partition = p.n
) ORDER BY p.n""",
        due_partitions=f"""
SELECT p.n FROM unnest(%(parts)s::int[]) AS p(n) WHERE EXISTS (
  SELECT 1 FROM {s}.jobs WHERE status = 'PENDING' AND lane = 'fast' AND partition = p.n
  AND next_run_at <= %(due_by)s
) ORDER BY p.n""",
        next_due_fast=f"""
SELECT min(d.next_run_at) FROM unnest(%(parts)s::int[]) AS p(n)
CROSS JOIN LATERAL (
  SELECT next_run_at FROM {s}.jobs
  WHERE status = 'PENDING' AND lane = 'fast' AND partition = p.n
  ORDER BY next_run_at LIMIT 1
) d""",
        next_due_long=(
            f"SELECT min(next_run_at) FROM {s}.jobs WHERE status = 'PENDING' AND lane = 'long'"
        ),
        # Only events of transactions older than every one still running in this
        # database: those are final (see `horizon` and docs/postgres.md).
        running=RUNNING,
        # `position + 0`: the horizon is a filter, not the index's second bound. With
        # both bounds on the index, a table without statistics (never analyzed: a bulk
        # load, autovacuum off) is estimated at 0.5 % of its rows, fewer than a page,
        # and the planner sorted every event after `after` for each page (50 ms a page
        # at 1M events, quadratic for verify and replay); with one bound the estimate is
        # a third of the table and the page comes off the index in order (≈ 4 ms).
        read_log=f"""
SELECT {EVENT_COLUMNS} FROM {s}.events
WHERE position > %(after)s AND position + 0 < %(below)s
ORDER BY position LIMIT %(limit)s""",
    )
