"""The enqueue checks' shortcut decides as the full rules do: `_plain_fields` passes only
items `_check_fields` has nothing to say about. A payload the standard encoder refuses is
refused with its error."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.domain import enqueue_rules
from jobledger.domain.errors import InvalidPayload, JobledgerError
from jobledger.domain.jobs import NewJob

#: texts at and around each rule's edge (type, empty, NUL, non-ASCII, surrogate, size)
EDGES = [None, "k", "", "K\x00", "\x00", "é", "\ud800", "x" * 128, "x" * 129, "é" * 200, 7]
texts = st.sampled_from(EDGES)
items = st.builds(
    NewJob,
    target=st.sampled_from(["t", "x" * 128, "x" * 129, "é" * 200]),
    payload=st.none(),
    code=texts,
    key=texts,
    version=st.sampled_from([0, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, True, "1", 1.0]),
    dedupe_key=texts,
    headers=st.sampled_from([None, {}, {"h": "v"}, {"h": "\x00"}, {1: "v"}]),
    run_at=st.sampled_from([None, datetime(2030, 1, 1), datetime.now(UTC)]),
)


def decides_as_the_full_checks(item: NewJob) -> bool:
    try:
        enqueue_rules._check_fields(item)
    except JobledgerError:
        return not enqueue_rules._plain_fields(item)
    return True


PLAIN = NewJob("t", None, key="k")
ONE_FIELD_OFF = [
    *((name, value) for name in ("key", "dedupe_key", "code") for value in EDGES),
    *(("target", value) for value in ["x" * 128, "x" * 129, "é" * 200]),
    *(("version", value) for value in [2**63 - 1, 2**63, -(2**63), -(2**63) - 1, True, "1", 1.0]),
    *(("headers", value) for value in [{}, {"h": "v"}, {"h": "\x00"}, {1: "v"}, ["h"]]),
    *(("run_at", value) for value in [datetime(2030, 1, 1), datetime.now(UTC), "2030"]),
]


@pytest.mark.parametrize(("name", "value"), ONE_FIELD_OFF)
def test_an_item_one_field_off_the_plain_one_is_decided_as_the_full_checks_do(
    name: str, value: Any
) -> None:
    assert enqueue_rules._plain_fields(PLAIN)
    assert decides_as_the_full_checks(dataclasses.replace(PLAIN, **{name: value}))


@settings(max_examples=400)
@given(items)
def test_a_plain_item_is_one_the_full_checks_pass(item: NewJob) -> None:
    assert decides_as_the_full_checks(item)


def circular() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    return loop


@pytest.mark.parametrize(
    "value", [{"x": object()}, {1, 2}, math.nan, [math.inf], circular(), {"é": "\ud800"}]
)
def test_a_payload_the_standard_encoder_refuses_is_refused_with_its_error(value: Any) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        refused = str(exc)
    else:  # a lone surrogate: JSON text, but no store can hold it
        refused = "lone surrogate"
    with pytest.raises(InvalidPayload, match=re.escape(refused)):
        enqueue_rules.check_new_job(NewJob("t", value), 1 << 20)
