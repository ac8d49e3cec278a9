"""Pieces of SQL text the PostgreSQL statements share (pure: no I/O): the column
lists and types of the log and the queue, the wake-up `pg_notify`, the position base of
a writing transaction, and a positional jsonb field read."""

from __future__ import annotations

from jobledger.storage.postgres.schema import ORDINAL_BITS
from jobledger.storage.rows import JOB_FIELDS, SCHEDULE_FIELDS

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
    without reading the log; it used to look up the range's highest position on the
    primary key, 51k of the single enqueue's ~400k server instructions
    (docs/postgres.md "Log positions that readers never skip")."""
    taken = f"coalesce(nullif(current_setting('{ORDINAL_SETTING}', true), ''), '0')::bigint"
    return f"""base AS (
  SELECT (pg_current_xact_id()::text::bigint << {ORDINAL_BITS})
    + set_config('{ORDINAL_SETTING}', ({taken} + k.n)::text, true)::bigint - k.n AS b
  FROM (SELECT ({count})::bigint AS n) k
)"""
