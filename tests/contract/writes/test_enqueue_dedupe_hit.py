"""A dedupe hit names the job that holds the key: the caller can
follow it (`store.admin.get_job`, the admin API) instead of getting `job_id=None`.

On every adapter, for each place the key can be held: an earlier committed
transaction, earlier in the same transaction, earlier in the same call, and a job
that already left the queue (the log, not the queue, is the dedupe window).
"""

from __future__ import annotations

from jobledger.core.clock import FakeClock
from jobledger.domain.jobs import NewJob
from jobledger.engine import Engine
from jobledger.storage.port import Store
from tests.contract.helpers import FAST, LONG, enqueue, succeed
from tests.stores import all_jobs


async def test_a_hit_on_a_committed_job_returns_its_id(store: Store, engine: Engine) -> None:
    held = await enqueue(engine, FAST, {"v": 1}, dedupe_key="order-7")
    async with engine.transaction() as tx:
        again = await engine.enqueue(LONG, {"v": 2}, dedupe_key="order-7", tx=tx)
    assert (again.inserted, again.job_id) == (False, held.id)
    job = await store.admin.get_job(again.job_id)
    assert job is not None and job.payload == {"v": 1}  # the first job, untouched


async def test_a_hit_in_the_same_transaction_returns_the_earlier_enqueues_id(
    store: Store, engine: Engine
) -> None:
    async with engine.transaction() as tx:
        first = await engine.enqueue(FAST, {"v": 1}, dedupe_key="k", tx=tx)
        second = await engine.enqueue(FAST, {"v": 2}, dedupe_key="k", tx=tx)
    assert first.inserted and first.job_id is not None
    assert (second.inserted, second.job_id) == (False, first.job_id)
    assert [j.id for j in await all_jobs(store)] == [first.job_id]


async def test_a_repeat_inside_one_call_returns_the_first_items_id_or_its_holder(
    store: Store, engine: Engine
) -> None:
    held = await enqueue(engine, FAST, dedupe_key="old")
    async with engine.transaction() as tx:
        results = await engine.enqueue_many(
            [
                NewJob(FAST, {"n": 1}, dedupe_key="new"),
                NewJob(FAST, {"n": 2}, dedupe_key="new"),
                NewJob(FAST, {"n": 3}, dedupe_key="old"),
                NewJob(FAST, {"n": 4}, dedupe_key="old"),
            ],
            tx=tx,
        )
    assert [r.inserted for r in results] == [True, False, False, False]
    assert results[0].job_id is not None
    assert [r.job_id for r in results[1:]] == [results[0].job_id, held.id, held.id]


async def test_a_hit_on_a_job_that_left_the_queue_still_returns_its_id(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    held = await enqueue(engine, FAST, dedupe_key="done-once")
    assert await store.writes.apply([succeed(held, clock)]) == [True]
    assert await store.admin.get_job(held.id) is None
    async with engine.transaction() as tx:
        again = await engine.enqueue(FAST, dedupe_key="done-once", tx=tx)
    assert (again.inserted, again.job_id) == (False, held.id)
    assert await all_jobs(store) == []


async def test_dedupe_holder_reads_the_committed_holder(store: Store, engine: Engine) -> None:
    """The admins' lookup (`/api/v1/finished?dedupe_key=`, `/admin/find`): no caller tx."""
    held = await enqueue(engine, FAST, {"v": 1}, dedupe_key="order-9")
    assert await store.admin.dedupe_holder("order-9") == held.id
    assert await store.admin.dedupe_holder("nobody") is None
