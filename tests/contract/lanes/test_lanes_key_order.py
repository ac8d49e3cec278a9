"""A key's rows of one version run in the order they were enqueued, on every store.

The reference reads a chain in `{key, version, _id}` order and its ObjectIds increase
within a process, so a module that enqueues "created" then "paid" for one key without
versions has them delivered in that order. Every store here reads a chain in
`(version, id)` order; job ids increase within a process (`core.ids`), also within one
millisecond. The `FakeClock` never moves in these tests: every row has the same one.
"""

from __future__ import annotations

import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain.jobs import DeliveryMode
from jobledger.storage.port import Store
from tests.contract.lanes_kit import drain, enqueue, keys_in, one_pod

P = 9


@pytest.mark.parametrize("mode", [DeliveryMode.AT_LEAST_ONCE, DeliveryMode.AT_MOST_ONCE])
async def test_rows_of_one_key_and_version_run_in_enqueue_order(
    store: Store, clock: FakeClock, mode: DeliveryMode
) -> None:
    engine, runtime, rec = await one_pod(store, clock, mode)
    key = keys_in(P, 1)[0]
    await enqueue(engine, "kafka:t", [{"key": key, "payload": n} for n in range(30)])
    await enqueue(engine, "kafka:t", [{"key": key, "payload": n} for n in range(30, 40)])
    await drain(runtime, P)
    assert rec.payloads == list(range(40))


async def test_versions_still_come_first(store: Store, clock: FakeClock) -> None:
    """Enqueue order breaks ties between rows of one version only: a lower version
    enqueued later still runs first."""
    engine, runtime, rec = await one_pod(store, clock, DeliveryMode.AT_LEAST_ONCE)
    key = keys_in(P, 1)[0]
    items = [{"key": key, "version": v, "payload": f"{v}.{n}"} for v in (2, 1) for n in range(3)]
    await enqueue(engine, "kafka:t", items)
    await drain(runtime, P)
    assert rec.payloads == ["1.0", "1.1", "1.2", "2.0", "2.1", "2.2"]
