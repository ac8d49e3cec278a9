"""`LogReads.read_log_rows`: verify's read of the log, the same events as `read_log`."""

from __future__ import annotations

from jobledger.core.clock import FakeClock
from jobledger.domain.chain import chain_problems, event_row
from jobledger.domain.events import Actor
from jobledger.engine import Engine
from jobledger.storage.port import Store
from tests.contract.helpers import FAST, dispatch, enqueue, succeed
from tests.contract.projections.test_replay_workload import generate


async def test_log_rows_are_the_events_of_read_log_page_by_page(
    store: Store, clock: FakeClock
) -> None:
    await generate(store, clock, jobs_count=24)
    everything = await store.log.read_log(0, limit=1000)
    assert len(everything) > 90
    assert await store.log.read_log_rows(0, limit=1000) == [event_row(e) for e in everything]
    paged, after = [], 0
    while page := await store.log.read_log_rows(after, limit=7):
        assert len(page) <= 7
        paged.extend(page)
        after = page[-1][0] or 0
    assert paged == [event_row(e) for e in everything]
    assert chain_problems(paged, {}) == []


async def test_a_log_row_carries_the_actor_and_the_time_as_the_hash_writes_them(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    made = [
        await enqueue(engine, FAST, {"x": [1.5, None, "é"]}, dedupe_key=f"d{i}") for i in range(2)
    ]
    assert await store.writes.apply([dispatch(made[0], clock)]) == [True]
    assert await store.writes.apply([succeed(made[1], clock)]) == [True]
    rows = await store.log.read_log_rows(0, limit=10)
    assert [row[3] for row in rows] == [
        "JobEnqueued",
        "JobEnqueued",
        "JobDispatched",
        "JobSucceeded",
    ]
    for row, event in zip(rows, await store.log.read_log(0, limit=10), strict=True):
        assert row[5] == event.at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        assert row[6] is None or isinstance(row[6], Actor)
        assert row[6] == event.actor
    assert rows[0][4]["payload"] == {"x": [1.5, None, "é"]}
