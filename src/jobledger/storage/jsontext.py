"""Compact JSON text for the stores' JSON columns and statement parameters (the
PostgreSQL and SQLite adapters encode every outcome batch through here)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import orjson


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return "\\x" + bytes(value).hex()
    raise TypeError(f"cannot store {type(value).__name__} as JSON")


def json_bytes(value: Any) -> bytes:
    """Compact JSON, UTF-8 encoded.

    orjson first; the standard library for what orjson refuses (integers past 64 bits,
    non-string keys, lone surrogates), so the same values are accepted either way and
    read back alike. orjson writes NaN as null: a float that is not finite never gets
    this far (payloads are checked when they enter the engine).
    """
    try:
        return orjson.dumps(value, default=_default)
    except orjson.JSONEncodeError:
        text = json.dumps(value, default=_default, separators=(",", ":"), allow_nan=False)
        return text.encode()


def dumps(value: Any) -> str:
    """`json_bytes` as text (a statement parameter, a JSON column)."""
    return json_bytes(value).decode()


def loads(text: str | bytes) -> Any:
    """`json.loads(text)` through orjson: the standard library only for what orjson
    refuses (integers past 64 bits, lone surrogates; `json_bytes` writes them that way)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
