"""The SQL texts of the SQLite store, built once from the row field lists."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from jobledger.domain.jobs import TRANSITION_FIELDS
from jobledger.storage import rows

JOB_COLUMNS = (*rows.JOB_FIELDS, "order_key")
#: what an event row is written with, in the order `encode.encode_event` gives them
EVENT_COLUMNS = (
    "stream",
    "version",
    "type",
    "data",
    "at",
    "actor",
    "trace_id",
    "prev_hash",
    "hash",
    "dedupe_key",
)


def q(name: str) -> str:
    return f'"{name}"'


def upsert_sql(table: str, columns: Sequence[str], key: str) -> str:
    names = ", ".join(q(c) for c in columns)
    marks = ", ".join("?" for _ in columns)
    updates = ", ".join(f"{q(c)} = excluded.{q(c)}" for c in columns if c != key)
    return (
        f"INSERT INTO {table} ({names}) VALUES ({marks})"
        f" ON CONFLICT ({q(key)}) DO UPDATE SET {updates}"
    )


UPSERT_JOB = upsert_sql("jobs", JOB_COLUMNS, "id")
UPDATE_JOB = f"UPDATE jobs SET {', '.join(f'{q(c)} = ?' for c in TRANSITION_FIELDS)} WHERE id = ?"
UPSERT_SCHEDULE = upsert_sql("schedules", rows.SCHEDULE_FIELDS, "code")
INSERT_EVENT = (
    f"INSERT INTO events ({', '.join(q(c) for c in EVENT_COLUMNS)})"
    f" VALUES ({', '.join('?' for _ in EVENT_COLUMNS)})"
)
JOB_COLUMNS_SQL = ", ".join(q(c) for c in rows.JOB_FIELDS)
JOB_SELECT = f"SELECT {JOB_COLUMNS_SQL} FROM jobs"


def job_array_sql(sql: str) -> str:
    """The rows of a `JOB_SELECT` statement as one JSON array of arrays (one row out)."""
    return f"SELECT json_group_array(json_array({JOB_COLUMNS_SQL})) FROM ({sql})"


SCHEDULE_SELECT = f"SELECT {', '.join(q(c) for c in rows.SCHEDULE_FIELDS)} FROM schedules"
#: in the order `encode.decode_event` unpacks
EVENT_SELECT = (
    "SELECT position, stream, version, type, data, at, actor, trace_id, prev_hash, hash FROM events"
)


#: rows per multi-row statement of an outcome batch (SQLite binds at most 32,766
#: parameters; an event row has 10, a job update 1 + the transition fields)
ROWS_PER_STATEMENT = 100


@cache
def insert_events_sql(count: int) -> str:
    """`INSERT_EVENT` for `count` rows in one statement."""
    row = f"({', '.join('?' for _ in EVENT_COLUMNS)})"
    names = ", ".join(q(c) for c in EVENT_COLUMNS)
    return f"INSERT INTO events ({names}) VALUES {', '.join(row for _ in range(count))}"


@cache
def update_jobs_sql(count: int) -> str:
    """`UPDATE_JOB` for `count` rows in one statement: values (id, *TRANSITION_FIELDS)."""
    row = f"({', '.join('?' for _ in range(1 + len(TRANSITION_FIELDS)))})"
    sets = ", ".join(f"{q(c)} = v.column{i + 2}" for i, c in enumerate(TRANSITION_FIELDS))
    return (
        f"UPDATE jobs SET {sets} FROM (VALUES {', '.join(row for _ in range(count))}) AS v"
        " WHERE jobs.id = v.column1"
    )


# --- outcome batches as one statement per kind of write: the rows as one JSON array ------
# (`writes.apply_group`). The SQL text is fixed, so the statement is prepared once per
# connection, and a batch of any size is one step of the engine — one hand-back of the
# GIL by the writer thread — where multi-row VALUES statements take one per 100 rows.
# Every value is a JSON string, integer or null, which `json_extract` returns as the
# same SQL text, integer or NULL that binding it would store.


def _json_column(index: int, source: str = "value") -> str:
    return f"json_extract({source}, '$[{index}]')"


#: the rows' versions, as a JSON object id -> stream_version (one row out: one step)
JOB_VERSIONS_JSON = (
    "SELECT json_group_object(j.id, j.stream_version)"
    " FROM json_each(?) AS v CROSS JOIN jobs AS j ON j.id = v.value"
)
#: events from a JSON array of `EVENT_COLUMNS` arrays, in array order (their positions)
INSERT_EVENTS_JSON = (
    f"INSERT INTO events ({', '.join(q(c) for c in EVENT_COLUMNS)})"
    f" SELECT {', '.join(_json_column(i) for i in range(len(EVENT_COLUMNS)))}"
    " FROM json_each(?) ORDER BY key"
)
#: the job rows whose ids are in a JSON array
DELETE_JOBS_JSON = "DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?))"
#: `UPDATE_JOB` from a JSON array of [id, *TRANSITION_FIELDS] arrays
UPDATE_JOBS_JSON = (
    "UPDATE jobs SET "
    + ", ".join(
        f"{q(c)} = {_json_column(i + 1, 'v.value')}" for i, c in enumerate(TRANSITION_FIELDS)
    )
    + f" FROM json_each(?) AS v WHERE jobs.id = {_json_column(0, 'v.value')}"
)
