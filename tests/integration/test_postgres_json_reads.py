"""The PostgreSQL store's pooled connections parse jsonb with `jsontext.loads` (orjson,
the standard library for what orjson refuses): the lanes' job rows read back exactly
what was enqueued, including values only the standard library reads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from psycopg.pq import Format

from jobledger.core.clock import FakeClock
from jobledger.storage import jsontext
from jobledger.storage.postgres import PostgresStore
from tests.builders import new_job
from tests.factories.postgres import make_store

pytestmark = pytest.mark.postgres

PAYLOADS: list[Any] = [
    {"past 64 bits": 2**70, "negative": -(2**65), "float": 1.5e308, "tiny": 5e-324},
    {"text": "Grüße, 東京 🚚", "escaped": 'quote " and \\ and \n', "nested": [[], {}, None]},
    [True, False, 0, -0.0, 12345678901234567890],
    "just a string",
]


@pytest.fixture
async def pg(tmp_path: Path) -> AsyncIterator[PostgresStore]:
    async with make_store(tmp_path, pool_min=1, pool_max=2) as store:
        assert isinstance(store, PostgresStore)
        yield store


async def test_pooled_connections_parse_jsonb_with_jsontext(pg: PostgresStore) -> None:
    async with pg.pool.connection() as conn:
        oid = conn.adapters.types["jsonb"].oid
        for fmt in (Format.TEXT, Format.BINARY):
            loader = conn.adapters.get_loader(oid, fmt)
            assert loader is not None and getattr(loader, "_loads", None) is jsontext.loads


async def test_the_lanes_read_back_every_payload_as_enqueued(
    pg: PostgresStore, clock: FakeClock
) -> None:
    changes = [new_job(clock, key=f"k{i}", payload=p) for i, p in enumerate(PAYLOADS)]
    assert await pg.writes.apply(changes) == [True] * len(changes)
    for change in changes:
        (read,) = [
            j
            for j in await pg.queue.fast_pending(change.row.partition, after_key=None, limit=100)
            if j.id == change.row.id
        ]
        assert read == change.row
        assert type(read.payload) is type(change.row.payload)
