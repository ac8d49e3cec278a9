"""A first mark (`Writes.mark_first`) sends no wake-up: a NOTIFY
in its transaction would hold PostgreSQL's notification-queue lock through its commit's
flush, on the commit → handler path, for a wake-up nobody needs (the row goes in
flight; the pod that marks it is the partition's only worker).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from jobledger.core.clock import FakeClock
from jobledger.core.ids import new_token
from jobledger.domain import job_commands
from jobledger.domain.events import SYSTEM
from jobledger.domain.jobs import Job, Stamp
from jobledger.storage.feed import Wake
from jobledger.storage.port import LeaseGuard
from jobledger.storage.postgres import PostgresStore
from tests.builders import new_job

pytestmark = pytest.mark.postgres

POD = "pod-a"


@pytest.fixture(autouse=True)
async def _seeded(pg: PostgresStore) -> None:
    await pg.coordination.seed_partitions(pg.partitions)


async def written(pg: PostgresStore, clock: FakeClock, key: str) -> Job:
    change = new_job(clock, target="kafka:m", key=key)
    assert await pg.writes.apply([change]) == [True]
    row = change.row
    assert isinstance(row, Job)
    return row


async def next_wake(feed: AsyncIterator[Wake]) -> Wake:
    return await asyncio.wait_for(anext(feed), 10)


async def test_a_first_mark_wakes_nobody(pg: PostgresStore, clock: FakeClock) -> None:
    feed = await pg.feed().open()
    try:
        job = await written(pg, clock, "A")
        assert (await next_wake(feed)).partitions == frozenset({job.partition})
        now = clock.now()
        assert await pg.coordination.take_partition(
            job.partition, POD, now, now + timedelta(minutes=5)
        )
        stamp = Stamp(clock.now(), SYSTEM, job.trace_id)
        change = job_commands.dispatch(job, token=new_token(), pod=POD, stamp=stamp)
        assert await pg.writes.mark_first(change, LeaseGuard(POD, clock.now()))
        marked = await pg.admin.get_job(job.id)
        assert marked is not None and marked.inflight_token is not None
        # a row of another partition, committed after the mark: the next wake-up is its
        # alone (wake-ups arrive in commit order; one still unread would be merged in)
        other = job
        for n in range(100):
            other = await written(pg, clock, f"B{n}")
            if other.partition != job.partition:
                break
        assert other.partition != job.partition
        wake = await next_wake(feed)
        assert job.partition not in wake.partitions
        assert other.partition in wake.partitions
    finally:
        await feed.aclose()
