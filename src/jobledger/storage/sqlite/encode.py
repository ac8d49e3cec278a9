"""SQLite values <-> the rows.py dicts: times as ISO text (sorts as time), JSON as text."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from jobledger.domain.events import Event
from jobledger.domain.jobs import Job
from jobledger.domain.schedule_row import Schedule
from jobledger.domain.timeutil import iso
from jobledger.storage import jsontext, rows

T = TypeVar("T")

#: columns holding JSON text
JSON_COLUMNS = frozenset({"payload", "headers", "actor", "data"})
CHUNK = 500  # bound parameters per IN (...) list


def dumps(value: Any) -> str | None:
    return None if value is None else jsontext.dumps(value)


def encode(record: dict[str, Any], columns: Sequence[str]) -> tuple[Any, ...]:
    """Column values for `record`: times as ISO text (sorts as time), JSON as text."""
    values: list[Any] = []
    for name in columns:
        value = record.get(name)
        if isinstance(value, datetime):
            value = iso(value)
        elif name in JSON_COLUMNS:
            value = dumps(value)
        values.append(value)
    return tuple(values)


def decode(row: sqlite3.Row) -> dict[str, Any]:
    record = dict(zip(row.keys(), row, strict=True))
    for name in JSON_COLUMNS.intersection(record):
        text = record[name]
        record[name] = json.loads(text) if text is not None else None
    return record


def decode_job(row: sqlite3.Row) -> Job:
    return rows.job_from_dict(decode(row))


def decode_schedule(row: sqlite3.Row) -> Schedule:
    return rows.schedule_from_dict(decode(row))


def decode_event(row: sqlite3.Row) -> Event:
    return rows.event_from_dict(decode(row))


def chunks(items: Sequence[T]) -> Iterable[Sequence[T]]:
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]
