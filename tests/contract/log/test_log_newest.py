"""`LogReads.read_log_newest`: the log read backwards by position, a page at a time, as
the admin's browse of finished jobs reads it."""

from __future__ import annotations

from jobledger.core.clock import FakeClock
from jobledger.engine import Engine
from jobledger.storage.port import Store
from tests.contract.helpers import FAST, enqueue, succeed


async def test_read_log_newest_pages_backwards(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    assert await store.log.read_log_newest(None, limit=5) == []
    made = [await enqueue(engine, FAST, dedupe_key=f"d{i}") for i in range(4)]
    assert await store.writes.apply([succeed(made[1], clock)]) == [True]
    everything = await store.log.read_log(0, limit=100)
    assert len(everything) == 5

    newest = await store.log.read_log_newest(None, limit=2)
    assert newest == everything[::-1][:2]
    assert newest[0].type == "JobSucceeded"

    paged: list[object] = []
    before = None
    while page := await store.log.read_log_newest(before, limit=2):
        assert len(page) <= 2
        paged.extend(page)
        before = page[-1].position
    assert paged == everything[::-1]
    first = everything[0].position
    assert first is not None
    assert await store.log.read_log_newest(first, limit=10) == []
    assert await store.log.read_log_newest(first + 1, limit=10) == [everything[0]]
