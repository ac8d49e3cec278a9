"""The SQL texts of the SQLite store, built once from the row field lists."""

from __future__ import annotations

from collections.abc import Sequence

from jobledger.domain.jobs import TRANSITION_FIELDS
from jobledger.storage import rows

JOB_COLUMNS = (*rows.JOB_FIELDS, "order_key")
EVENT_COLUMNS = (*(f for f in rows.EVENT_FIELDS if f != "position"), "dedupe_key")


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
