"""The event hash's canonical JSON and time text must never change their output."""

from __future__ import annotations

import hashlib
import json
import random
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.domain.events import Actor, canonical_json, event_hash
from jobledger.domain.timeutil import at_ms, iso

REFERENCE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)

VALUES = [
    "x",
    'é\u2028\x00"\\',
    1,
    1.5,
    -0.0,
    1e20,
    1e-7,
    3.141592653589793,
    True,
    None,
    [],
    {},
    {"b": 1, "a": [1, {"z": "ü", "y": None}], "c": {"k": 1.0}},
    [1, "2", 3.0, False],
    12345678901234567890,
    {"nan": float("nan"), "inf": float("-inf")},
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


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=20,
)


def _hash_of(data: object) -> str:
    return event_hash(
        stream="job:x",
        version=2,
        type="JobSucceeded",
        data=data,  # type: ignore[arg-type]
        at=datetime(2026, 1, 1, tzinfo=UTC),
        actor=None,
        trace_id=None,
        prev_hash="",
    )


def _reference_hash_of(data: object) -> str:
    body = canonical_json(
        {
            "stream": "job:x",
            "version": 2,
            "type": "JobSucceeded",
            "data": data,
            "at": "2026-01-01T00:00:00.000Z",
            "actor": None,
            "trace_id": None,
            "prev": "",
        }
    )
    return hashlib.sha256(body.encode()).hexdigest()


@settings(max_examples=1500, deadline=None)
@given(st.floats(allow_nan=False) | st.integers(-(2**80), 2**80))
def test_the_event_hash_writes_every_number_as_the_standard_library(value: float) -> None:
    data = {"x": value, "l": [value]}
    assert _hash_of(data) == _reference_hash_of(data)


@pytest.mark.parametrize(
    "value",
    [
        *VALUES,
        1e-5,
        4.1e-05,
        9.99e-5,
        1e-4,
        1e16,
        1e15,
        9999999999999998.0,
        5e-324,
        2**63,
        2**64,
        -(2**63) - 1,
        (1, 2),
        {"k": (1.5, "x")},
    ],
)
def test_the_event_hash_matches_at_the_edges(value: object) -> None:
    assert _hash_of({"v": value}) == _reference_hash_of({"v": value})


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.text(), JSON_VALUES, max_size=4), st.text(), st.text() | st.none())
def test_event_hash_is_the_sha256_of_the_canonical_envelope(
    data: dict[str, object], text: str, trace: str | None
) -> None:
    at = datetime(2026, 11, 29, 14, 33, 18, 123000, tzinfo=UTC)
    actor = Actor(id=text, via="http", role=None)
    try:
        expected_body = canonical_json(
            {
                "stream": f"job:{text}",
                "version": 3,
                "type": "JobFailed",
                "data": data,
                "at": iso(at),
                "actor": actor.to_json(),
                "trace_id": trace,
                "prev": "ab" * 32,
            }
        ).encode()
    except UnicodeEncodeError:
        return  # lone surrogates: no JSON text to hash
    expected = hashlib.sha256(expected_body).hexdigest()
    assert (
        event_hash(
            stream=f"job:{text}",
            version=3,
            type="JobFailed",
            data=data,
            at=at,
            actor=actor,
            trace_id=trace,
            prev_hash="ab" * 32,
        )
        == expected
    )


def test_a_lone_surrogate_fails_as_it_always_did() -> None:
    with pytest.raises(UnicodeEncodeError):
        event_hash(
            stream="job:x",
            version=1,
            type="JobEnqueued",
            data={"x": "\ud800"},
            at=datetime(2026, 1, 1, tzinfo=UTC),
            actor=None,
            trace_id=None,
            prev_hash="",
        )
