"""What `enqueue` accepts (pure: no I/O). Every item is checked before anything is
written, so bad input raises and the caller's transaction is untouched.

One rule for every store: what one of them cannot hold, none takes — U+0000 in any text
(PostgreSQL's text and jsonb refuse it), payload integers outside the signed 64-bit
range (MongoDB's BSON refuses them) and payload dicts with non-string keys (`json`
would quietly turn `{1: "a"}` into `{"1": "a"}` on the SQL stores, the memory store
would keep the int, and BSON refuses it inside the caller's transaction). Likewise a
lone surrogate in any text (not UTF-8: the drivers raise mid-write) and a `version`
outside the signed 64-bit range (a bigint column: PostgreSQL aborted the caller's
transaction, SQLite had written the event but not the job row).

One size limit for the texts the stores index or copy into every event: `key`,
`dedupe_key`, `code`, the target's name, and each header name and value are at most
MAX_TEXT_BYTES (512) bytes of UTF-8, and a job has at most MAX_HEADERS (32) headers.
PostgreSQL refuses a B-tree index row over ~2,700 bytes (a 3,000-character key raised
`ProgramLimitExceeded` inside the caller's transaction, whose commit then failed) and
older MongoDB servers an index key over 1,024 bytes; SQLite took 1 MB keys. 512 bytes
holds every key, dedupe key and code the engine makes (`<code>:<slot>`, uuids) with room.

An empty `key` is refused too: the empty string is a key like any other, so it chained
every keyless-looking job of a partition together (a failing one held the others). A job
without an ordering key passes no key (None).

The payload codec (`plain_payload`, decisions D67): a payload is stored as JSON data, and
a few standard types are written as JSON before the checks, the same way for every
store: `datetime`, `date` and `time` as ISO-8601 text, `Decimal` and `UUID` as text, an
`Enum` as its value, a dataclass or a pydantic model as an object of its fields, a tuple
as a list. Anything else (a set, bytes, an arbitrary object) is refused with a message
that lists what is accepted. A payload that was plain JSON already is not touched, so its
event data and hash are byte for byte what they were. A target that declares its payload
type gets these values back typed (`core.handlers.PayloadType`).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import uuid
from collections.abc import Mapping
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import orjson

from jobledger.domain.errors import InvalidArgument, InvalidPayload
from jobledger.domain.jobs import NewJob

#: `json.dumps(payload, allow_nan=False)`: the payload check's text (ASCII, default
#: separators) and its errors
_PAYLOAD_JSON = json.JSONEncoder(allow_nan=False)
_SURROGATE_TEXT = "{} must not contain a lone surrogate (U+D800-U+DFFF): it is not UTF-8"
_NUL_TEXT = "{} must not contain U+0000 (NUL): PostgreSQL cannot store it, so no store takes it"
#: a payload's JSON text that may hold a NUL or an integer past 64 bits (19+ digits)
_MAYBE_UNSTORABLE = re.compile(r"\\u0000|[0-9]{19}")
_INT64 = range(-(1 << 63), 1 << 63)
#: the size limit of key, dedupe_key, code, target and each header name and value
MAX_TEXT_BYTES = 512
#: the most headers one job carries
MAX_HEADERS = 32


#: what a payload may hold, for the refusal's message
ACCEPTED = (
    "JSON values (dict with str keys, list, str, int, float, bool, None), datetime, date,"
    " time, Decimal, UUID, Enum, tuples, dataclasses and pydantic models"
)


def check_new_job(item: NewJob, max_payload_bytes: int) -> NewJob:
    """Raise InvalidArgument or InvalidPayload, naming the problem, for an item that
    cannot be enqueued (the target's existence is the registry's to check). Returns the
    item, with its payload as JSON data when it held standard types (`plain_payload`);
    the very item when it did not."""
    if not _plain_fields(item):  # the common item passes one cheap test
        _check_fields(item)
    try:
        body = _PAYLOAD_JSON.encode(item.payload)
    except TypeError:  # a standard type the codec writes as JSON, or a refusal
        item = NewJob(
            item.target,
            plain_payload(item.target, item.payload),
            item.code,
            item.key,
            item.version,
            item.dedupe_key,
            item.headers,
            item.run_at,
        )
        body = _payload_text(item)
    except (ValueError, RecursionError) as exc:
        raise InvalidPayload(f"payload for {item.target!r} is not JSON: {exc}") from exc
    size = len(body)  # ASCII (ensure_ascii): as many bytes as characters
    if size > max_payload_bytes:
        raise InvalidPayload(
            f"payload for {item.target!r} is {size} bytes, over the {max_payload_bytes}-byte limit"
        )
    # pre-filters (the text; orjson refuses non-string keys and lone surrogates); the walk decides
    if _MAYBE_UNSTORABLE.search(body) or not _string_keys_only(item.payload):
        problem = _unstorable(item.payload)
        if problem is not None:
            raise InvalidPayload(f"payload for {item.target!r}: {problem}")
    return item


def _payload_text(item: NewJob) -> str:
    try:
        return _PAYLOAD_JSON.encode(item.payload)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidPayload(f"payload for {item.target!r} is not JSON: {exc}") from exc


def plain_payload(target: str, value: Any) -> Any:
    """`value` as JSON data: the standard types written as the codec writes them (ISO-8601
    times, Decimal and UUID as text, an Enum's value, a dataclass's or pydantic model's
    fields); InvalidPayload naming the first value of another type and what is accepted."""
    try:
        return _plain(value, 0)
    except _Unplain as exc:
        raise InvalidPayload(
            f"payload for {target!r} is not JSON: {exc.args[0]}; a payload holds {ACCEPTED}"
        ) from None


class _Unplain(Exception):
    """A value the codec does not write (its description in args[0])."""


#: nesting deeper than this is refused as the encoder refuses a cycle
_MAX_DEPTH = 500


def _plain(value: Any, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise _Unplain(f"values nested over {_MAX_DEPTH} levels deep (a cycle?)")
    if value is None or isinstance(value, str | int | float):  # bool is an int
        if isinstance(value, enum.Enum):
            return _plain(value.value, depth + 1)
        return value
    if isinstance(value, dict):
        return {k: _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return _plain(value.value, depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _plain(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)
        }
    dump = getattr(value, "model_dump", None)
    if dump is not None and not isinstance(value, type):  # a pydantic model
        return _plain(dump(mode="json"), depth + 1)
    raise _Unplain(f"Object of type {type(value).__name__} is not JSON serializable")


def check_text(name: str, text: str) -> None:
    """Raise InvalidArgument, naming `name`, for a text no store can hold: U+0000 or a
    lone surrogate. The one rule for a job's key, dedupe key, code and headers, a
    `next_version` key, and a target's name (`core.registry.check_target_name`, at
    registration and at enqueue)."""
    if "\x00" in text:
        raise InvalidArgument(_NUL_TEXT.format(name))
    if _lone_surrogate(text):
        raise InvalidArgument(_SURROGATE_TEXT.format(name))


def check_counter_key(key: object) -> None:
    """Raise InvalidArgument for a `next_version` key no store could hold (the text rules
    of an enqueue's `key`: a non-empty string, no NUL, no lone surrogate, ≤ 512 bytes)."""
    if not isinstance(key, str) or not key:
        raise InvalidArgument(f"key must be a non-empty string, not {key!r:.40}")
    check_text("key", key)
    _check_size("key", key)


#: texts of at most this many characters are within MAX_TEXT_BYTES whatever they hold
_SHORT = MAX_TEXT_BYTES // 4


def _plain_text(text: Any) -> bool:
    """A key, dedupe key or code `_check_fields` passes: a non-empty short ASCII `str`
    without U+0000 (anything else takes the full checks)."""
    return type(text) is str and 0 < len(text) <= _SHORT and text.isascii() and "\x00" not in text


def _plain_fields(item: NewJob) -> bool:
    """Whether `_check_fields(item)` has nothing to say, by one cheap test that holds
    for the usual item (no headers, no run_at, short ASCII texts); False sends the item
    through `_check_fields`, which names the problem if there is one."""
    version = item.version
    return (
        not item.headers
        and item.run_at is None
        and type(version) is int
        and -(1 << 63) <= version < (1 << 63)
        and len(item.target) <= _SHORT
        and (item.key is None or _plain_text(item.key))
        and (item.dedupe_key is None or _plain_text(item.dedupe_key))
        and (item.code is None or _plain_text(item.code))
    )


def _check_fields(item: NewJob) -> None:
    """Every rule on the item's fields but its payload, in order: the first broken one
    raises."""
    if item.key is not None and not isinstance(item.key, str):
        raise InvalidArgument(f"key must be a string, not {type(item.key).__name__}")
    if item.key == "":
        raise InvalidArgument(
            "key must not be empty: pass no key (None) for a job without an ordering key"
        )
    if item.dedupe_key is not None and (
        not isinstance(item.dedupe_key, str) or not item.dedupe_key
    ):
        raise InvalidArgument("dedupe_key must be a non-empty string")
    if item.code is not None and (not isinstance(item.code, str) or not item.code):
        raise InvalidArgument("code must be a non-empty string")
    if not isinstance(item.version, int) or isinstance(item.version, bool):
        raise InvalidArgument("version must be an integer")
    if item.version not in _INT64:
        raise InvalidArgument(f"version {item.version} is outside the signed 64-bit range")
    _check_run_at(item.run_at)
    headers = item.headers or {}
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise InvalidArgument("headers must map strings to strings")
    for name, text in (("key", item.key), ("dedupe_key", item.dedupe_key), ("code", item.code)):
        if text:
            check_text(name, text)
    for header, value in headers.items():
        check_text("a header name", header)
        check_text(f"header {header[:40]!r}", value)
    _check_sizes(item, headers)


def _check_run_at(run_at: Any) -> None:
    if run_at is None or (isinstance(run_at, datetime) and run_at.utcoffset() is not None):
        return
    if isinstance(run_at, datetime):
        raise InvalidArgument(
            "run_at is a naive datetime: give it a time zone (`datetime.now(UTC) + ...`), or"
            " pass a timedelta for a delay"
        )
    raise InvalidArgument(
        f"run_at must be a timezone-aware datetime, a timedelta or None, not"
        f" {type(run_at).__name__}"
    )


def resolve_run_at(run_at: datetime | timedelta | None, now: datetime) -> datetime | None:
    """A job's `run_at`: a `timedelta` is a delay from `now`; anything else is kept (and
    checked by `check_new_job`)."""
    return now + run_at if isinstance(run_at, timedelta) else run_at


def _lone_surrogate(text: str) -> bool:
    """True when `text` holds a lone surrogate (U+D800-U+DFFF): not UTF-8, so no store's
    driver can send it (PostgreSQL and SQLite bindings raise mid-write, BSON refuses it)."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _check_sizes(item: NewJob, headers: Mapping[str, str]) -> None:
    """MAX_TEXT_BYTES for each identifying text and header, MAX_HEADERS headers."""
    if len(headers) > MAX_HEADERS:
        raise InvalidArgument(f"headers: {len(headers)} of them, over the limit of {MAX_HEADERS}")
    named = (
        ("key", item.key),
        ("dedupe_key", item.dedupe_key),
        ("code", item.code),
        ("target", item.target),
    )
    for name, text in (*named, *(("header name", h) for h in headers)):
        _check_size(name, text)
    for header, value in headers.items():
        _check_size(f"header {header[:40]!r}", value)


def _check_size(name: str, text: str | None) -> None:
    # a text of at most MAX_TEXT_BYTES / 4 characters cannot be longer in UTF-8
    if text is None or len(text) <= MAX_TEXT_BYTES // 4:
        return
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_TEXT_BYTES:
        raise InvalidArgument(
            f"{name} is {size} bytes of UTF-8, over the {MAX_TEXT_BYTES}-byte limit"
            " (no store could index it)"
        )


def _string_keys_only(payload: Any) -> bool:
    """False when orjson refuses `payload` (it refuses a dict key that is not a string;
    the walk then says whether that, or something else, is the problem)."""
    try:
        orjson.dumps(payload)
    except (TypeError, orjson.JSONEncodeError):
        return False
    return True


def _unstorable(value: Any) -> str | None:
    """What in the JSON value `value` some store cannot hold, or None: a string (a key
    or an item) with U+0000, an integer outside the signed 64-bit range, a dict key that
    is not a string."""
    if isinstance(value, str):
        if "\x00" in value:
            return _NUL_TEXT.format("its strings")
        return _SURROGATE_TEXT.format("its strings") if _lone_surrogate(value) else None
    if isinstance(value, int) and not isinstance(value, bool):
        if value in _INT64:
            return None
        return (
            f"the integer {value} is outside the signed 64-bit range:"
            " MongoDB cannot store it, so no store takes it"
        )
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                return (
                    f"the dict key {key!r} is a {type(key).__name__}, not a string:"
                    " MongoDB cannot store it, so no store takes it"
                )
        items = [*value.keys(), *value.values()]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        return None
    for item in items:
        found = _unstorable(item)
        if found is not None:
            return found
    return None
