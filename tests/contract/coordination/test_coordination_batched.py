"""The batched coordination reads and writes (`Coordination.beat`, `take_partitions`,
`inflight_in`, `pending_partitions`): the same answers as the single-row methods they
stand for, on every store (PostgreSQL overrides each with one statement)."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from datetime import timedelta

from jobledger.core.clock import FakeClock
from jobledger.domain import job_commands
from jobledger.domain.events import SYSTEM
from jobledger.domain.jobs import NewJob, Stamp
from jobledger.engine import Engine
from jobledger.storage.port import PartitionLease, Store
from tests.contract.conftest import Kit
from tests.stores import all_jobs

LEASE = timedelta(seconds=30)


async def test_beat_writes_liveness_renews_and_reads_the_leases(
    seeded: Store, clock: FakeClock
) -> None:
    store, now = seeded, clock.now()
    for p in (1, 2):
        assert await store.coordination.take_partition(p, "pod-a", now, now + LEASE)
    assert await store.coordination.take_partition(4, "pod-b", now, now + LEASE)
    await store.coordination.heartbeat("pod-b", now)
    later = now + timedelta(seconds=10)
    beat = await store.coordination.beat("pod-a", later, [2, 4, 1], later + LEASE, later - LEASE)
    assert beat.held == [2, 1]  # 4 is pod-b's
    assert beat.live == ["pod-a", "pod-b"] or beat.live == ["pod-b"]  # own row may lag
    assert await store.coordination.live_workers(later - timedelta(seconds=1)) == ["pod-a"]
    leases = {lease.partition: lease for lease in beat.leases}
    assert [lease.partition for lease in beat.leases] == list(range(store.partitions))
    assert leases[1] == PartitionLease(1, "pod-a", later + LEASE)  # the renewal is seen
    assert leases[4] == PartitionLease(4, "pod-b", now + LEASE)
    assert leases[0] == PartitionLease(0, None, None)
    assert await store.coordination.leases() == beat.leases
    # an expired lease is not renewed
    gone = later + LEASE
    beat = await store.coordination.beat("pod-a", gone, [1, 2], gone + LEASE, gone - LEASE)
    assert beat.held == []


async def test_take_partitions_takes_only_free_expired_or_own(
    seeded: Store, clock: FakeClock
) -> None:
    store, now = seeded, clock.now()
    assert await store.coordination.take_partition(3, "pod-b", now, now + LEASE)
    assert await store.coordination.take_partition(5, "pod-a", now, now + LEASE)
    taken = await store.coordination.take_partitions([5, 3, 0, 1], "pod-a", now, now + LEASE)
    assert taken == [5, 0, 1]
    owners = {lease.partition: lease.owner for lease in await store.coordination.leases()}
    assert owners[3] == "pod-b" and owners[0] == owners[1] == owners[5] == "pod-a"
    expiry = now + LEASE
    assert await store.coordination.take_partitions([3, 0], "pod-c", expiry, expiry + LEASE) == [
        3,
        0,
    ]
    assert (
        await store.coordination.take_partitions([store.partitions + 1], "pod-a", now, now + LEASE)
        == []
    )


async def test_racing_batched_takes_give_each_partition_one_owner(
    seeded: Store, kit: Kit, clock: FakeClock
) -> None:
    store, now = seeded, clock.now()
    async with AsyncExitStack() as stack:
        peers = [await stack.enter_async_context(kit.peer(store)) for _ in range(3)]
        wanted = list(range(8))
        won = await asyncio.gather(
            *(
                s.coordination.take_partitions(
                    wanted[i:] + wanted[:i], f"pod-{i}", now, now + LEASE
                )
                for i, s in enumerate([store, *peers])
            )
        )
    owners = {lease.partition: lease.owner for lease in await store.coordination.leases()}
    claimed = [p for taken in won for p in taken]
    assert len(claimed) == len(set(claimed))  # nobody took a partition twice
    for i, taken in enumerate(won):
        assert all(owners[p] == f"pod-{i}" for p in taken)


async def test_inflight_in_and_pending_partitions(
    seeded: Store, engine: Engine, clock: FakeClock
) -> None:
    store = seeded

    async def noop(job: object) -> None:
        return None

    engine.targets.register("bench:fast", "fast", noop)
    async with engine.transaction() as tx:
        await engine.enqueue_many(
            [NewJob("bench:fast", {"i": i}, key=f"k{i}") for i in range(12)], tx=tx
        )
    jobs = await all_jobs(store)
    parts = sorted({job.partition for job in jobs})
    everything = list(range(store.partitions))
    assert await store.queue.pending_partitions(everything, due_by=None) == parts
    assert await store.queue.pending_partitions(everything, due_by=clock.now()) == parts
    early = clock.now() - timedelta(seconds=1)
    assert await store.queue.pending_partitions(everything, due_by=early) == []
    assert await store.queue.pending_partitions(parts[1:], due_by=None) == parts[1:]
    assert await store.queue.inflight_in(everything) == []
    stamp = Stamp(clock.now(), SYSTEM, None)
    marks = [
        job_commands.dispatch(job, token=f"t{i}", pod="pod-a", stamp=stamp)
        for i, job in enumerate(jobs[:5])
    ]
    assert await store.writes.apply(marks) == [True] * 5
    single = [row for p in parts for row in await store.queue.inflight(p)]
    assert sorted(job.id for job in single) == sorted(job.id for job in jobs[:5])
    assert await store.queue.inflight_in(parts) == single
