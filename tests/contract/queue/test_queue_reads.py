"""The lane reads: fast_pending, long_candidates, running_codes, inflight, next_due."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobledger.config.settings import Settings
from jobledger.core.clock import FakeClock
from jobledger.domain.jobs import Lane
from jobledger.engine import Engine
from jobledger.storage.port import Store
from tests.contract.helpers import (
    EXCLUSIVE,
    FAST,
    FAST_OTHER,
    LONG,
    claim,
    dispatch,
    enqueue,
    kill,
    register_targets,
    renew,
)


@pytest.fixture
def one_partition(store: Store, clock: FakeClock) -> Engine:
    """An engine that hashes every row into partition 0 of the store."""
    built = Engine(store, clock=clock, settings=Settings(partitions=1))
    register_targets(built)
    return built


async def test_fast_pending_is_ordered_by_key_version_id_and_pages_by_key(
    store: Store, one_partition: Engine, clock: FakeClock
) -> None:
    engine = one_partition
    b2 = await enqueue(engine, FAST, key="b", version=2, dedupe_key="b2")
    a1 = await enqueue(engine, FAST_OTHER, key="a", version=1, dedupe_key="a1")
    b1 = await enqueue(engine, FAST, key="b", version=1, dedupe_key="b1")
    clock.advance(seconds=1)
    c1 = await enqueue(engine, FAST, key="c", version=1, dedupe_key="c1")
    keyless = await enqueue(engine, FAST, dedupe_key="no-key")
    # not fast PENDING: never listed
    await enqueue(engine, LONG, key="a", dedupe_key="long")
    dead = await enqueue(engine, FAST, key="a", version=0, dedupe_key="dead")
    assert await store.writes.apply([kill(dead, clock)]) == [True]
    # an in-flight mark keeps the row PENDING and listed
    marked = dispatch(c1, clock)
    assert await store.writes.apply([marked]) == [True]

    rows = await store.queue.fast_pending(0, after_key=None, limit=100)
    assert [j.id for j in rows] == [keyless.id, a1.id, b1.id, b2.id, c1.id]
    assert rows[-1] == marked.row

    first = await store.queue.fast_pending(0, after_key=None, limit=2)
    assert [j.id for j in first] == [keyless.id, a1.id]
    after_a = await store.queue.fast_pending(0, after_key=first[-1].order_key, limit=2)
    assert [j.id for j in after_a] == [b1.id, b2.id]
    assert await store.queue.fast_pending(0, after_key="c", limit=10) == []
    assert await store.queue.fast_pending(1, after_key=None, limit=10) == []


async def test_fast_pending_keeps_partitions_apart(store: Store, engine: Engine) -> None:
    jobs = [await enqueue(engine, FAST, key=f"k{i}", dedupe_key=f"d{i}") for i in range(12)]
    for partition in {j.partition for j in jobs}:
        listed = await store.queue.fast_pending(partition, after_key=None, limit=100)
        assert {j.id for j in listed} == {j.id for j in jobs if j.partition == partition}


async def test_long_candidates_are_due_pending_and_expired_running_oldest_first(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    t0 = clock.now()
    oldest = await enqueue(engine, LONG, dedupe_key="oldest")
    clock.advance(minutes=1)
    running_live = await enqueue(engine, LONG, dedupe_key="live")
    running_expired = await enqueue(engine, EXCLUSIVE, dedupe_key="expired")
    assert await store.writes.apply(
        [claim(running_live, clock), claim(running_expired, clock, exclusive=True)]
    ) == [True, True]
    clock.advance(minutes=1)
    later = await enqueue(engine, LONG, dedupe_key="later")
    future = await enqueue(engine, LONG, dedupe_key="future", run_at=t0 + timedelta(hours=1))
    await enqueue(engine, FAST, dedupe_key="fast")
    dead = await enqueue(engine, LONG, dedupe_key="dead")
    assert await store.writes.apply([kill(dead, clock)]) == [True]

    clock.set(t0 + timedelta(minutes=5))
    fresh = await store.admin.get_job(running_live.id)
    assert fresh is not None
    assert await store.writes.apply([renew(fresh, clock)]) == [True]  # live until t0+10 min
    now = t0 + timedelta(minutes=7)  # running_expired's lease ended at t0+6 min

    rows = await store.queue.long_candidates(now, limit=10)
    assert [j.id for j in rows] == [oldest.id, running_expired.id, later.id]
    assert [j.id for j in await store.queue.long_candidates(now, limit=2)] == [
        oldest.id,
        running_expired.id,
    ]
    assert future.id in {
        j.id for j in await store.queue.long_candidates(t0 + timedelta(hours=1), limit=10)
    }


async def test_running_codes_are_live_exclusive_running_rows(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    exclusive = await enqueue(engine, EXCLUSIVE, dedupe_key="x1")
    plain = await enqueue(engine, LONG, dedupe_key="p1")
    assert await store.queue.running_codes(clock.now()) == set()
    assert await store.writes.apply(
        [claim(exclusive, clock, exclusive=True), claim(plain, clock)]
    ) == [
        True,
        True,
    ]
    assert await store.queue.running_codes(clock.now()) == {EXCLUSIVE}
    assert await store.queue.running_codes(clock.now() + timedelta(minutes=4, seconds=59)) == {
        EXCLUSIVE
    }
    assert await store.queue.running_codes(clock.now() + timedelta(minutes=5)) == set()


async def test_inflight_lists_marked_fast_rows_of_a_partition(
    store: Store, one_partition: Engine, clock: FakeClock
) -> None:
    engine = one_partition
    a = await enqueue(engine, FAST, key="a", dedupe_key="a")
    await enqueue(engine, FAST, key="b", dedupe_key="b")
    assert await store.queue.inflight(0) == []
    mark = dispatch(a, clock)
    assert await store.writes.apply([mark]) == [True]
    assert await store.queue.inflight(0) == [mark.row]
    assert await store.queue.inflight(1) == []


async def test_next_due_per_lane_and_partitions(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    t0 = clock.now()
    assert await store.queue.next_due(list(range(store.partitions)), Lane.FAST) is None
    assert await store.queue.next_due([], Lane.LONG) is None
    soon = await enqueue(engine, FAST, key="a", dedupe_key="a", run_at=t0 + timedelta(minutes=2))
    late = await enqueue(engine, FAST, key="b", dedupe_key="b", run_at=t0 + timedelta(minutes=9))
    long_job = await enqueue(engine, LONG, dedupe_key="l", run_at=t0 + timedelta(minutes=1))
    everything = list(range(store.partitions))
    assert await store.queue.next_due(everything, Lane.FAST) == soon.next_run_at
    assert await store.queue.next_due([late.partition], Lane.FAST) == (
        soon.next_run_at if soon.partition == late.partition else late.next_run_at
    )
    others = [p for p in everything if p not in (soon.partition, late.partition)]
    assert await store.queue.next_due(others, Lane.FAST) is None
    assert await store.queue.next_due([], Lane.LONG) == long_job.next_run_at
    # a DEAD or RUNNING row is not waiting for a timer
    assert await store.writes.apply([claim(long_job, clock)]) == [True]
    assert await store.queue.next_due([], Lane.LONG) is None
    assert await store.writes.apply([kill(soon, clock)]) == [True]
    assert await store.queue.next_due(everything, Lane.FAST) == late.next_run_at
