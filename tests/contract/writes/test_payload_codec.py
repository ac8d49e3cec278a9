"""The payload codec, on every store (decisions D67): standard types are written as JSON
the same way everywhere, read back as that JSON, and rebuilt typed for a target that
declares its payload type; a plain JSON payload is stored as it always was.

Hypothesis draws the payloads; each example is one enqueue in its own transaction and
a read of the row back from the store.
"""

from __future__ import annotations

import enum
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobledger.core.handlers import PayloadType
from jobledger.domain.enqueue_rules import plain_payload
from jobledger.domain.errors import InvalidPayload
from jobledger.engine import Engine
from jobledger.storage.port import Store
from tests.contract.helpers import LONG


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class Line:
    sku: uuid.UUID
    price: Decimal
    at: datetime
    day: date
    color: Color
    tags: list[str] = field(default_factory=list)
    note: str | None = None


@dataclass
class Order:
    no: str
    lines: list[Line]
    cutoff: time
    by_code: dict[str, Decimal] = field(default_factory=dict)


ZONES = st.sampled_from([None, UTC, timezone(timedelta(hours=5, minutes=30))])
TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=8)
DECIMALS = st.decimals(allow_nan=False, allow_infinity=False, places=4, max_value=10**12)
STANDARD = st.one_of(
    st.datetimes(timezones=ZONES),
    st.dates(),
    st.times(),
    DECIMALS,
    st.uuids(),
    st.sampled_from(Color),
)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), TEXT, STANDARD)
PAYLOADS = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(TEXT, inner, max_size=3),
    ),
    max_leaves=8,
)
LINES = st.builds(
    Line,
    sku=st.uuids(),
    price=DECIMALS,
    at=st.datetimes(timezones=ZONES),
    day=st.dates(),
    color=st.sampled_from(Color),
    tags=st.lists(TEXT, max_size=2),
    note=st.none() | TEXT,
)
ORDERS = st.builds(
    Order,
    no=TEXT,
    lines=st.lists(LINES, max_size=3),
    cutoff=st.times(),
    by_code=st.dictionaries(TEXT, DECIMALS, max_size=2),
)
EXAMPLES = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


async def stored_payload(store: Store, engine: Engine, payload: Any) -> Any:
    async with engine.transaction() as tx:
        job_id = (await engine.enqueue(LONG, payload, tx=tx)).job_id
    assert job_id is not None
    row = await store.admin.get_job(job_id)
    assert row is not None
    return row.payload


@EXAMPLES
@given(payload=PAYLOADS)
async def test_standard_types_are_stored_as_the_codecs_json(
    store: Store, engine: Engine, payload: Any
) -> None:
    # as JSON data: the memory store keeps a payload that was JSON already as it was given,
    # a tuple included, where the SQL stores and BSON give a list back
    expected = json.loads(json.dumps(plain_payload(LONG, payload)))
    assert json.loads(json.dumps(await stored_payload(store, engine, payload))) == expected


@EXAMPLES
@given(order=ORDERS)
async def test_a_declared_payload_type_comes_back_typed(
    store: Store, engine: Engine, order: Order
) -> None:
    typed = PayloadType(Order)
    engine.payload_types[LONG] = typed
    assert typed.decode(await stored_payload(store, engine, order)) == order


async def test_a_plain_json_payload_is_stored_as_it_was(store: Store, engine: Engine) -> None:
    payload = {"b": [1, 2.5, "é", None, True], "a": {"n": -(2**63)}}
    assert await stored_payload(store, engine, payload) == payload


async def test_a_value_the_codec_does_not_write_is_refused_naming_what_is_accepted(
    store: Store, engine: Engine
) -> None:
    for value in ({1, 2}, b"bytes", object()):
        with pytest.raises(InvalidPayload, match="a payload holds JSON values") as refused:
            async with engine.transaction() as tx:
                await engine.enqueue(LONG, {"x": value}, tx=tx)
        assert "dataclasses and pydantic models" in str(refused.value)
        assert "\n" not in str(refused.value)
