"""SQLite values <-> the rows.py dicts: times as ISO text (sorts as time), JSON as text."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from jobledger.domain.chain import LogRow
from jobledger.domain.events import Actor, Event, actor_json
from jobledger.domain.jobs import Job
from jobledger.domain.schedules.row import Schedule
from jobledger.domain.timeutil import iso
from jobledger.storage import jsontext, rows
from jobledger.storage.jsontext import loads as load_json

T = TypeVar("T")

#: columns holding JSON text
JSON_COLUMNS = frozenset({"payload", "headers", "actor", "data"})
CHUNK = 500  # bound parameters per IN (...) list
MISSING_ACTOR = Actor(id="\0missing")  # a sentinel no stored actor equals


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


#: each actor's stored text (few: the system actor signs most events)
_ACTOR_TEXTS: dict[Actor, str] = {}


def _actor_text(actor: Actor | None) -> str | None:
    if actor is None:
        return None
    text = _ACTOR_TEXTS.get(actor)
    if text is None:
        text = jsontext.dumps(actor_json(actor))
        if len(_ACTOR_TEXTS) < 4096:
            _ACTOR_TEXTS[actor] = text
    return text


def encode_event(event: Event) -> tuple[Any, ...]:
    """`encode(event_to_dict(event) + dedupe_key, EVENT_COLUMNS)`, without the dict."""
    data = event.data
    return (
        event.stream,
        event.version,
        event.type,
        jsontext.dumps(data if type(data) is dict else dict(data)),
        iso(event.at),
        _actor_text(event.actor),
        event.trace_id,
        event.prev_hash,
        event.hash,
        rows.dedupe_key_of(event),
    )


def decode(row: sqlite3.Row) -> dict[str, Any]:
    record = dict(zip(row.keys(), row, strict=True))
    for name in JSON_COLUMNS.intersection(record):
        text = record[name]
        record[name] = json.loads(text) if text is not None else None
    return record


_PAYLOAD = rows.JOB_FIELDS.index("payload")
_HEADERS = rows.JOB_FIELDS.index("headers")
_ACTOR = rows.JOB_FIELDS.index("actor")


#: the job times: parsed through `_at`, whose cache the rows of a page share (a fresh
#: row's three times are one text, and the rows of one enqueue share it)
_TIMES = tuple(
    rows.JOB_FIELDS.index(name)
    for name in ("next_run_at", "created_at", "updated_at", "lease_until", "closed_at")
)


def decode_job(row: Sequence[Any]) -> Job:
    """A job from a row selected as `JOB_SELECT` (a tuple, a list or a `sqlite3.Row`):
    its JSON columns parsed and its times read in place, then `rows.job_from_row` (the
    lanes' reads: no dict)."""
    values = list(row)
    for index in (_PAYLOAD, _HEADERS, _ACTOR):
        text = values[index]
        if text is not None:
            values[index] = load_json(text)
    for index in _TIMES:
        text = values[index]
        if type(text) is str:
            values[index] = _at(text)
    return rows.job_from_row(values)


def decode_schedule(row: sqlite3.Row) -> Schedule:
    return rows.schedule_from_dict(decode(row))


#: actors by their stored text (few: the system actor signs most events)
_ACTORS: dict[str, Actor | None] = {}
#: event times by their stored text, the most recent few thousand (see `_at`)
_ATS: dict[str, datetime] = {}


def _actor(text: str | None) -> Actor | None:
    if text is None:
        return None
    actor = _ACTORS.get(text, MISSING_ACTOR)
    if actor is MISSING_ACTOR:
        actor = Actor.from_json(load_json(text))
        if len(_ACTORS) < 4096:
            _ACTORS[text] = actor
    return actor


def _at(text: str) -> datetime:
    """A stored event time; a text seen lately is parsed once (a round stamps its events
    alike, and replay reads them stream by stream, not one after the other)."""
    value = _ATS.get(text)
    if value is None:
        value = rows.as_utc(text)
        assert value is not None
        if len(_ATS) >= 4096:
            _ATS.clear()
        _ATS[text] = value
    return value


def decode_event(row: Sequence[Any]) -> Event:
    """An event from a row selected as `EVENT_SELECT` (a tuple or a `sqlite3.Row`), built
    straight from its columns: the log readers (replay, verify, export) decode every
    event through here."""
    position, stream, version, kind, data, at, actor, trace_id, prev_hash, hash_ = row
    return Event(  # positional: a third cheaper than by keyword, on every event read
        stream,
        version,
        kind,
        load_json(data),
        _at(at),
        _actor(actor),
        trace_id,
        prev_hash,
        hash_,
        position,
    )


#: a time written as `timeutil.iso` writes one (what the writers store)
_ISO_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", re.ASCII).fullmatch


def iso_text(text: str) -> str:
    """`iso(_at(text))` for a stored event time: the text itself when it has that form
    already (for a valid time in that form the two are equal; an invalid one such as
    month 13, which `_at` refuses, is hashed as it stands and cannot match the hash the
    writer made of a real time)."""
    return text if _ISO_MS(text) else iso(_at(text))


def decode_log_row(row: Sequence[Any]) -> LogRow:
    """`domain.chain.event_row(decode_event(row))` without the `Event` (verify's read)."""
    position, stream, version, kind, data, at, actor, trace_id, prev_hash, hash_ = row
    return (
        position,
        stream,
        version,
        kind,
        load_json(data),
        iso_text(at),
        _actor(actor),
        trace_id,
        prev_hash,
        hash_,
    )


def chunks(items: Sequence[T]) -> Iterable[Sequence[T]]:
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]
