"""Partition leases and worker liveness: plain rows with compare-and-set updates."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from datetime import timedelta

from jobledger.core.clock import FakeClock
from jobledger.storage.port import PartitionLease, Store
from tests.contract.conftest import Kit
from tests.contract.lanes_kit import make_engine, pod

LEASE = timedelta(seconds=30)


async def test_seed_partitions_creates_free_rows_once(store: Store) -> None:
    await store.coordination.seed_partitions(8)
    await store.coordination.seed_partitions(8)
    assert await store.coordination.leases() == [PartitionLease(p, None, None) for p in range(8)]


async def test_seeding_keeps_existing_owners(store: Store, clock: FakeClock) -> None:
    await store.coordination.seed_partitions(4)
    now = clock.now()
    assert await store.coordination.take_partition(2, "pod-a", now, now + LEASE)
    await store.coordination.seed_partitions(4)
    leases = await store.coordination.leases()
    assert len(leases) == 4 and leases[2] == PartitionLease(2, "pod-a", now + LEASE)


async def test_several_instances_seeding_at_once_make_each_row_once(store: Store, kit: Kit) -> None:
    async with AsyncExitStack() as stack:
        peers = [await stack.enter_async_context(kit.peer(store)) for _ in range(3)]
        await asyncio.gather(*(s.coordination.seed_partitions(64) for s in [store, *peers]))
        for s in [store, *peers]:
            assert [lease.partition for lease in await s.coordination.leases()] == list(range(64))


async def test_take_partition_rules(seeded: Store, clock: FakeClock) -> None:
    store, now = seeded, clock.now()
    assert await store.coordination.take_partition(0, "pod-a", now, now + LEASE)  # free
    assert not await store.coordination.take_partition(
        0, "pod-b", now, now + LEASE
    )  # live, someone else's
    later = now + timedelta(seconds=10)
    assert await store.coordination.take_partition(
        0, "pod-a", later, later + LEASE
    )  # already mine: extends
    assert (await store.coordination.leases())[0] == PartitionLease(0, "pod-a", later + LEASE)
    expiry = later + LEASE
    assert await store.coordination.take_partition(0, "pod-b", expiry, expiry + LEASE)  # expired
    assert (await store.coordination.leases())[0].owner == "pod-b"
    assert not await store.coordination.take_partition(
        store.partitions + 5, "pod-a", now, now + LEASE
    )


async def test_exactly_one_of_racing_pods_takes_a_partition(
    seeded: Store, kit: Kit, clock: FakeClock
) -> None:
    store, now = seeded, clock.now()
    async with AsyncExitStack() as stack:
        peers = [await stack.enter_async_context(kit.peer(store)) for _ in range(3)]
        contenders = [store, *peers, store, *peers]
        for partition in range(4):
            won = await asyncio.gather(
                *(
                    s.coordination.take_partition(partition, f"pod-{i}", now, now + LEASE)
                    for i, s in enumerate(contenders)
                )
            )
            assert won.count(True) == 1
            winner = f"pod-{won.index(True)}"
            assert (await store.coordination.leases())[partition].owner == winner


async def test_renew_extends_only_what_the_pod_still_holds(seeded: Store, clock: FakeClock) -> None:
    store, now = seeded, clock.now()
    for p in (1, 2, 3):
        assert await store.coordination.take_partition(p, "pod-a", now, now + LEASE)
    assert await store.coordination.take_partition(4, "pod-b", now, now + LEASE)
    later = now + timedelta(seconds=10)
    held = await store.coordination.renew_partitions("pod-a", [3, 4, 1, 9], later, later + LEASE)
    assert held == [3, 1]
    leases = {lease.partition: lease for lease in await store.coordination.leases()}
    assert leases[1].lease_until == later + LEASE and leases[2].lease_until == now + LEASE
    assert leases[4] == PartitionLease(4, "pod-b", now + LEASE)
    # a lease that already expired is not renewed: someone may have taken it meanwhile
    gone = now + timedelta(seconds=31)
    assert await store.coordination.renew_partitions("pod-a", [2], gone, gone + LEASE) == []
    assert await store.coordination.renew_partitions("pod-a", [], gone, gone + LEASE) == []


async def test_release_frees_only_the_pods_own_partitions(seeded: Store, clock: FakeClock) -> None:
    store, now = seeded, clock.now()
    assert await store.coordination.take_partition(1, "pod-a", now, now + LEASE)
    assert await store.coordination.take_partition(2, "pod-b", now, now + LEASE)
    await store.coordination.release_partitions("pod-a", [1, 2])
    leases = {lease.partition: lease for lease in await store.coordination.leases()}
    assert leases[1] == PartitionLease(1, None, None)
    assert leases[2].owner == "pod-b"
    assert await store.coordination.take_partition(1, "pod-c", now, now + LEASE)


async def test_heartbeat_live_workers_and_remove(store: Store, clock: FakeClock) -> None:
    t0 = clock.now()
    await store.coordination.heartbeat("pod-b", t0)
    await store.coordination.heartbeat("pod-a", t0 + timedelta(seconds=20))
    await store.coordination.heartbeat("pod-c", t0 - timedelta(seconds=40))
    assert await store.coordination.live_workers(t0 - timedelta(seconds=30)) == ["pod-a", "pod-b"]
    assert await store.coordination.live_workers(t0) == ["pod-a"]  # strictly newer than `since`
    await store.coordination.heartbeat("pod-b", t0 + timedelta(seconds=25))  # a beat moves the row
    assert await store.coordination.live_workers(t0) == ["pod-a", "pod-b"]
    await store.coordination.remove_worker("pod-a")
    await store.coordination.remove_worker("pod-unknown")
    assert await store.coordination.live_workers(t0 - timedelta(days=1)) == ["pod-b", "pod-c"]


async def test_a_heartbeat_carries_the_pods_paused_targets(store: Store, clock: FakeClock) -> None:
    """What a pod's heartbeat says of its paused targets, read back for the live pods on
    every store: the dashboard of a process without workers shows them."""
    t0 = clock.now()
    since = t0 - timedelta(minutes=3, milliseconds=250)
    odd = "kafka:orders.v1$eu"  # dots and a dollar sign: fine as a name, not as a BSON key
    await store.coordination.heartbeat("pod-a", t0, {odd: since, "mail:welcome": t0})
    await store.coordination.heartbeat("pod-b", t0, {})
    await store.coordination.heartbeat("pod-c", t0)  # says nothing (an earlier release)
    await store.coordination.heartbeat("pod-d", t0 - timedelta(minutes=5), {"x": t0})  # not live
    found = await store.coordination.live_pauses(t0 - timedelta(seconds=30))
    assert found == {"pod-a": {odd: since, "mail:welcome": t0}, "pod-b": {}}
    # the batched beat writes them too, and a later beat replaces them
    await store.coordination.seed_partitions(4)
    later = t0 + timedelta(seconds=10)
    await store.coordination.beat("pod-a", later, [], later + LEASE, t0, {"mail:welcome": t0})
    await store.coordination.beat("pod-b", later, [], later + LEASE, t0)
    found = await store.coordination.live_pauses(t0)
    assert found == {"pod-a": {"mail:welcome": t0}}  # pod-b said nothing this time
    await store.coordination.remove_worker("pod-a")
    assert await store.coordination.live_pauses(t0 - timedelta(days=1)) == {"pod-d": {"x": t0}}


async def test_a_pods_heartbeat_says_what_it_paused(store: Store, clock: FakeClock) -> None:
    """The pod's lease heartbeat writes its pause map: a target paused on the pod is in
    its row after the next beat, gone after it resumed and beat again."""
    engine = make_engine(store, clock)
    runtime = pod(engine, "pod-a")
    await store.coordination.seed_partitions(store.partitions)
    runtime.pauses.pause("kafka:orders")
    paused_at = clock.now()
    await runtime.leases.tick()
    since = clock.now() - timedelta(seconds=30)
    assert await store.coordination.live_pauses(since) == {"pod-a": {"kafka:orders": paused_at}}
    clock.advance(seconds=5)
    runtime.pauses.resume("kafka:orders")
    await runtime.leases.tick()
    assert await store.coordination.live_pauses(since) == {"pod-a": {}}
