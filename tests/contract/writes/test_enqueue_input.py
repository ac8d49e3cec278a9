"""Bad input to `enqueue` on every adapter: a clear error before anything is written,
the caller's transaction untouched (its own write still commits), nothing lost; and
good input that is unusual comes back exactly."""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime
from typing import Any

import pytest

from jobledger.domain.enqueue_rules import MAX_HEADERS, MAX_TEXT_BYTES
from jobledger.domain.errors import InvalidArgument, InvalidPayload, JobledgerError
from jobledger.domain.jobs import Lane
from jobledger.engine import Engine
from jobledger.storage.port import Store
from tests.contract.conftest import Kit
from tests.contract.helpers import FAST, enqueue
from tests.stores import all_jobs

LIMIT = MAX_TEXT_BYTES


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def circular() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    return loop


BAD: list[tuple[str, dict[str, Any], type[JobledgerError], str]] = [
    ("object", {"payload": {"x": object()}}, InvalidPayload, "not JSON"),
    ("set", {"payload": {1, 2}}, InvalidPayload, "not JSON"),
    ("nan", {"payload": {"x": math.nan}}, InvalidPayload, "not JSON"),
    ("infinity", {"payload": [math.inf]}, InvalidPayload, "not JSON"),
    ("circular", {"payload": circular()}, InvalidPayload, "not JSON"),
    ("oversize", {"payload": {"blob": "x" * 2000}}, InvalidPayload, "over the 1000-byte limit"),
    ("nul in a value", {"payload": {"x": ["a\x00b"]}}, InvalidPayload, "U\\+0000"),
    ("nul in a payload key", {"payload": {"a\x00": 1}}, InvalidPayload, "U\\+0000"),
    ("nul in the key", {"key": "K\x00"}, InvalidArgument, "U\\+0000"),
    ("nul in a header", {"headers": {"h": "\x00"}}, InvalidArgument, "U\\+0000"),
    ("int past 64 bits", {"payload": {"n": [2**63]}}, InvalidPayload, "64-bit range"),
    ("int below 64 bits", {"payload": {"n": -(2**63) - 1}}, InvalidPayload, "64-bit range"),
    ("huge int", {"payload": 10**40}, InvalidPayload, "64-bit range"),
    ("int dict key", {"payload": {1: "a"}}, InvalidPayload, "dict key 1 is a int"),
    ("nested bool key", {"payload": {"x": [{True: 1}]}}, InvalidPayload, "dict key True"),
    ("float key", {"payload": {"a": {0.5: 1}}}, InvalidPayload, "dict key 0.5 is a float"),
    ("None key", {"payload": {None: 1}}, InvalidPayload, "dict key None"),
    ("key not a string", {"key": 7}, InvalidArgument, "key must be a string"),
    ("empty dedupe key", {"dedupe_key": ""}, InvalidArgument, "dedupe_key"),
    ("empty code", {"code": ""}, InvalidArgument, "code"),
    ("version a bool", {"version": True}, InvalidArgument, "version"),
    ("version text", {"version": "1"}, InvalidArgument, "version"),
    ("headers not text", {"headers": {"h": 1}}, InvalidArgument, "headers"),
    ("empty key", {"key": ""}, InvalidArgument, "key must not be empty"),
    ("key past the limit", {"key": "k" * (LIMIT + 1)}, InvalidArgument, "key is 513 bytes"),
    ("utf-8 key past", {"key": "é" * (LIMIT // 2) + "k"}, InvalidArgument, "key is 513 bytes"),
    ("dedupe past", {"dedupe_key": "d" * (LIMIT + 1)}, InvalidArgument, "dedupe_key is 513"),
    ("code past the limit", {"code": "c" * (LIMIT + 1)}, InvalidArgument, "code is 513 bytes"),
    ("header name past", {"headers": {"h" * (LIMIT + 1): "v"}}, InvalidArgument, "header name"),
    ("header value past", {"headers": {"h": "v" * (LIMIT + 1)}}, InvalidArgument, "header 'h'"),
    ("lone surrogate in a value", {"payload": {"s": ["\ud800"]}}, InvalidPayload, "surrogate"),
    ("lone surrogate in a payload key", {"payload": {"\udc00": 1}}, InvalidPayload, "surrogate"),
    ("lone surrogate in the key", {"key": "k\ud800"}, InvalidArgument, "surrogate"),
    ("lone surrogate in the dedupe key", {"dedupe_key": "\udfff"}, InvalidArgument, "surrogate"),
    ("lone surrogate in the code", {"code": "c\ud800"}, InvalidArgument, "surrogate"),
    ("lone surrogate in a header", {"headers": {"h": "\ud800"}}, InvalidArgument, "surrogate"),
    ("version past 64 bits", {"version": 2**63}, InvalidArgument, "version 9223372036854775808"),
    ("version below 64 bits", {"version": -(2**63) - 1}, InvalidArgument, "64-bit range"),
    ("run_at text", {"run_at": "2030-01-01"}, InvalidArgument, "run_at"),
    ("run_at naive", {"run_at": datetime(2030, 1, 1)}, InvalidArgument, "run_at"),
    ("headers a list", {"headers": [("h", "v")]}, InvalidArgument, "headers"),
    ("payload too deep for JSON", {"payload": nested(5000)}, InvalidPayload, "not JSON"),
    ("too many headers", {"headers": {f"h{i}": "v" for i in range(33)}}, InvalidArgument, "33"),
]


@pytest.mark.parametrize(("case", "given", "error", "says"), BAD, ids=[b[0] for b in BAD])
async def test_bad_input_is_refused_before_anything_is_written(
    store: Store,
    engine: Engine,
    kit: Kit,
    case: str,
    given: dict[str, Any],
    error: type[JobledgerError],
    says: str,
) -> None:
    engine.settings = dataclasses.replace(engine.settings, max_payload_bytes=1000)
    options = {"payload": {"ok": 1}, **given}
    async with engine.transaction() as tx:
        with pytest.raises(error, match=says):
            await engine.enqueue(FAST, tx=tx, **options)
        await kit.business_write(tx, "still mine")
        good = await engine.enqueue(FAST, {"ok": 2}, tx=tx)
    assert good.inserted
    assert [j.payload for j in await all_jobs(store)] == [{"ok": 2}]
    assert [e.type for e in await store.log.read_log(0, limit=10)] == ["JobEnqueued"]
    assert await kit.business_count(store) == 1


async def test_a_bad_item_refuses_the_whole_batch(store: Store, engine: Engine) -> None:
    from jobledger.domain.jobs import NewJob

    async with engine.transaction() as tx:
        with pytest.raises(InvalidPayload):
            await engine.enqueue_many(
                [NewJob(FAST, {"n": 1}), NewJob(FAST, {"n": math.nan})], tx=tx
            )
    assert await all_jobs(store) == []


async def test_unusual_values_come_back_exactly_from_the_row_and_the_log(
    store: Store, engine: Engine
) -> None:
    """64-bit integer edges, float edges, non-ASCII and control text survive every
    store unchanged; a backslash before `u0000` is text, not a NUL, and 19 digits in a
    string are text, not an integer."""
    payload = {
        "big": 2**63 - 1,
        "neg": -(2**63),
        "digits": "12345678901234567890123",
        "float": 0.1,
        "tiny": 5e-324,
        "huge": 1e300,
        "zero": -0.0,
        "text": 'é\u2028\x01\x1f"\\u0000/<>&',
        "nested": [[], {}],
        "ünï": "😀",
    }
    job = await enqueue(engine, FAST, payload=payload, headers={"h": "ü"}, key="clé")
    assert job.payload == payload and job.headers == {"h": "ü"} and job.key == "clé"
    assert repr(job.payload) == repr(payload)  # ints stay ints, -0.0 stays -0.0
    (event,) = await store.log.read_stream(job.stream)
    assert repr(event.data["payload"]) == repr(payload)


async def test_unusual_values_come_back_exactly_from_a_large_batch(
    store: Store, engine: Engine
) -> None:
    """The same through `enqueue_many` of 400 (PostgreSQL COPYs a batch that large)."""
    from jobledger.domain.jobs import NewJob

    payloads = [
        {"n": n, "huge": 1e300, "zero": -0.0, "big": 2**62 + n, "t": "é"} for n in range(400)
    ]
    async with engine.transaction() as tx:
        flags = await engine.enqueue_many([NewJob(FAST, p) for p in payloads], tx=tx)
    assert all(f.inserted for f in flags)
    stored = sorted(await all_jobs(store), key=lambda j: j.payload["n"])
    assert [repr(j.payload) for j in stored] == [repr(p) for p in payloads]


async def test_texts_at_the_size_limit_are_stored_and_come_back(
    store: Store, engine: Engine
) -> None:
    """Every limited text at exactly MAX_TEXT_BYTES bytes of UTF-8 (multi-byte too), and
    MAX_HEADERS headers, are accepted and read back unchanged (PostgreSQL indexes key,
    dedupe key and code; a 3,000-byte key aborted the caller's transaction there)."""
    at_limit = "t" * (LIMIT - 2) + "é"  # 512 bytes, 511 characters
    engine.targets.register(at_limit, Lane.FAST, _noop)
    key = "é" * (LIMIT // 2)
    headers = {f"h{i:02d}": "v" * LIMIT for i in range(MAX_HEADERS - 1)} | {"n" * LIMIT: "x"}
    job = await enqueue(
        engine,
        at_limit,
        {"ok": 1},
        key=key,
        dedupe_key="d" * LIMIT,
        code="c" * LIMIT,
        headers=headers,
    )
    assert (job.key, job.dedupe_key, job.code, job.target) == (
        key,
        "d" * LIMIT,
        "c" * LIMIT,
        at_limit,
    )
    assert job.headers == headers
    (event,) = await store.log.read_stream(job.stream)
    assert event.data["key"] == key and event.data["headers"] == headers


async def test_a_target_name_past_the_limit_is_refused(
    store: Store, engine: Engine, kit: Kit
) -> None:
    past = "t" * (LIMIT + 1)
    engine.targets.register(past, Lane.FAST, _noop)
    async with engine.transaction() as tx:
        with pytest.raises(InvalidArgument, match="target is 513 bytes"):
            await engine.enqueue(past, {"ok": 1}, tx=tx)
        await kit.business_write(tx, "still mine")
    assert await all_jobs(store) == []
    assert await kit.business_count(store) == 1


async def _noop(job: Any) -> None:
    return None
