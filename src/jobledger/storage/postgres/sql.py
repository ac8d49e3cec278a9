"""Every SQL text of the PostgreSQL store, built once per schema (pure: no I/O).

The statements are f-string templates over the row field lists, the schema and the
wake-up channel: `build(schema)` fills them into one `Statements`; statements over a
varying shape (the admin listing's filters) are built per call by a function here. The
text is what the server plans, so a change to it is a change to the plans.

The write path is one statement per call (`Statements.apply`): data-modifying CTEs do
the compare-and-set updates, the deletes, the new streams' inserts (`ON CONFLICT DO
NOTHING` on the log's unique indexes: a lost race or a seen dedupe key drops that change
alone and never aborts the transaction), the winners' events, and the `pg_notify` — so a
fast-lane outcome batch of hundreds of rows is a single round trip. Enqueues have
smaller statements of their own (`enqueue_sql`, `enqueue_one_sql`) and, for large
batches, COPY texts. The at-most-once mark alone has its own too (`guarded_update_sql`,
`first_mark_sql`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from jobledger.domain.events import GENESIS_HASH, EventType
from jobledger.domain.jobs import TRANSITION_FIELDS
from jobledger.storage.postgres.schema import ORDINAL_BITS, quoted_schema
from jobledger.storage.rows import JOB_FIELDS, SCHEDULE_FIELDS

# --- shared pieces: column lists and types, the wake-up, the position base ----------------


JOB_COLUMNS = ", ".join(JOB_FIELDS)
#: `JOB_COLUMNS` as the reads select them: the JSON columns as their text (decoded by
#: `rows.job_from_text_row`; `::text` of json is its text as stored, of jsonb what
#: jsonb's output gives anyway)
JOB_SELECT = ", ".join(
    f"{name}::text AS {name}" if name in ("payload", "headers", "actor") else name
    for name in JOB_FIELDS
)
SCHEDULE_COLUMNS = ", ".join(SCHEDULE_FIELDS)
EVENT_COLUMNS = "position, stream, version, type, data, at, actor, trace_id, prev_hash, hash"
EVENT_INSERT = EVENT_COLUMNS + ", dedupe_key"

#: a NOTIFY payload must stay under 8000 bytes; past this the hint says "everything"
MAX_NOTIFY = 7900

#: the SQL type of every `jobs` column that is not text (a test compares with the table)
JOB_TYPES = {
    "partition": "integer",
    "version": "bigint",
    "payload": "json",
    "attempts": "integer",
    "next_run_at": "timestamptz",
    "created_at": "timestamptz",
    "updated_at": "timestamptz",
    "stream_version": "integer",
    "headers": "jsonb",
    "actor": "jsonb",
    "lease_until": "timestamptz",
    "closed_at": "timestamptz",
    "order_key": "bytea",
}
#: likewise for the `events` columns
EVENT_TYPES = {
    "position": "bigint",
    "version": "integer",
    "data": "json",
    "at": "timestamptz",
    "actor": "json",
}
#: the type psycopg dumps a binary COPY value of a column of each SQL type as; json and
#: jsonb values arrive pre-encoded in their binary input form (`encode.job_copy_row`)
COPY_DUMPERS = {
    "integer": "int4",
    "bigint": "int8",
    "timestamptz": "timestamptz",
    "bytea": "bytea",
    "json": "bytea",
    "jsonb": "bytea",
}


def copy_types(columns: str, types: dict[str, str]) -> tuple[str, ...]:
    """The `Copy.set_types` list of a binary COPY of `columns` (text unless in `types`)."""
    return tuple(COPY_DUMPERS[types[c]] if c in types else "text" for c in columns.split(", "))


def field(index: int, sql_type: str | None) -> str:
    """Element `index` of a positional jsonb row `x.r`, as a value of `sql_type`."""
    if sql_type == "jsonb":  # a JSON null is SQL NULL, as json_populate_recordset has it
        return f"nullif(x.r->{index}, 'null')"
    text = f"x.r->>{index}"
    return f"({text})::{sql_type}" if sql_type else text


def notify(channel: str, parts: str, lanes: str, schedules: str, source: str) -> str:
    """The wake-up `pg_notify` over the winners in `source` (none: no NOTIFY)."""
    return f"""
  SELECT pg_notify('{channel}', CASE WHEN length(x.p) > {MAX_NOTIFY} THEN '*' ELSE x.p END)
  FROM (
    SELECT json_build_object(
      'p', coalesce(array_agg(DISTINCT {parts}) FILTER (WHERE {parts} IS NOT NULL), '{{}}'),
      'l', coalesce(array_agg(DISTINCT {lanes}) FILTER (WHERE {lanes} IS NOT NULL), '{{}}'),
      's', coalesce(bool_or({schedules}), false))::text AS p,
      count(*) AS k
    FROM {source}
  ) x
  WHERE x.k > 0
"""


#: the transaction-local setting that counts the positions a transaction has taken
ORDINAL_SETTING = "jobledger.ordinal"


def base(count: str) -> str:
    """`base AS (... b)`: the position before the `count` (an SQL expression) that the
    statement takes in this transaction's range, `b + 1` to `b + count`. The ordinals
    taken so far are counted in `ORDINAL_SETTING`, set `LOCAL` (so it ends, and rolls
    back to a savepoint, with the rows it numbered): a statement reserves its count
    without reading the log, where looking up the range's highest position on the
    primary key cost the single enqueue a further index probe (docs/postgres.md "Log
    positions that readers never skip")."""
    taken = f"coalesce(nullif(current_setting('{ORDINAL_SETTING}', true), ''), '0')::bigint"
    return f"""base AS (
  SELECT (pg_current_xact_id()::text::bigint << {ORDINAL_BITS})
    + set_config('{ORDINAL_SETTING}', ({taken} + k.n)::text, true)::bigint - k.n AS b
  FROM (SELECT ({count})::bigint AS n) k
)"""


# --- the enqueue statements: new job streams of one event each ---------------------------


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
    speculative insertion (docs/performance.md); a collision, impossible but for a
    broken id generator, raises instead of deduping."""
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


# --- the at-most-once mark alone: one row's update under the lease guard ------------------
# The general apply statement parses JSON arrays of changes, rows and events and runs
# every branch of the compare-and-set for a batch; a mark alone (the first send of an
# idle at-most-once partition: the handler waits for its commit) needs one of them. The
# guard is the general statement's: the partition's lease row, held by this pod and not
# expired, locked `FOR SHARE` until the commit; then the compare-and-set on the row's
# stream version. The first mark (`first_mark_sql`, `Writes.mark_first`) is that update
# for a row a single enqueue's wake-up handed over, not read: what the read would have
# told the lane, the statement checks (no PENDING row of the same partition, target and
# order key comes before it in (version, id) order).


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
  RETURNING id, partition, inflight_token
),
fm AS (
  INSERT INTO {s}.marks (partition, id)
  SELECT partition, id FROM u WHERE inflight_token IS NOT NULL
  ON CONFLICT (partition) DO UPDATE SET id = excluded.id
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
    chain. Parameters: `guarded_update_sql`'s with `encode.first_mark_params(job)` after
    the expected stream version.

    It sends no wake-up (the payload parameter is taken and left unused). A mark makes
    nothing runnable: the row goes in flight, only the pod holding the partition's
    lease works on it, and that pod's worker is the one marking (it passes over the
    partition again after the round anyway). A NOTIFY in the mark's transaction would
    make its commit take PostgreSQL's notification-queue lock, which serialises every
    notifying commit of the server up to the end of its WAL flush: on the
    commit → handler path that queued the mark behind other transactions' flushes, and
    every pod's listener was sent a wake-up it had no use for (docs/performance.md)."""
    return _statement(s, channel, first=True)


# --- the general apply statement and every statement of a schema -----------------------


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


def inflight_marks(s: str) -> str:
    """CTE `fm` of the general apply statement: each partition's `marks` row (migration
    8) names the row its update (`ju`) marked, in the statement that sets the mark. The
    lane marks at most one row a partition until that row's outcome is written, so the
    row is overwritten by the partition's next mark and nothing removes it when a mark
    ends: a heap-only update a mark, nothing an outcome. A batch that marks several rows
    of one partition (never the lane's) names its last one; the lane judges a marked row
    its pages meet that no takeover judged (`PartitionPass`)."""
    return f"""fm AS (
  INSERT INTO {s}.marks (partition, id)
  SELECT DISTINCT ON (ok.part) ok.part, ok.ident
  FROM ju JOIN ok ON ok.i = ju.i JOIN jr r ON r.id = ok.ident
  WHERE r.inflight_token IS NOT NULL
  ORDER BY ok.part, ok.i DESC
  ON CONFLICT (partition) DO UPDATE SET id = excluded.id
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
    #: the log read's first step: the running transactions (see `log.horizon`)
    running: str
    read_log: str
    read_stream: str
    read_events_at: str
    read_log_by_stream: str
    read_log_newest: str
    #: who holds the dedupe keys `%(keys)s` (served by the log's unique dedupe index)
    dedupe_holders: str
    # coordination rows
    seed_partitions: str
    heartbeat: str
    remove_worker: str
    live_workers: str
    live_pauses: str
    leases: str
    take_partition: str
    renew_partitions: str
    release_partitions: str
    beat: str
    take_partitions: str
    # taking over from pods whose liveness token is free (`liveness.PgLiveness`)
    take_dead: str
    claims_of: str
    # admin reads
    get_job: str
    get_schedule: str
    list_schedules: str
    # the archive's cut
    closed_streams: str
    delete_streams: str
    # projection state
    load_checkpoint: str
    save_checkpoint: str
    delete_jobs: str
    delete_schedules: str
    #: the `inflight` rows of the rebuilt read model (after `insert_jobs`)
    rebuild_inflight: str
    insert_jobs: str
    insert_schedules: str
    notify_everything: str


#: step 1 of a log read: the next transaction id (xid8) of a snapshot taken *before*
#: the transactions still running in this database are listed (32-bit xids; see
#: `log.horizon`).
RUNNING = """
SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
  array(
    SELECT backend_xid::text::bigint FROM pg_stat_activity
    WHERE datname = current_database() AND backend_xid IS NOT NULL
    UNION ALL
    SELECT transaction::text::bigint FROM pg_prepared_xacts
    WHERE database = current_database())"""


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
                + inflight_marks(s)
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

    pending = (
        f"FROM {s}.jobs WHERE status = 'PENDING' AND lane = 'fast'"
        " AND partition = (SELECT %(p)s::integer)"
    )
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
        # The partition and the bounds are sub-selects (`with_limit` says why): the
        # planner estimates them the same way whether it plans for this call or for all.
        fast_pending_after=f"SELECT {JOB_SELECT} {pending}"
        f" AND order_key > (SELECT %(after)s::bytea) {order}",
        long_candidates=f"""
SELECT {JOB_SELECT} FROM (
  (SELECT * FROM {s}.jobs
    WHERE status = 'PENDING' AND lane = 'long' AND next_run_at <= (SELECT %(now)s::timestamptz)
    ORDER BY next_run_at, id LIMIT %(limit)s)
  UNION ALL
  (SELECT * FROM {s}.jobs
    WHERE status = 'RUNNING' AND lane = 'long' AND lease_until <= (SELECT %(now)s::timestamptz)
    ORDER BY next_run_at, id LIMIT %(limit)s)
) x ORDER BY next_run_at, id LIMIT %(limit)s""",
        running_codes=(
            f"SELECT DISTINCT running_code FROM {s}.jobs WHERE status = 'RUNNING'"
            " AND running_code IS NOT NULL AND lease_until > %(now)s"
        ),
        # The in-flight rows through the `marks` table (a row per partition naming its
        # last marked row), each row by the primary key: a join the planner cannot turn
        # into a scan of `jobs` (LATERAL is a nested loop), however stale the
        # statistics. The row's own mark decides: a mark that ended leaves its name.
        inflight=f"""
SELECT j.* FROM {s}.marks f CROSS JOIN LATERAL (
  SELECT {JOB_SELECT} FROM {s}.jobs WHERE id = f.id AND partition = f.partition
    AND lane = 'fast' AND status = 'PENDING' AND inflight_token IS NOT NULL
) j WHERE f.partition = %(p)s ORDER BY j.id""",
        inflight_in=f"""
SELECT j.* FROM {s}.marks f CROSS JOIN LATERAL (
  SELECT {JOB_SELECT} FROM {s}.jobs WHERE id = f.id AND partition = f.partition
    AND lane = 'fast' AND status = 'PENDING' AND inflight_token IS NOT NULL
) j WHERE f.partition = ANY(%(parts)s) ORDER BY j.partition, j.id""",
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
        # database: those are final (see `log.horizon` and docs/postgres.md).
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
        read_stream=f"SELECT {EVENT_COLUMNS} FROM {s}.events WHERE stream = %s ORDER BY version",
        read_events_at=f"SELECT {EVENT_COLUMNS} FROM {s}.events"
        " WHERE (stream, version) IN (SELECT * FROM unnest(%s::text[], %s::int[]))",
        read_log_by_stream=f"SELECT {EVENT_COLUMNS} FROM {s}.events"
        " WHERE (stream, version) > (%s, %s) ORDER BY stream, version LIMIT %s",
        read_log_newest=f"SELECT {EVENT_COLUMNS} FROM {s}.events WHERE position < %s"
        " ORDER BY position DESC LIMIT %s",
        dedupe_holders=(
            f"SELECT dedupe_key, stream FROM {s}.events WHERE dedupe_key = ANY(%(keys)s::text[])"
        ),
        # the primary key makes duplicates impossible; racing seeders insert each row once
        seed_partitions=f"INSERT INTO {s}.partitions (partition) SELECT generate_series(0, %s - 1)"
        " ON CONFLICT DO NOTHING",
        heartbeat=f"INSERT INTO {s}.workers (pod, heartbeat_at, paused) VALUES (%s, %s, %s)"
        " ON CONFLICT (pod) DO UPDATE SET heartbeat_at = excluded.heartbeat_at,"
        " paused = excluded.paused",
        live_pauses=f"SELECT pod, paused FROM {s}.workers"
        " WHERE heartbeat_at > %s AND paused IS NOT NULL ORDER BY pod",
        remove_worker=f"DELETE FROM {s}.workers WHERE pod = %s",
        live_workers=f"SELECT pod FROM {s}.workers WHERE heartbeat_at > %s ORDER BY pod",
        leases=f"SELECT partition, owner, lease_until FROM {s}.partitions ORDER BY partition",
        take_partition=f"UPDATE {s}.partitions SET owner = %(pod)s, lease_until = %(until)s"
        " WHERE partition = %(p)s"
        " AND (owner IS NULL OR owner = %(pod)s OR lease_until <= %(now)s)",
        renew_partitions=f"UPDATE {s}.partitions SET lease_until = %(until)s"
        " WHERE owner = %(pod)s AND partition = ANY(%(parts)s) AND lease_until > %(now)s"
        " RETURNING partition",
        release_partitions=f"UPDATE {s}.partitions SET owner = NULL, lease_until = NULL"
        " WHERE owner = %s AND partition = ANY(%s)",
        # Liveness, renewals, live pods and the lease rows in one statement: the data-
        # modifying CTEs run once; the lease rows are read with the renewals applied (a
        # statement does not see its own CTEs' writes, so they are joined in).
        beat=f"""
WITH hb AS (
  INSERT INTO {s}.workers (pod, heartbeat_at, liveness, paused)
  VALUES (%(pod)s, %(now)s, %(token)s, %(paused)s)
  ON CONFLICT (pod) DO UPDATE
  SET heartbeat_at = excluded.heartbeat_at, liveness = excluded.liveness,
      paused = excluded.paused
  RETURNING pod
), renewed AS (
  UPDATE {s}.partitions SET lease_until = %(until)s
  WHERE owner = %(pod)s AND partition = ANY(%(renew)s) AND lease_until > %(now)s
  RETURNING partition, owner, lease_until
)
SELECT p.partition, coalesce(r.owner, p.owner), coalesce(r.lease_until, p.lease_until),
       r.partition IS NOT NULL,
       (SELECT coalesce(array_agg(w.pod ORDER BY w.pod), '{{}}') FROM {s}.workers w
        WHERE w.heartbeat_at > %(since)s),
       (SELECT count(*) FROM hb),
       (SELECT coalesce(array_agg(w.pod ORDER BY w.pod), '{{}}') FROM {s}.workers w
        WHERE w.heartbeat_at > %(since)s AND w.liveness)
FROM {s}.partitions p LEFT JOIN renewed r USING (partition)
ORDER BY p.partition""",
        # Rows another pod is updating right now are skipped, not waited for (`SKIP
        # LOCKED`), so two pods taking overlapping sets never deadlock; a row locked
        # here is re-checked at its latest version before it is taken.
        take_partitions=f"""
WITH free AS (
  SELECT partition FROM {s}.partitions
  WHERE partition = ANY(%(parts)s)
    AND (owner IS NULL OR owner = %(pod)s OR lease_until <= %(now)s)
  ORDER BY partition FOR UPDATE SKIP LOCKED
)
UPDATE {s}.partitions p SET owner = %(pod)s, lease_until = %(until)s
FROM free WHERE p.partition = free.partition RETURNING p.partition""",
        # A dead pod's partitions, live leases included, and its workers row: it no
        # longer counts as a live pod, so the fair share is computed without it at once.
        take_dead=f"""
WITH gone AS (DELETE FROM {s}.workers WHERE pod = ANY(%(dead)s))
UPDATE {s}.partitions SET owner = %(pod)s, lease_until = %(until)s
WHERE owner = ANY(%(dead)s) RETURNING partition""",
        # through jobs_running_lease (RUNNING rows only)
        claims_of=f"SELECT {JOB_SELECT} FROM {s}.jobs WHERE status = 'RUNNING'"
        " AND lease_until IS NOT NULL AND lane = 'long' AND claimed_by = ANY(%(dead)s)"
        " ORDER BY next_run_at, id",
        get_job=f"SELECT {JOB_SELECT} FROM {s}.jobs WHERE id = %s",
        get_schedule=f"SELECT {SCHEDULE_COLUMNS} FROM {s}.schedules WHERE code = %s",
        list_schedules=f"SELECT {SCHEDULE_COLUMNS} FROM {s}.schedules ORDER BY code",
        closed_streams=f"SELECT e.stream FROM {s}.events e WHERE e.stream LIKE 'job:%%'"
        " GROUP BY e.stream HAVING max(e.at) < %s AND NOT EXISTS"
        f" (SELECT 1 FROM {s}.jobs j WHERE j.id = substr(e.stream, 5)) LIMIT %s",
        delete_streams=f"DELETE FROM {s}.events WHERE stream = ANY(%s)",
        load_checkpoint=f"SELECT position, state FROM {s}.checkpoints WHERE name = %s",
        save_checkpoint=f"INSERT INTO {s}.checkpoints (name, position, state) VALUES (%s, %s, %s)"
        " ON CONFLICT (name) DO UPDATE SET position = excluded.position,"
        " state = excluded.state",
        delete_jobs=f"DELETE FROM {s}.jobs",
        rebuild_inflight=f"DELETE FROM {s}.marks; INSERT INTO {s}.marks (partition, id)"
        f" SELECT DISTINCT ON (partition) partition, id FROM {s}.jobs"
        " WHERE inflight_token IS NOT NULL ORDER BY partition, id",
        delete_schedules=f"DELETE FROM {s}.schedules",
        insert_jobs=f"INSERT INTO {s}.jobs ({JOB_COLUMNS}, order_key) SELECT {JOB_COLUMNS}, order_key"
        f" FROM json_populate_recordset(NULL::{s}.jobs, %s::json)",
        insert_schedules=f"INSERT INTO {s}.schedules ({SCHEDULE_COLUMNS})"
        f" SELECT {SCHEDULE_COLUMNS}"
        f" FROM json_populate_recordset(NULL::{s}.schedules, %s::json)",
        notify_everything="SELECT pg_notify(%s, '*')",
    )


def with_limit(template: str, limit: int) -> str:
    """`template` with its `%(limit)s` written as the number `limit`.

    The lanes' page reads are prepared statements (psycopg prepares a statement from its
    fifth run on a connection). With the LIMIT a parameter, PostgreSQL's plan for
    unknown values assumes a tenth of the rows the other conditions leave: past ~100k
    pending rows that generic plan costs more than the custom plans, and the server
    plans the read again at every call (measured at 1M rows: 65-90 µs of planning per
    fast-lane page, ≈ 250 µs per long-lane read, against 3-4 µs). A LIMIT written in the
    text is known to the generic plan; the reads' other values (the partition, the
    keyset's order key, the long lane's `now`) are sub-selects, whose value no plan knows
    in advance, so the custom plans estimate them as the generic plan does (a third of
    the rows for a bound, not "nearly all"; the average partition, not this one's
    sample) and cost the same: the generic plan is kept. The limits come from
    the settings (a page, a batch): a few texts per store."""
    return template.replace("%(limit)s", str(int(limit)))


def list_jobs_sql(
    s: str,
    filters: Sequence[str],
    *,
    before: bool,
    after: bool,
    count_limit: bool,
) -> tuple[str, str]:
    """(page query, count query) of the admin listing: `filters` the names of the given
    filter columns (each `name = %(name)s`, so each one can use its index), keyset
    cursors on the id (`after`: oldest first), the count capped when asked."""
    where: list[str] = ["TRUE"]
    for name in filters:
        where.append(f"{name} = %({name})s")
    cond = " AND ".join(where)
    keyset = ""
    if before:
        keyset += " AND id < %(before)s"
    if after:
        keyset += " AND id > %(after)s"
    page = (
        f"SELECT {JOB_SELECT} FROM {s}.jobs WHERE {cond}{keyset}"
        f" ORDER BY id {'ASC' if after else 'DESC'}"
        " OFFSET %(offset)s LIMIT %(limit)s"
    )
    if not count_limit:
        return page, f"SELECT count(*) FROM {s}.jobs WHERE {cond}"
    count = (
        f"SELECT count(*) FROM (SELECT 1 FROM {s}.jobs WHERE {cond}"
        " LIMIT %(count_limit)s) AS capped"
    )
    return page, count
