"""Plain-dict forms of events, jobs and schedules, shared by every adapter.

Each adapter stores these dicts its own way (SQL columns, BSON documents); keeping the
mapping here means no adapter grows its own idea of a field. Datetimes stay aware
`datetime` objects; JSON-ish values (payload, data, headers, actor) stay Python values.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from jobledger.domain.events import Actor, Event, actor_json
from jobledger.domain.jobs import JOB_FIELDS as JOB_FIELDS  # the record's fields, re-exported
from jobledger.domain.jobs import TRANSITION_FIELDS, Job, JobStatus, Lane
from jobledger.domain.schedules.row import MissedSlotPolicy, Schedule
from jobledger.domain.timeutil import at_ms, iso, parse_iso
from jobledger.storage.jsontext import dumps as json_dumps
from jobledger.storage.jsontext import loads as json_loads

SCHEDULE_FIELDS = (
    "code",
    "cron",
    "timezone",
    "missed_slot_policy",
    "runs_per_slot",
    "enabled",
    "cron_override",
    "next_run_at",
    "last_run_at",
    "last_skipped_at",
    "created_at",
    "updated_at",
    "stream_version",
    "last_hash",
    "last_finished_at",
)

EVENT_FIELDS = (
    "position",
    "stream",
    "version",
    "type",
    "data",
    "at",
    "actor",
    "trace_id",
    "prev_hash",
    "hash",
)


_ZERO = timedelta(0)
#: zones seen with a fixed zero offset (psycopg hands out `ZoneInfo("Etc/UTC")`)
_UTC_ZONES: set[tzinfo] = {UTC}


def as_utc(value: Any) -> datetime | None:
    """A stored time back as an aware UTC datetime (drivers may return naive UTC).

    The hot path (the lanes decode every row they read) avoids `astimezone`: a time in
    a zero-offset zone only has its tzinfo swapped for `UTC`.
    """
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    tz = value.tzinfo
    if tz is not UTC:
        if tz is None or tz in _UTC_ZONES:
            value = value.replace(tzinfo=UTC)
        elif _is_fixed_utc(tz):
            _UTC_ZONES.add(tz)
            value = value.replace(tzinfo=UTC)
    micro = value.microsecond
    if micro % 1000:
        return at_ms(value)
    return value if value.tzinfo is UTC else at_ms(value)


def _is_fixed_utc(tz: tzinfo) -> bool:
    """A zone that is UTC under another name (offset zero, no DST ever)."""
    key = getattr(tz, "key", None)
    return key in (
        "UTC",
        "Etc/UTC",
        "Etc/UCT",
        "Etc/Universal",
        "Etc/Zulu",
        "Etc/GMT",
        "GMT",
        "UCT",
        "Universal",
        "Zulu",
    ) and tz.utcoffset(None) in (None, _ZERO)


_TRANSITION_COLUMNS = ("id", *TRANSITION_FIELDS)
_transition_values = operator.attrgetter(*_TRANSITION_COLUMNS)


def job_to_dict(job: Job) -> dict[str, Any]:
    """`JOB_FIELDS` of `job`, then `order_key`; enums as their values, actor and headers
    as plain dicts."""
    return dict(zip(_RECORD_FIELDS, _record_columns(job), strict=True))


def _stored_headers(headers: Any) -> dict[str, str] | None:
    return None if headers is None else dict(headers)


#: `job_to_dict`'s forms of the fields it does not take as they are
_STORED_FORMS: dict[str, Callable[[Any], Any]] = {
    "lane": operator.attrgetter("value"),
    "status": operator.attrgetter("value"),
    "actor": actor_json,
    "headers": _stored_headers,
}


def job_columns(names: tuple[str, ...]) -> Callable[[Job], list[Any]]:
    """A function of a job giving `[job_to_dict(job)[name] for name in names]` without
    the whole dict (a statement that takes a few of the columns)."""
    get = operator.attrgetter(*names)
    forms = [(k, _STORED_FORMS[name]) for k, name in enumerate(names) if name in _STORED_FORMS]

    def columns(job: Job) -> list[Any]:
        values = list(get(job))
        for k, form in forms:
            values[k] = form(values[k])
        return values

    return columns


_RECORD_FIELDS = (*JOB_FIELDS, "order_key")
_record_columns = job_columns(_RECORD_FIELDS)


def job_transition_dict(job: Job) -> dict[str, Any]:
    """`id` and the `TRANSITION_FIELDS` of `job`: what an update of an existing row writes
    (its identity fields never change after JobEnqueued)."""
    record = dict(zip(_TRANSITION_COLUMNS, _transition_values(job), strict=True))
    record["status"] = job.status.value
    return record


_LANES: dict[str, Lane] = {lane.value: lane for lane in Lane}
_STATUSES: dict[str, JobStatus] = {status.value: status for status in JobStatus}
_ACTORS: dict[tuple[Any, Any, Any], Actor] = {}


def actor_from_json(data: Any) -> Actor | None:
    """`Actor.from_json`, sharing one (immutable) Actor per distinct value."""
    if data is None:
        return None
    key = (data.get("id"), data.get("via", "system"), data.get("role"))
    try:
        return _ACTORS[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable stored value: no sharing
        return Actor.from_json(data)
    actor = Actor.from_json(data)
    if actor is not None and len(_ACTORS) < 4096:
        _ACTORS[key] = actor
    return actor


def job_from_dict(record: dict[str, Any]) -> Job:
    """A stored row, as a dict keyed by field name, back as a `Job`."""
    get: Callable[[str], Any] = record.get
    return job_from_row([get(name) for name in JOB_FIELDS])


def job_from_row(row: tuple[Any, ...] | list[Any], *, json_text: bool = False) -> Job:
    """A row whose values are in `JOB_FIELDS` order back as a `Job`: `job_from_dict`
    without the dict (the lanes' hot path on SQL stores). With `json_text` the JSON
    columns (payload, headers, actor) are their text, parsed here once
    (`job_from_text_row`)."""
    (
        job_id,
        code,
        target,
        lane,
        key,
        partition,
        version,
        payload,
        dedupe_key,
        status,
        attempts,
        next_run_at,
        created_at,
        updated_at,
        stream_version,
        last_hash,
        headers,
        trace_id,
        traceparent,
        actor,
        last_error,
        dead_reason,
        claimed_by,
        claim_token,
        lease_until,
        inflight_token,
        running_code,
        closed_at,
    ) = row
    if json_text:
        payload = None if payload is None else json_loads(payload)
        headers = None if headers is None else json_loads(headers)
        actor = None if actor is None else json_loads(actor)
    # the three NOT NULL times: one in UTC at whole milliseconds (what this package
    # wrote, read back in a UTC session) passes as it is, anything else via `as_utc`
    utc: Callable[[Any], Any] = as_utc
    return Job(
        job_id,
        code,
        target,
        _LANES.get(lane) or Lane(lane),
        key,
        partition,
        version or 0,
        payload,
        dedupe_key,
        _STATUSES.get(status) or JobStatus(status),
        attempts,
        next_run_at
        if type(next_run_at) is datetime
        and next_run_at.tzinfo is UTC
        and not next_run_at.microsecond % 1000
        else utc(next_run_at),
        created_at
        if type(created_at) is datetime
        and created_at.tzinfo is UTC
        and not created_at.microsecond % 1000
        else utc(created_at),
        updated_at
        if type(updated_at) is datetime
        and updated_at.tzinfo is UTC
        and not updated_at.microsecond % 1000
        else utc(updated_at),
        stream_version,
        last_hash,
        headers,
        trace_id,
        traceparent,
        actor_from_json(actor),
        last_error,
        dead_reason,
        claimed_by,
        claim_token,
        as_utc(lease_until),
        inflight_token,
        running_code,
        as_utc(closed_at),
    )


def job_from_text_row(row: tuple[Any, ...]) -> Job:
    """`job_from_row` for a row whose JSON columns (payload, headers, actor) are their
    text, as the PostgreSQL store selects them (`JOB_SELECT`): psycopg's C text loader
    hands them over and `jsontext.loads` parses each once, instead of psycopg's json
    loaders going through Python per value."""
    return job_from_row(row, json_text=True)


def schedule_to_dict(schedule: Schedule) -> dict[str, Any]:
    record = {name: getattr(schedule, name) for name in SCHEDULE_FIELDS}
    record["missed_slot_policy"] = schedule.missed_slot_policy.value
    return record


def schedule_from_dict(record: dict[str, Any]) -> Schedule:
    values: dict[str, Any] = {name: record.get(name) for name in SCHEDULE_FIELDS}
    values["missed_slot_policy"] = MissedSlotPolicy(values["missed_slot_policy"])
    values["enabled"] = bool(values["enabled"])
    for name in (
        "next_run_at",
        "last_run_at",
        "last_skipped_at",
        "created_at",
        "updated_at",
        "last_finished_at",
    ):
        values[name] = as_utc(values[name])
    return Schedule(**values)


def event_to_dict(event: Event) -> dict[str, Any]:
    """`EVENT_FIELDS` of `event`."""
    return {"position": event.position, **event_record(event)}


def event_record(event: Event) -> dict[str, Any]:
    """`EVENT_FIELDS` of `event` but its position (an outcome batch encodes one per
    event, the store assigns the position: no loop)."""
    return {
        "stream": event.stream,
        "version": event.version,
        "type": event.type,
        "data": dict(event.data),
        "at": event.at,
        "actor": actor_json(event.actor),
        "trace_id": event.trace_id,
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }


def event_from_dict(record: dict[str, Any]) -> Event:
    at = as_utc(record["at"])
    assert at is not None
    return Event(
        stream=record["stream"],
        version=record["version"],
        type=record["type"],
        data=record["data"],
        at=at,
        actor=Actor.from_json(record.get("actor")),
        trace_id=record.get("trace_id"),
        prev_hash=record["prev_hash"],
        hash=record["hash"],
        position=record.get("position"),
    )


def dedupe_key_of(event: Event) -> str | None:
    """The dedupe key a JobEnqueued carries (the log's unique dedupe index)."""
    if event.type != "JobEnqueued":
        return None
    key = event.data.get("dedupe_key")
    return key if isinstance(key, str) else None


def paused_text(paused: Mapping[str, datetime] | None) -> str | None:
    """A pod's paused targets as its heartbeat row keeps them: JSON text of `{target:
    ISO time}` (target names may hold dots or `$`, which a document's keys should not),
    None when the pod does not say."""
    if paused is None:
        return None
    return json_dumps({target: iso(since) for target, since in sorted(paused.items())})


def paused_from_text(text: str | None) -> dict[str, datetime] | None:
    """`paused_text` read back (None stays None; an unreadable value reads as None)."""
    if text is None:
        return None
    try:
        value = json_loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    return {str(target): parse_iso(since) for target, since in value.items()}


def pauses_by_pod(found: Iterable[Sequence[Any]]) -> dict[str, dict[str, datetime]]:
    """`Coordination.live_pauses` from (pod, `paused_text`) rows; a pod that does not
    say is left out."""
    out: dict[str, dict[str, datetime]] = {}
    for pod, text in found:
        paused = paused_from_text(text)
        if paused is not None:
            out[pod] = paused
    return out
