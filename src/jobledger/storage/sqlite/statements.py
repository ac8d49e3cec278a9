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
