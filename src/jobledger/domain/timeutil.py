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


_last_iso: tuple[datetime, str] = (datetime(1970, 1, 1, tzinfo=UTC), "1970-01-01T00:00:00.000Z")


def iso(value: datetime) -> str:
    """ISO 8601 text with milliseconds and a Z, e.g. 2026-11-29T11:51:53.123Z."""
    global _last_iso
    last = _last_iso
    if value == last[0]:  # the same instant as the last call (a round stamps alike)
        return last[1]
    if value.tzinfo is not UTC:
        value = at_ms(value)
    # "…+00:00" → "…Z"; timespec truncates to milliseconds exactly like at_ms
    text = value.isoformat(timespec="milliseconds")[:-6] + "Z"
    _last_iso = (value, text)
    return text


def parse_iso(text: str) -> datetime:
    return at_ms(datetime.fromisoformat(text.replace("Z", "+00:00")))


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
