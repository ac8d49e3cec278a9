"""The event hash's canonical JSON and time text must never change their output."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta, timezone

import pytest

from jobledger.domain.events import canonical_json
from jobledger.domain.timeutil import at_ms, iso

REFERENCE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)

VALUES = [
    "x", "é\u2028\x00\"\\", 1, 1.5, -0.0, 1e20, 1e-7, 3.141592653589793, True, None, [], {},
    {"b": 1, "a": [1, {"z": "ü", "y": None}], "c": {"k": 1.0}}, [1, "2", 3.0, False],
    12345678901234567890, {"nan": float("nan"), "inf": float("-inf")},
]


@pytest.mark.parametrize("value", VALUES)
def test_canonical_json_is_the_sorted_compact_encoder(value: object) -> None:
    assert canonical_json(value) == REFERENCE.encode(value)


def test_canonical_json_refuses_what_json_refuses() -> None:
    with pytest.raises(TypeError):
        canonical_json({"a": object()})
    with pytest.raises(TypeError):
        canonical_json({1: 2, "a": 3})  # mixed keys cannot be sorted


def test_iso_keeps_its_text_in_any_zone() -> None:
    rng = random.Random(7)
    base = datetime(2026, 1, 1, tzinfo=UTC)
    india = timezone(timedelta(hours=5, minutes=30))
    for _ in range(2000):
        value = base + timedelta(microseconds=rng.randrange(10**15))
        expected = at_ms(value).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"
        assert iso(value) == expected
        assert iso(value.astimezone(india)) == expected
    with pytest.raises(ValueError, match="naive"):
        iso(datetime(2026, 1, 1))
