"""The change feed: a hint after each commit, never after a rollback."""

from __future__ import annotations

import asyncio

import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain.jobs import Lane
from jobledger.engine import Engine
from jobledger.storage.feed import Wake
from jobledger.storage.port import Store
from tests.contract.conftest import Kit
from tests.contract.helpers import FAST, LONG, Subscriber, declared_schedule, new_job


class Boom(Exception):
    pass


def covers(wake: Wake, partition: int) -> bool:
    return wake.partitions is None or partition in wake.partitions


async def test_apply_wakes_a_subscriber_with_the_touched_partition(
    store: Store, clock: FakeClock
) -> None:
    sub = await Subscriber(store).start()
    try:
        change = new_job(clock, key="K", dedupe_key="d")
        assert await store.writes.apply([change]) == [True]
        wake = await sub.wake()
        assert change.partition is not None and covers(wake, change.partition)
        assert wake.lanes is None or Lane.FAST in wake.lanes
    finally:
        await sub.close()


async def test_a_business_commit_wakes_only_after_the_commit(store: Store, engine: Engine) -> None:
    sub = await Subscriber(store).start()
    try:
        async with engine.transaction() as tx:
            result = await engine.enqueue(FAST, key="K", dedupe_key="d", tx=tx)
            for _ in range(5):
                await asyncio.sleep(0)
            assert not sub.woken
        job = await store.admin.get_job(result.job_id or "")
        assert job is not None
        assert covers(await sub.wake(), job.partition)
    finally:
        await sub.close()


async def test_a_rollback_wakes_nobody(store: Store, engine: Engine, clock: FakeClock) -> None:
    rolled_back = new_job(clock, key="rolled-back", dedupe_key="r")
    committed = new_job(clock, key="committed", dedupe_key="c")
    assert rolled_back.partition != committed.partition
    sub = await Subscriber(store).start()
    try:
        with pytest.raises(Boom):
            async with store.writes.transaction() as tx:
                assert await store.writes.append_in(tx, [rolled_back]) == [True]
                raise Boom
        assert await store.writes.apply([committed]) == [True]
        wake = await sub.wake()
        assert committed.partition is not None and covers(wake, committed.partition)
        if wake.partitions is not None:
            assert rolled_back.partition not in wake.partitions
    finally:
        await sub.close()


async def test_a_lost_change_wakes_nobody(store: Store, clock: FakeClock) -> None:
    first = new_job(clock, key="a", dedupe_key="same")
    loser = new_job(clock, key="b", dedupe_key="same")
    marker = new_job(clock, key="c", dedupe_key="marker")
    assert len({first.partition, loser.partition, marker.partition}) == 3
    assert await store.writes.apply([first]) == [True]
    sub = await Subscriber(store).start()
    try:
        assert await store.writes.apply([loser]) == [False]
        assert await store.writes.apply([marker]) == [True]
        wake = await sub.wake()
        if wake.partitions is not None:
            assert loser.partition not in wake.partitions
    finally:
        await sub.close()


async def test_a_schedule_change_says_so(store: Store, clock: FakeClock) -> None:
    sub = await Subscriber(store).start()
    try:
        assert await store.writes.apply([declared_schedule("nightly", clock.now())]) == [True]
        assert (await sub.wake()).schedules
    finally:
        await sub.close()


async def test_a_commit_by_another_instance_wakes_a_subscriber(
    store: Store, kit: Kit, clock: FakeClock
) -> None:
    async with kit.peer(store) as peer:
        sub = await Subscriber(store).start()
        try:
            change = new_job(clock, target=LONG, lane=Lane.LONG, dedupe_key="elsewhere")
            assert await peer.writes.apply([change]) == [True]
            wake = await sub.wake()
            assert change.partition is not None and covers(wake, change.partition)
        finally:
            await sub.close()
