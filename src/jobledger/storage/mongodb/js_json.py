"""A BSON value as the reference engine's JavaScript saw it: `JSON.parse(JSON.stringify(v))`.

The reference engine (Node, Mongoose, the MongoDB Node driver with its default
options) published a job's `Mixed` payload as `JSON.stringify(payload)` (reference
"Kafka send details"). `import-reference` must carry the same JSON, so each BSON type
PyMongo decodes is turned into what js-bson 6's class for it gives to `JSON.stringify`
(its `toJSON`, or its own enumerable fields when it has none):

| BSON (PyMongo's type)                    | JSON (js-bson)                                 |
|------------------------------------------|------------------------------------------------|
| date (`datetime`, `DatetimeMS`)          | `"2026-05-01T08:00:00.000Z"` (`toISOString`; years past 9999 as `+010000`; outside JavaScript's range `null`) |
| ObjectId                                 | `"6632f1a0c2b5e4a1d3f09a77"`                   |
| Decimal128                               | `{"$numberDecimal": "12.50"}`                  |
| int64 (`Int64`) within ±2⁵³              | a number (the driver's `promoteLongs`)         |
| int64 beyond ±2⁵³                        | `{"low": …, "high": …, "unsigned": false}` (a `Long`, which has no `toJSON`) |
| double                                   | a number; NaN and ±Infinity `null`; an integral value prints without `.0`, as JavaScript's digits (2⁶⁰ → `1152921504606847000`) |
| binary subtype 4 (UUID) of 16 bytes      | `"0f8fad5b-d9cb-469f-a165-70867728950e"`       |
| other binary (`bytes`, `Binary`)         | base64 of the bytes (a subtype 4 of another length too) |
| timestamp                                | `{"$timestamp": "<t * 2^32 + i>"}`             |
| regular expression, MinKey, MaxKey       | `{}` (a `RegExp` and the key classes have no enumerable fields) |
| JavaScript code                          | `{"code": …}` (and `"scope"` when it has one)  |
| DBRef                                    | `{"$ref": …, "$id": …, …extra fields, "$db": …}` |

Objects keep their key order except that, as in every JavaScript object, keys that are
array indexes ("0", "7", ...) come first in ascending order. Anything else BSON cannot
hold raises `TypeError` (the caller reports the row).
"""

from __future__ import annotations

import base64
import decimal
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from bson.binary import Binary
from bson.code import Code
from bson.datetime_ms import DatetimeMS
from bson.dbref import DBRef
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp

JS_SAFE = 2**53  # the driver promotes an int64 within ±2^53 to a Number
JS_DATE_LIMIT_MS = 8_640_000_000_000_000  # a JavaScript Date holds ±10^8 days
UUID_SUBTYPE = 4
_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]*")
_MAX_ARRAY_INDEX = 2**32 - 2


def as_js_json(value: Any) -> Any:
    """The JSON value `JSON.parse(JSON.stringify(value))` gives in the reference engine
    for a BSON value PyMongo decoded (see the module's table)."""
    if isinstance(value, Code):  # a str subclass
        return _special(value)
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, Int64) or type(value) is int:
        return _integer(int(value))
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, datetime):
        return _iso(_epoch_ms(value))
    if isinstance(value, DatetimeMS):
        return _iso(int(value))
    if isinstance(value, ObjectId):
        return str(value)
    if isinstance(value, Decimal128):
        return {"$numberDecimal": str(value)}
    if isinstance(value, Mapping):
        return _object(value)
    if isinstance(value, list | tuple):
        return [as_js_json(item) for item in value]
    return _special(value)


def _special(value: Any) -> Any:
    if isinstance(value, Binary) and value.subtype == UUID_SUBTYPE and len(value) == 16:
        return str(uuid.UUID(bytes=bytes(value)))
    if isinstance(value, uuid.UUID):
        return str(value)
    # subtype 0 decodes to bytes, other subtypes to Binary; js-bson keeps a subtype 4 of
    # another length a Binary too (`UUID.isValid` wants 16 bytes), whose toJSON is base64
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Timestamp):
        return {"$timestamp": str((value.time << 32) | value.inc)}
    if isinstance(value, Code):
        code: dict[str, Any] = {"code": str(value)}
        if value.scope is not None:
            code["scope"] = _object(value.scope)
        return code
    if isinstance(value, DBRef):
        extra = {k: v for k, v in value.as_doc().items() if k not in ("$ref", "$id", "$db")}
        ref = {"$ref": value.collection, "$id": value.id, **extra}
        if value.database is not None:
            ref["$db"] = value.database
        return _object(ref)
    if isinstance(value, Regex | re.Pattern | MinKey | MaxKey):
        return {}
    raise TypeError(f"a {type(value).__name__} is not a BSON value")


def _integer(n: int) -> Any:
    if -JS_SAFE <= n <= JS_SAFE:
        return n
    bits = n & (2**64 - 1)
    return {"low": _signed32(bits & 0xFFFFFFFF), "high": _signed32(bits >> 32), "unsigned": False}


def _signed32(bits: int) -> int:
    return bits - 2**32 if bits >= 2**31 else bits


def _number(x: float) -> Any:
    """A double as JSON.stringify prints it, read back: NaN and infinities are null; an
    integral value prints as an integer (`5`, not `5.0`; -0 as `0`) below 10^21.

    That integer is JavaScript's text, not the double's exact value: its shortest
    round-trip digits padded with zeros (2^60 prints `1152921504606847000`, not
    `…976`), which Python's `repr` digits give too. Past the signed 64-bit range (which
    no store takes) the double itself is kept: the same number to a JavaScript reader,
    written with an exponent."""
    if x != x or x in (float("inf"), float("-inf")):
        return None
    if x.is_integer() and abs(x) < 1e21:
        printed = int(decimal.Decimal(repr(x)))
        return printed if -(2**63) <= printed < 2**63 else x
    return x


def _object(value: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON object in JavaScript's key order: array-index keys first, ascending."""
    items = [(str(key), as_js_json(item)) for key, item in value.items()]
    indexes = sorted(
        (item for item in items if _is_array_index(item[0])), key=lambda item: int(item[0])
    )
    return dict(indexes + [item for item in items if not _is_array_index(item[0])])


def _is_array_index(key: str) -> bool:
    return bool(_ARRAY_INDEX.fullmatch(key)) and int(key) <= _MAX_ARRAY_INDEX


def _epoch_ms(at: datetime) -> int:
    aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    delta = aware - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _iso(ms: int) -> str | None:
    """`Date.prototype.toJSON` of the instant `ms` after the epoch (UTC)."""
    if abs(ms) > JS_DATE_LIMIT_MS:
        return None  # an invalid Date: toJSON gives null
    days, ms_of_day = divmod(ms, 86_400_000)
    year, month, day = _civil(days)
    seconds, millis = divmod(ms_of_day, 1000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    sign = "" if 0 <= year <= 9999 else "-" if year < 0 else "+"
    year_text = f"{sign}{abs(year):06d}" if sign else f"{year:04d}"
    return f"{year_text}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.{millis:03d}Z"


def _civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of the proleptic Gregorian day `days` after 1970-01-01, for
    any year (years 0 and below included, which `datetime` cannot hold)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (1 if month <= 2 else 0)
    return year, month, day
