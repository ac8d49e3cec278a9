"""Liveness tokens (`storage.liveness`) on every store that has them (SQLite, PostgreSQL):
a second store instance on the same database plays the other pod, as another process
would. A token given up is found dead; a held one is not; a pod confirmed dead cannot
take its token back while it is taken over; its partitions (live leases included) and
its long-lane claims go to the pod that takes it over."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain import job_commands
from jobledger.domain.events import SYSTEM
from jobledger.domain.jobs import JobStatus, Stamp
from jobledger.engine import Engine
from jobledger.storage.liveness import Liveness
from jobledger.storage.port import Store
from tests.contract.conftest import Kit
from tests.contract.helpers import LONG, enqueue


def token(store: Store, pod: str) -> Liveness:
    found = store.coordination.liveness(pod)
    if found is None:
        pytest.skip(f"the {store.name} store has no liveness tokens (leases alone)")
    return found


async def holding(store: Store, pod: str) -> Liveness:
    """`pod`'s token, held."""
    found = token(store, pod)
    await found.hold()
    return found


async def test_a_token_given_up_is_found_dead_and_one_held_is_not(store: Store, kit: Kit) -> None:
    a = await holding(store, "pod-a")
    async with kit.peer(store) as peer:
        b = await holding(peer, "pod-b")
        async with b.confirmed(["pod-a"]) as gone:
            assert gone == []
        watch = asyncio.create_task(b.wait_dead(["pod-a"]))
        done, _ = await asyncio.wait({watch}, timeout=0.6)
        assert not done, "a pod holding its token was found dead"
        await a.release()  # the process ends: its session or its file lock goes
        assert await asyncio.wait_for(watch, timeout=5) == ["pod-a"]
        async with b.confirmed(["pod-a", "pod-b"]) as gone:
            assert gone == ["pod-a"]
        await b.release()


async def test_nothing_to_watch_waits_until_cancelled(store: Store) -> None:
    a = await holding(store, "pod-a")
    watch = asyncio.create_task(a.wait_dead([]))
    done, _ = await asyncio.wait({watch}, timeout=0.3)
    assert not done
    watch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await watch
    await a.release()


async def test_a_pod_confirmed_dead_cannot_take_its_token_back_midway(
    store: Store, kit: Kit
) -> None:
    a = await holding(store, "pod-a")
    await a.release()
    async with kit.peer(store) as peer:
        b = await holding(peer, "pod-b")
        async with b.confirmed(["pod-a"]) as gone:
            assert gone == ["pod-a"]
            again = asyncio.create_task(a.hold())
            await asyncio.sleep(0.4)
            assert not a.held, "the dead pod took its token back during its takeover"
        await asyncio.wait_for(again, timeout=10)  # waited, then took it
        assert a.held
        async with b.confirmed(["pod-a"]) as gone:
            assert gone == []
        await b.release()
    await a.release()


async def test_a_second_process_under_the_same_pod_id_cannot_hold_it(
    store: Store, kit: Kit
) -> None:
    a = await holding(store, "pod-a")
    async with kit.peer(store) as peer:
        twin = token(peer, "pod-a")
        twin.hold_wait_s = 0.3
        with pytest.raises(RuntimeError, match="another process running as this pod"):
            await twin.hold()
        assert not twin.held
    await a.release()


async def test_the_dead_pods_partitions_and_claims_go_to_the_pod_taking_it_over(
    store: Store, kit: Kit, engine: Engine, clock: FakeClock
) -> None:
    coordination = store.coordination
    await coordination.seed_partitions(store.partitions)
    now = clock.now()
    until = now + timedelta(seconds=30)
    await coordination.heartbeat("pod-a", now)
    await coordination.heartbeat("pod-c", now)
    assert await coordination.take_partitions([1, 2, 3], "pod-a", now, until) == [1, 2, 3]
    assert await coordination.take_partitions([4], "pod-c", now, until) == [4]
    job = await enqueue(engine, LONG, {"n": 1})
    claim = job_commands.claim(
        job,
        token="tok",
        pod="pod-a",
        lease=timedelta(minutes=5),
        exclusive=False,
        stamp=Stamp(now, SYSTEM, None),
    )
    assert await store.writes.apply([claim]) == [True]
    a = await holding(store, "pod-a")
    await a.release()
    async with kit.peer(store) as peer:
        b = await holding(peer, "pod-b")
        async with b.confirmed(["pod-a"]) as gone:
            taken = await b.take_partitions(gone, "pod-b", now, until)
            claims = await b.claims_of(gone)
        assert taken == [1, 2, 3]  # live leases: taken all the same
        assert [(c.id, c.status, c.claimed_by) for c in claims] == [
            (job.id, JobStatus.RUNNING, "pod-a")
        ]
        leases = {lease.partition: lease.owner for lease in await coordination.leases()}
        assert [leases[p] for p in (1, 2, 3, 4)] == ["pod-b", "pod-b", "pod-b", "pod-c"]
        assert await coordination.live_workers(now - timedelta(seconds=1)) == ["pod-c"]
        await b.release()
