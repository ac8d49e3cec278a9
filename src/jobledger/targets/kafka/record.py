"""The Kafka record of a job, with no I/O.

Key = the job's key; value = compact JSON of the payload, exactly the bytes
`json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)` writes
(JSON.stringify's); headers `event_id` (the job id, overridden by the job's headers),
`traceparent` and `trace_id`. `jobledger.targets.kafka.rules` holds the other decisions
(targets, topics, failure classes).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import orjson

from jobledger.core.context import RequestContext
from jobledger.domain.jobs import Job


class InvalidRecord(Exception):
    """The record can never be sent, whatever the broker does (client-side rejection)."""


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]

    def header(self, name: str) -> bytes | None:
        return dict(self.headers).get(name)


#: orjson hands these back instead of writing them (it raises, the stdlib decides): str,
#: int, dict and list subclasses, datetimes, dataclasses
_ORJSON_OPTIONS = (
    orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
)
#: orjson text the stdlib might write differently: every float orjson writes has a digit
#: then `.`, `e` or `E` (the two format some floats differently), and it writes NaN and
#: infinities as `null` (the stdlib refuses them). A string merely containing these only
#: costs the slower encoder.
_FLOAT = re.compile(rb"[0-9][.eE]")
_NULL = b"null"


def encode_value(payload: Any) -> bytes | None:
    """Compact JSON, UTF-8 as written (JSON.stringify's bytes). No payload → no value:
    a tombstone, which then needs a key.

    The bytes are always those of `json.dumps(payload, separators=(",", ":"),
    ensure_ascii=False, allow_nan=False)`: orjson writes them when the payload is plain
    JSON without floats or nulls (identical there, and about 20 times faster), the
    standard library otherwise. (orjson also writes UUIDs and plain enums, which the
    standard library refuses; a job's payload cannot hold them, since enqueue wrote it
    into the event log with the standard library's encoder.)
    """
    if payload is None:
        return None
    try:
        value = orjson.dumps(payload, option=_ORJSON_OPTIONS)
    except orjson.JSONEncodeError:
        return _stdlib_json(payload)
    # a small payload of no floats (the common case) skips the scan of its text
    if len(value) <= _WALKED and _no_floats(payload):
        return value
    if _NULL in value or _FLOAT.search(value):
        return _stdlib_json(payload)
    return value


#: payloads up to this many bytes of JSON are checked by their types (`_no_floats`), not
#: their text: the walk of a small one costs less than the regular expression's scan
_WALKED = 512


def _no_floats(payload: Any) -> bool:
    """Whether `payload` is built of exact `dict`, `list`, `str`, `int`, `bool` and None
    only: then orjson's text is the standard library's (a `null` in it is a None, which
    both write so; no float, NaN or infinity)."""
    kind = type(payload)
    if kind is dict or kind is list:
        for item in payload.values() if kind is dict else payload:
            item_kind = type(item)
            if item_kind is str or item_kind is int or item_kind is bool or item is None:
                continue
            if (item_kind is dict or item_kind is list) and _no_floats(item):
                continue
            return False
        return True
    return kind is str or kind is int or kind is bool


def _stdlib_json(payload: Any) -> bytes:
    try:
        text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidRecord(f"payload is not JSON: {exc}") from None
    return text.encode("utf-8")


def build_record(job: Job, ctx: RequestContext, topic: str) -> Record:
    """The Kafka record for `job`, under the handler's context `ctx` (the lanes open
    the enqueuer's trace around the handler; the job's own fields are the fallback)."""
    key, value, headers = record_parts(job, ctx)
    return Record(topic, key, value, tuple(headers))


def record_parts(
    job: Job, ctx: RequestContext
) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]:
    """`build_record`'s key, value and headers, in the list form aiokafka takes (the
    target's hot path builds no `Record`)."""
    key = job.key.encode("utf-8") if job.key is not None else None
    value = encode_value(job.payload)
    if key is None and value is None:
        raise InvalidRecord("a Kafka record needs a key or a value: the job has neither")
    extra = job.headers
    traceparent = ctx.traceparent or job.traceparent
    trace_id = ctx.trace_id or job.trace_id
    # the common forms without a merged dict: no headers of the job's own, or only its
    # own `event_id` (what the dict below comes to in those cases, in the same order)
    if not extra:
        parts = [("event_id", job.id.encode("utf-8"))]
    elif len(extra) == 1 and "event_id" in extra:
        parts = [("event_id", extra["event_id"].encode("utf-8"))]
    else:
        headers = {"event_id": job.id, **extra}
        if traceparent:
            headers["traceparent"] = traceparent
        if trace_id:
            headers["trace_id"] = trace_id
        return key, value, [(name, text.encode("utf-8")) for name, text in headers.items()]
    if traceparent:
        parts.append(("traceparent", traceparent.encode("utf-8")))
    if trace_id:
        parts.append(("trace_id", trace_id.encode("utf-8")))
    return key, value, parts
