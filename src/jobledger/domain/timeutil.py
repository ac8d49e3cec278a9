"""Time helpers shared by every part: aware UTC, millisecond precision.

Millisecond precision is what MongoDB stores, so every adapter keeps the same
instant and an event's hash is the same whichever store wrote it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def at_ms(value: datetime) -> datetime:
    """`value` as an aware UTC datetime truncated to whole milliseconds."""
    if value.tzinfo is not UTC:
        if value.tzinfo is None:
            raise ValueError("naive datetime: jobledger only handles aware times")
        value = value.astimezone(UTC)
    micro = value.microsecond
    return value if micro % 1000 == 0 else value.replace(microsecond=micro - micro % 1000)


def iso(value: datetime) -> str:
    """ISO 8601 text with milliseconds and a Z, e.g. 2026-11-29T11:51:53.123Z."""
    if value.tzinfo is not UTC:
        value = at_ms(value)
    # "…+00:00" → "…Z"; timespec truncates to milliseconds exactly like at_ms
    return value.isoformat(timespec="milliseconds")[:-6] + "Z"


def parse_iso(text: str) -> datetime:
    return at_ms(datetime.fromisoformat(text.replace("Z", "+00:00")))


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
