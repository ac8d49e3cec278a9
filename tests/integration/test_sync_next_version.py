"""`next_version` for sync callers, on SQLite and PostgreSQL with a running pod: the raw
drivers (`integrations.sync`); SQLAlchemy and Django in their own test files."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobledger.domain.errors import InvalidArgument
from jobledger.integrations import sync
from tests.integration.sync_kit import FAST, SyncKit, running


class Boom(Exception):
    pass


@pytest.fixture(params=["sqlite", "postgres"])
async def kit(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SyncKit]:
    async with running(request.param, tmp_path) as started:
        yield started


async def test_versions_count_in_the_callers_transaction_and_order_its_jobs(
    kit: SyncKit,
) -> None:
    def order_event(n: int, *, fail: bool = False) -> int:
        with kit.transaction() as conn:
            kit.insert_user(conn, f"u{n}")
            version = sync.next_version(kit.app, conn, "order-1")
            sync.enqueue(kit.app, conn, FAST, {"n": n}, key="order-1", version=version)
            if fail:
                raise Boom
            return version

    assert [await asyncio.to_thread(order_event, n) for n in range(3)] == [1, 2, 3]
    with pytest.raises(Boom):
        await asyncio.to_thread(order_event, 99, fail=True)
    assert await asyncio.to_thread(order_event, 3) == 4  # the rolled-back 4 is given again
    jobs = await kit.app.pod.store.all_jobs()
    await kit.app.wait_done(*(j.id for j in jobs), timeout_s=10)
    assert kit.delivered == [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 3}]


async def test_a_bad_key_is_refused_before_anything_is_written(kit: SyncKit) -> None:
    def ask() -> None:
        with kit.transaction() as conn, pytest.raises(InvalidArgument, match="key"):
            sync.next_version(kit.app, conn, "")

    await asyncio.to_thread(ask)
