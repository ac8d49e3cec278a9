"""The at-most-once wake without a read: a single enqueue's NOTIFY carries
its JobEnqueued (folded into its row), and `mark_first` marks it only when the read
would have let it run — first of its chain, lease held, row unchanged — with its event
in the log's hash chain.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from jobledger.config.settings import Settings
from jobledger.core.clock import FakeClock
from jobledger.core.ids import new_id, new_token
from jobledger.domain import job_commands
from jobledger.domain.chain import chain_problems, event_row
from jobledger.domain.events import SYSTEM
from jobledger.domain.job_outcomes import OutcomePolicy, Result, RunResult, decide_outcome
from jobledger.domain.jobs import Change, DeliveryMode, Job, Lane, NewJob, Stamp
from jobledger.domain.policies import partition_of
from jobledger.engine import Engine
from jobledger.reactors.runtime import Runtime
from jobledger.storage.feed import Wake
from jobledger.storage.jsontext import dumps
from jobledger.storage.port import LeaseGuard
from jobledger.storage.postgres import PostgresStore
from jobledger.storage.postgres.encode import hint_payload
from jobledger.storage.postgres.listen import parse_wake
from tests.contract.lanes_kit import Recorder, until

pytestmark = pytest.mark.postgres

POD = "pod-a"


@pytest.fixture(autouse=True)
async def _seeded(pg: PostgresStore) -> None:
    await pg.coordination.seed_partitions(pg.partitions)


def opened(
    clock: FakeClock, *, key: str = "K", version: int = 0, target: str = "kafka:m"
) -> Change:
    job_id = new_id(int(clock.now().timestamp() * 1000))
    return job_commands.enqueued(
        job_id=job_id,
        spec=NewJob(target, {"v": version}, key=key, version=version),
        code=target,
        lane=Lane.FAST,
        partition=partition_of(key, job_id),
        dedupe_key=job_id,
        stamp=Stamp(clock.now()),
    )


async def written(pg: PostgresStore, clock: FakeClock, **spec: Any) -> Job:
    change = opened(clock, **spec)
    assert await pg.writes.apply([change]) == [True]
    row = change.row
    assert isinstance(row, Job)
    return row


async def lease(pg: PostgresStore, clock: FakeClock, partition: int, pod: str = POD) -> None:
    now = clock.now()
    assert await pg.coordination.take_partition(partition, pod, now, now + timedelta(minutes=5))


def mark(job: Job, clock: FakeClock) -> Change:
    stamp = Stamp(clock.now(), SYSTEM, job.trace_id)
    return job_commands.dispatch(job, token=new_token(), pod=POD, stamp=stamp)


async def next_wake(feed: AsyncIterator[Wake]) -> Wake:
    return await asyncio.wait_for(anext(feed), 10)


async def test_a_single_enqueue_hands_its_row_to_the_feed(
    pg: PostgresStore, clock: FakeClock
) -> None:
    engine = Engine(pg, clock=clock)
    engine.targets.register("kafka:m", "fast", Recorder())
    engine.targets.register("report", "long", Recorder())
    feed = await pg.feed().open()
    try:
        async with engine.transaction() as tx:
            one = await engine.enqueue("kafka:m", {"n": 1.5, "s": "é"}, tx=tx, key="a")
        wake = await next_wake(feed)
        row = await pg.admin.get_job(one.job_id or "")
        assert row is not None and wake.jobs == (row,)
        assert wake.partitions == frozenset({row.partition})
        async with engine.transaction() as tx:  # headers, no payload
            two = await engine.enqueue("kafka:m", None, tx=tx, key="h", headers={"a": "b"})
        row = await pg.admin.get_job(two.job_id or "")
        assert row is not None and row.headers == {"a": "b"} and row.payload is None
        assert (await next_wake(feed)).jobs == (row,)
        # several jobs in one call, a long-lane job, a payload past the NOTIFY limit:
        # the plain hint, and the lane reads
        async with engine.transaction() as tx:
            await engine.enqueue_many([NewJob("kafka:m", key="b"), NewJob("kafka:m")], tx=tx)
        assert (await next_wake(feed)).jobs == ()
        async with engine.transaction() as tx:
            await engine.enqueue("report", None, tx=tx)
        assert (await next_wake(feed)).jobs == ()
        async with engine.transaction() as tx:
            big = await engine.enqueue("kafka:m", "x" * 9000, tx=tx, key="c")
        wake = await next_wake(feed)
        big_row = await pg.admin.get_job(big.job_id or "")
        assert big_row is not None and wake.jobs == ()
        assert wake.partitions == frozenset({big_row.partition})
    finally:
        await feed.aclose()


def test_an_unreadable_event_in_a_hint_is_a_plain_wake_up(clock: FakeClock) -> None:
    change = opened(clock)
    row = change.row
    assert isinstance(row, Job)
    payload = hint_payload(change, dumps(dict(change.events[0].data)))
    assert parse_wake(payload).jobs == (row,)
    for broken in (
        payload.replace('"lane":"fast"', '"lane":"lost"'),
        payload.replace('"hash":', '"hush":'),
        payload.replace('"at":"', '"at":"x'),
    ):
        assert broken != payload
        wake = parse_wake(broken)
        assert wake.jobs == () and wake.partitions == frozenset({row.partition})


async def test_mark_first_marks_a_lone_row_with_its_event_in_the_chain(
    pg: PostgresStore, clock: FakeClock
) -> None:
    job = await written(pg, clock)
    await lease(pg, clock, job.partition)
    change = mark(job, clock)
    assert await pg.writes.mark_first(change, LeaseGuard(POD, clock.now()))
    row = await pg.admin.get_job(job.id)
    assert row is not None and row.inflight_token is not None and row == change.row
    events = await pg.log.read_stream(job.stream)
    assert [e.type for e in events] == ["JobEnqueued", "JobDispatched"]
    assert chain_problems([event_row(e) for e in events], {}) == []
    # the same change again: the compare-and-set refuses it, nothing is written
    assert not await pg.writes.mark_first(change, LeaseGuard(POD, clock.now()))
    assert len(await pg.log.read_stream(job.stream)) == 2


async def test_mark_first_refuses_a_row_behind_an_earlier_version_of_its_chain(
    pg: PostgresStore, clock: FakeClock
) -> None:
    first = await written(pg, clock, version=1)
    second = await written(pg, clock, version=2)
    other_target = await written(pg, clock, version=0, target="kafka:other")
    assert first.partition == second.partition == other_target.partition
    await lease(pg, clock, first.partition)
    guard = LeaseGuard(POD, clock.now())
    assert not await pg.writes.mark_first(mark(second, clock), guard)
    unchanged = await pg.admin.get_job(second.id)
    assert unchanged == second
    # another target's chain with the same key is not held by it
    assert await pg.writes.mark_first(mark(other_target, clock), guard)
    first_mark = mark(first, clock)
    assert await pg.writes.mark_first(first_mark, guard)
    # in flight, the earlier version still holds the chain; once it left, it does not
    assert not await pg.writes.mark_first(mark(second, clock), guard)
    marked = first_mark.row
    assert isinstance(marked, Job)
    policy = OutcomePolicy(DeliveryMode.AT_MOST_ONCE, 5, (1.0,))
    done = decide_outcome(marked, RunResult(Result.OK), policy, Stamp(clock.now(), SYSTEM))
    assert await pg.writes.apply([done.change]) == [True]
    assert await pg.writes.mark_first(mark(second, clock), guard)


async def test_mark_first_refuses_without_the_lease(pg: PostgresStore, clock: FakeClock) -> None:
    job = await written(pg, clock)
    await lease(pg, clock, job.partition, pod="pod-b")
    assert not await pg.writes.mark_first(mark(job, clock), LeaseGuard(POD, clock.now()))
    assert await pg.admin.get_job(job.id) == job
    await pg.coordination.release_partitions("pod-b", [job.partition])
    await lease(pg, clock, job.partition, pod=POD)
    later = clock.now() + timedelta(minutes=10)  # past the lease
    assert not await pg.writes.mark_first(mark(job, clock), LeaseGuard(POD, later))
    assert await pg.admin.get_job(job.id) == job


async def test_an_idle_pod_sends_a_handed_over_row_before_reading_its_partition(
    pg: PostgresStore, clock: FakeClock
) -> None:
    engine = Engine(pg, clock=clock, settings=Settings(partitions=pg.partitions))
    pages_at_call: list[int] = []
    rec = Recorder()
    runtime = Runtime(engine, pod_id=POD)

    async def handler(job: Job) -> None:
        pages_at_call.append(len(runtime.fast.stats.pages))
        await rec(job)

    engine.targets.register("kafka:m", "fast", handler)
    await runtime.start()
    try:
        await until(lambda: len(runtime.fast.workers) == 64)
        await until(lambda: all(w.idle for w in runtime.fast.workers.values()))
        pages = len(runtime.fast.stats.pages)
        async with engine.transaction() as tx:
            done = await engine.enqueue("kafka:m", {"n": 1}, tx=tx, key="a")
        await until(lambda: len(rec.calls) == 1)
        assert pages_at_call == [pages]  # marked and sent without a read
        assert rec.calls[0].id == done.job_id and rec.payloads == [{"n": 1}]
        events = await pg.log.read_stream(f"job:{done.job_id}")
        await until(lambda: _closed(pg, done.job_id or ""))
        assert [e.type for e in events[:2]] == ["JobEnqueued", "JobDispatched"]
    finally:
        await runtime.stop()


async def _closed(pg: PostgresStore, job_id: str) -> bool:
    return await pg.admin.get_job(job_id) is None


async def test_the_wake_connection_is_reused_replaced_when_terminated_and_shared_with_the_pool(
    pg: PostgresStore, clock: FakeClock
) -> None:
    jobs = [await written(pg, clock, key=f"k{i}") for i in range(5)]
    for partition in {job.partition for job in jobs}:
        await lease(pg, clock, partition)
    guard = LeaseGuard(POD, clock.now())
    assert await pg.writes.mark_first(mark(jobs[0], clock), guard)
    assert await pg.writes.mark_first(mark(jobs[1], clock), guard)
    wake = pg.connections.wake
    assert wake.connects == 1
    pid = wake.backend_pid
    async with await psycopg.AsyncConnection.connect(pg.dsn, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        for _ in range(200):
            cur = await admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,))
            if await cur.fetchone() is None:
                break
            await asyncio.sleep(0.01)
    # the dead connection is found before the statement is sent: replaced, no error
    assert await pg.writes.mark_first(mark(jobs[2], clock), guard)
    assert wake.connects == 2 and wake.backend_pid not in (None, pid)
    # two marks at once: one on the wake connection, the other on a pooled one
    both = await asyncio.gather(
        pg.writes.mark_first(mark(jobs[3], clock), guard),
        pg.writes.mark_first(mark(jobs[4], clock), guard),
    )
    assert list(both) == [True, True] and wake.connects == 2


async def test_a_stale_handed_over_row_is_not_sent_again_and_the_lease_is_kept(
    pg: PostgresStore, clock: FakeClock
) -> None:
    """A row handed over after it was sent (a late or replayed hint): the first mark's
    compare-and-set refuses it, the worker reads its partition instead, sends nothing,
    and does not take the refusal for a lost lease."""
    engine = Engine(pg, clock=clock, settings=Settings(partitions=pg.partitions))
    rec = Recorder()
    engine.targets.register("kafka:m", "fast", rec)
    runtime = Runtime(engine, pod_id=POD)
    await runtime.start()
    try:
        await until(lambda: len(runtime.fast.workers) == 64)
        async with engine.transaction() as tx:
            done = await engine.enqueue("kafka:m", {"n": 1}, tx=tx, key="a")
        await until(lambda: _closed(pg, done.job_id or ""))
        sent = rec.calls[0]
        worker = runtime.fast.workers[sent.partition]
        await until(lambda: worker.idle)
        stale = dataclasses.replace(sent, inflight_token=None, claimed_by=None, stream_version=1)
        pages = len(runtime.fast.stats.pages)
        runtime.fast.wake([sent.partition], [stale])
        await until(lambda: len(runtime.fast.stats.pages) > pages and worker.idle)
        assert len(rec.calls) == 1
        assert not worker.lost and runtime.fast.workers.get(sent.partition) is worker
        assert runtime.fast.stats.marks_refused == 0
    finally:
        await runtime.stop()
