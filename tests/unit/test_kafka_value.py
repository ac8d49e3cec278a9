"""The Kafka record's value: always the bytes of compact `json.dumps`, whichever encoder
wrote them (orjson on the fast path, the standard library where the two could differ)."""

from __future__ import annotations

import enum
import json
import math
import random
import struct
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import pytest

from jobledger.targets.kafka.record import InvalidRecord, encode_value


def stdlib(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
        "utf-8"
    )


class Text(str):
    pass


class Number(int):
    pass


class Mapping(dict[str, Any]):
    pass


class Colour(enum.StrEnum):
    RED = "red"


class Size(enum.IntEnum):
    BIG = 2


SAME = [
    {"delivery_no": "DO-1", "version": 3, "status": "DELIVERED", "pad": "x" * 64},
    {"ชื่อ": "ไทย", "n": [1, 2, [3, {"deep": True}]], "f": False, "t": True},
    {"none": None, "text": "null", "nested": {"z": None}},
    "plain text",
    'é\u2028\x00\x1f\x7f"\\/\b\f\n\r\t<>&',
    0,
    -1,
    2**63,
    -(2**63),
    2**64 - 1,
    2**64,
    -(2**64),
    10**40,  # past 64 bits: orjson refuses, the standard library writes
    [],
    {},
    (1, "two"),
    [True, False, None],
    {"version": "1.2", "id": "3e5", "when": "2026-01-01"},  # float-looking strings
    Text("sub"),
    {"k": Number(5)},
    Mapping(a=1),
    {Text("key"): 1},
    Colour.RED,
    {"size": Size.BIG},
]

FLOATS = [
    0.0,
    -0.0,
    0.1,
    1.5,
    1e15,
    1e16,
    1e-4,
    1e-5,
    1e-7,
    123456789012345.6,
    2.5e-05,
    1.7976931348623157e308,
    5e-324,
    1 / 3,
]


@pytest.mark.parametrize("payload", SAME + FLOATS + [{"x": f, "y": [f]} for f in FLOATS], ids=repr)
def test_value_is_compact_stdlib_json(payload: Any) -> None:
    assert encode_value(payload) == stdlib(payload)


def test_random_floats_are_written_as_the_stdlib_writes_them() -> None:
    rng = random.Random(7)
    for _ in range(5000):
        value = struct.unpack("d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if math.isfinite(value):
            payload = {"v": value, "scaled": value * 1e-300, "small": rng.uniform(-1e-3, 1e-3)}
            assert encode_value(payload) == stdlib(payload)


def test_non_string_keys_are_written_as_the_stdlib_writes_them() -> None:
    payload = {1: "a", 2.5: "b", False: "c", None: "d"}
    assert encode_value(payload) == stdlib(payload)


@dataclass
class Point:
    x: int


@pytest.mark.parametrize(
    "payload",
    [
        float("nan"),
        {"x": float("inf")},
        [float("-inf")],
        {"s": {1, 2}},
        datetime.now(UTC),
        {"d": date(2026, 1, 1)},
        Point(1),
        {"b": b"bytes"},
        object(),
    ],
    ids=repr,
)
def test_what_the_stdlib_refuses_is_an_invalid_record(payload: Any) -> None:
    with pytest.raises(InvalidRecord, match="not JSON"):
        encode_value(payload)


def test_a_circular_payload_is_an_invalid_record() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(InvalidRecord, match="not JSON"):
        encode_value(loop)


def test_no_payload_is_no_value() -> None:
    assert encode_value(None) is None
