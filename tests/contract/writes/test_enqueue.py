"""Enqueue inside the caller's transaction: every condition the engine promises.

Modelled on the recorder contract tests of `eventsourcing` and river's shared driver
tests: one suite, run on every adapter through the `store` fixture.
"""

from __future__ import annotations

import logging

import pytest

from jobledger.core.clock import FakeClock
from jobledger.core.context import request_context
from jobledger.domain.errors import UnknownTarget
from jobledger.domain.events import Actor
from jobledger.domain.jobs import JobStatus, Lane, NewJob
from jobledger.domain.policies import partition_of
from jobledger.engine import Engine
from jobledger.storage.port import Store
from tests.contract.conftest import Kit
from tests.contract.helpers import FAST, LONG, enqueue, succeed
from tests.stores import all_jobs


class Boom(Exception):
    pass


async def test_committed_enqueue_writes_one_pending_row_and_one_event(
    store: Store, engine: Engine, kit: Kit, clock: FakeClock
) -> None:
    async with engine.transaction() as tx:
        await kit.business_write(tx, "order-1")
        result = await engine.enqueue(FAST, {"order": 1}, key="K1", dedupe_key="d-1", tx=tx)
    assert result.inserted and result.job_id is not None
    job = await store.admin.get_job(result.job_id)
    assert job is not None
    assert (job.status, job.lane, job.attempts, job.key) == (JobStatus.PENDING, Lane.FAST, 0, "K1")
    assert (job.payload, job.dedupe_key, job.code, job.target) == ({"order": 1}, "d-1", FAST, FAST)
    assert job.next_run_at == clock.now() and job.created_at == clock.now()
    log = await store.log.read_log(0, limit=10)
    assert [(e.stream, e.version, e.type) for e in log] == [(job.stream, 1, "JobEnqueued")]
    assert await kit.business_count(store) == 1


async def test_aborted_transaction_leaves_no_job_no_event_no_business_row(
    store: Store, engine: Engine, kit: Kit
) -> None:
    with pytest.raises(Boom):
        async with engine.transaction() as tx:
            await kit.business_write(tx, "order-1")
            result = await engine.enqueue(FAST, {"order": 1}, dedupe_key="d-1", tx=tx)
            assert result.inserted
            raise Boom
    assert await all_jobs(store) == []
    assert await store.log.read_log(0, limit=10) == []
    assert await kit.business_count(store) == 0
    # the key of a rolled-back enqueue is free again
    again = await enqueue(engine, FAST, dedupe_key="d-1")
    assert again.dedupe_key == "d-1"


async def test_same_dedupe_key_in_the_same_transaction_inserts_nothing_and_keeps_the_business_write(
    store: Store, engine: Engine, kit: Kit
) -> None:
    async with engine.transaction() as tx:
        first = await engine.enqueue(FAST, {"v": 1}, dedupe_key="d-1", tx=tx)
        second = await engine.enqueue(FAST, {"v": 2}, dedupe_key="d-1", tx=tx)
        await kit.business_write(tx, "after the duplicate")
    assert first.inserted and not second.inserted and second.job_id == first.job_id
    rows = await all_jobs(store)
    assert [j.payload for j in rows] == [{"v": 1}]
    assert len(await store.log.read_log(0, limit=10)) == 1
    assert await kit.business_count(store) == 1


async def test_same_dedupe_key_in_a_later_transaction_inserts_nothing_and_commits_the_caller(
    store: Store, engine: Engine, kit: Kit
) -> None:
    await enqueue(engine, FAST, {"v": 1}, dedupe_key="d-1")
    async with engine.transaction() as tx:
        again = await engine.enqueue(FAST, {"v": 2}, dedupe_key="d-1", tx=tx)
        await kit.business_write(tx, "second order")
        fresh = await engine.enqueue(FAST, {"v": 3}, dedupe_key="d-2", tx=tx)
    assert not again.inserted and fresh.inserted
    assert sorted(j.dedupe_key for j in await all_jobs(store)) == ["d-1", "d-2"]
    assert len(await store.log.read_log(0, limit=10)) == 2
    assert await kit.business_count(store) == 1


async def test_dedupe_outlives_the_row_the_log_is_the_window(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    job = await enqueue(engine, FAST, dedupe_key="d-1")
    assert await store.writes.apply([succeed(job, clock)]) == [True]
    assert await store.admin.get_job(job.id) is None
    async with engine.transaction() as tx:
        again = await engine.enqueue(FAST, dedupe_key="d-1", tx=tx)
    assert not again.inserted
    assert await all_jobs(store) == []
    fresh = await enqueue(engine, FAST, dedupe_key="d-9")  # an unseen key still enqueues
    assert [j.id for j in await all_jobs(store)] == [fresh.id]


async def test_two_items_sharing_a_dedupe_key_in_one_call_keep_the_first(
    store: Store, engine: Engine
) -> None:
    async with engine.transaction() as tx:
        results = await engine.enqueue_many(
            [
                NewJob(FAST, {"v": 1}, dedupe_key="d-1"),
                NewJob(FAST, {"v": 2}, dedupe_key="d-1"),
                NewJob(FAST, {"v": 3}, dedupe_key="d-2"),
            ],
            tx=tx,
        )
    assert [r.inserted for r in results] == [True, False, True]
    by_key = {j.dedupe_key: j.payload for j in await all_jobs(store)}
    assert by_key == {"d-1": {"v": 1}, "d-2": {"v": 3}}


async def test_append_in_filters_a_repeated_key_within_one_call(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    """The port itself keeps the first of two changes with one key (not only the engine)."""
    from tests.contract.helpers import new_job

    first = new_job(clock, dedupe_key="d-1")
    second = new_job(clock, dedupe_key="d-1")
    async with store.writes.transaction() as tx:
        flags = await store.writes.append_in(tx, [first, second])
    assert flags == [True, False]
    assert [j.stream for j in await all_jobs(store)] == [first.stream]


async def test_unknown_target_raises_before_any_write(
    store: Store, engine: Engine, kit: Kit
) -> None:
    async with engine.transaction() as tx:
        with pytest.raises(UnknownTarget):
            await engine.enqueue_many([NewJob(FAST, {"v": 1}), NewJob("nowhere:x", {})], tx=tx)
        await kit.business_write(tx, "still mine")
    assert await all_jobs(store) == []
    assert await store.log.read_log(0, limit=10) == []
    assert await kit.business_count(store) == 1


async def test_partition_comes_from_the_key_or_else_the_dedupe_key(
    store: Store, engine: Engine
) -> None:
    keyed = await enqueue(engine, FAST, key="DO-123", dedupe_key="d-1")
    keyless = await enqueue(engine, FAST, dedupe_key="d-2")
    assert keyed.partition == partition_of("DO-123", "d-1", store.partitions)
    assert keyless.partition == partition_of(None, "d-2", store.partitions)
    assert keyless.key is None


async def test_after_commit_hooks_run_only_after_the_commit(store: Store, engine: Engine) -> None:
    calls: list[str] = []
    async with engine.transaction() as tx:
        await engine.enqueue(LONG, tx=tx)
        tx.after_commit(lambda: calls.append("first"))
        tx.after_commit(lambda: calls.append("second"))
        assert calls == []
    assert calls == ["first", "second"]

    with pytest.raises(Boom):
        async with engine.transaction() as tx:
            tx.after_commit(lambda: calls.append("rolled back"))
            raise Boom
    assert calls == ["first", "second"]


async def test_a_failing_after_commit_hook_is_logged_not_raised(
    store: Store, engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[str] = []

    def broken() -> None:
        raise RuntimeError("hook broke")

    with caplog.at_level(logging.ERROR, logger="jobledger.storage"):
        async with engine.transaction() as tx:
            result = await engine.enqueue(FAST, tx=tx)
            tx.after_commit(broken)
            tx.after_commit(lambda: calls.append("ran"))
    assert calls == ["ran"]
    assert "after-commit hook failed" in caplog.text
    assert result.job_id is not None and await store.admin.get_job(result.job_id) is not None


async def test_trace_id_and_actor_come_from_the_request_context(
    store: Store, engine: Engine
) -> None:
    actor = Actor(id="u-7", via="http", role="admin")
    with request_context(trace_id="trace-abc", actor=actor):
        job = await enqueue(engine, FAST, dedupe_key="d-1")
    assert (job.trace_id, job.actor) == ("trace-abc", actor)
    (event,) = await store.log.read_stream(job.stream)
    assert (event.trace_id, event.actor) == ("trace-abc", actor)


async def test_enqueue_accepts_the_native_handle_of_the_transaction(
    store: Store, engine: Engine, kit: Kit
) -> None:
    async with engine.transaction() as tx:
        await kit.business_write(tx.native, "via native")
        result = await engine.enqueue(FAST, tx=tx.native, dedupe_key="d-1")
    assert result.inserted
    assert [j.dedupe_key for j in await all_jobs(store)] == ["d-1"]
    assert await kit.business_count(store) == 1
