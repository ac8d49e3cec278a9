"""`next_version(key, tx)`: a per-key counter in the caller's transaction, on every store.

The reference's users kept their own counters for a key's growing `version` (its gap
G12: the generic `nextVersion(key, tx)` was never built). Job ids order a key's rows of
one version only within one process (docs/decisions.md D21); a version from this
counter orders them across processes, in commit order: the counter's row is written in
the caller's transaction, so a second transaction that asks for the same key waits
until the first one ends (PostgreSQL's row lock, SQLite's single writer, MongoDB's write
conflict, which aborts the second at once and `run_in_transaction` retries until the
first has ended; the memory store's lock per key).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain.errors import InvalidArgument
from jobledger.domain.jobs import DeliveryMode
from jobledger.engine import Engine
from jobledger.storage.port import Store
from tests.contract.lanes_kit import drain, keys_in, make_engine, one_pod


async def test_versions_count_up_per_key_across_transactions(
    store: Store, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    got = []
    for key in ("order-1", "order-1", "order-2", "order-1"):
        async with engine.transaction() as tx:
            got.append(await engine.next_version(key, tx=tx))
    assert got == [1, 2, 1, 3]
    async with engine.transaction() as tx:
        twice = [await engine.next_version("order-2", tx=tx) for _ in range(2)]
    assert twice == [2, 3]


async def test_a_rolled_back_transaction_leaves_its_version_unused(
    store: Store, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    async with engine.transaction() as tx:
        assert await engine.next_version("order-9", tx=tx) == 1
    with pytest.raises(RuntimeError, match="business rule"):
        async with engine.transaction() as tx:
            assert await engine.next_version("order-9", tx=tx) == 2
            raise RuntimeError("business rule broken: roll back")
    async with engine.transaction() as tx:
        assert await engine.next_version("order-9", tx=tx) == 2


async def test_a_second_transaction_waits_for_the_first_and_counts_after_it(
    store: Store, clock: FakeClock
) -> None:
    """Versions follow commit order: the second asker of a key gets its version only
    once the first transaction has ended, then the next number."""
    engine = make_engine(store, clock)
    first_has_it = asyncio.Event()
    release_first = asyncio.Event()

    async def first() -> int:
        async with engine.transaction() as tx:
            version = await engine.next_version("order-5", tx=tx)
            first_has_it.set()
            await release_first.wait()
        return version

    async def second() -> int:
        await first_has_it.wait()
        if store.name == "mongodb":  # a write conflict aborts at once: retried until it ends
            mongo: Any = store
            return int(await mongo.run_in_transaction(_asker(engine, "order-5")))
        async with engine.transaction() as tx:
            return await engine.next_version("order-5", tx=tx)

    a, b = asyncio.create_task(first()), asyncio.create_task(second())
    await first_has_it.wait()
    await asyncio.sleep(0.2)
    assert not b.done()  # waiting for the first transaction's counter row
    release_first.set()
    assert await asyncio.wait_for(asyncio.gather(a, b), 10) == [1, 2]


def _asker(engine: Engine, key: str) -> Callable[[Any], Awaitable[int]]:
    async def ask(tx: Any) -> int:
        return await engine.next_version(key, tx=tx)

    return ask


async def test_jobs_enqueued_with_counted_versions_run_in_that_order(
    store: Store, clock: FakeClock
) -> None:
    engine, runtime, rec = await one_pod(store, clock, DeliveryMode.AT_LEAST_ONCE)
    key = keys_in(7, 1)[0]
    for _ in range(5):
        async with engine.transaction() as tx:
            version = await engine.next_version(key, tx=tx)
            await engine.enqueue("kafka:t", f"v{version}", key=key, version=version, tx=tx)
    await drain(runtime, 7)
    assert rec.payloads == ["v1", "v2", "v3", "v4", "v5"]


@pytest.mark.parametrize("key", ["", None, 7, "a\x00b", "x" * 513, "\ud800"])
async def test_a_key_no_store_could_hold_is_refused_before_any_write(
    store: Store, clock: FakeClock, key: object
) -> None:
    engine = make_engine(store, clock)
    async with engine.transaction() as tx:
        with pytest.raises(InvalidArgument, match="key"):
            await engine.next_version(key, tx=tx)  # type: ignore[arg-type]
        assert await engine.next_version("order-3", tx=tx) == 1
