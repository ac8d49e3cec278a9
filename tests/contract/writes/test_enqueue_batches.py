"""Batch enqueues: what a batch writes is what the domain computed, field for field,
and a seen dedupe key inside a batch drops that item alone without aborting anything.
"""

from __future__ import annotations

from datetime import timedelta

from jobledger.core.clock import FakeClock
from jobledger.core.context import request_context
from jobledger.domain.chain import verify_chain
from jobledger.domain.events import Actor
from jobledger.domain.jobs import NewJob
from jobledger.engine import Engine
from jobledger.storage.port import Store
from tests.contract.conftest import Kit
from tests.contract.helpers import FAST, LONG, enqueue
from tests.stores import all_jobs


async def test_a_seen_dedupe_key_in_a_batch_drops_that_item_alone_and_keeps_the_transaction(
    store: Store, engine: Engine, kit: Kit
) -> None:
    seen = await enqueue(engine, FAST, {"v": 0}, dedupe_key="seen")
    async with engine.transaction() as tx:
        results = await engine.enqueue_many(
            [
                NewJob(FAST, {"v": 1}, dedupe_key="fresh-1"),
                NewJob(FAST, {"v": 2}, dedupe_key="seen"),
                NewJob(LONG, {"v": 3}, key="K", dedupe_key="fresh-2"),
            ],
            tx=tx,
        )
        await kit.business_write(tx, "after the batch")  # the transaction is not aborted
    assert [r.inserted for r in results] == [True, False, True]
    assert results[1].job_id == seen.id  # the job that holds the key
    by_key = {j.dedupe_key: j.payload for j in await all_jobs(store)}
    assert by_key == {"seen": {"v": 0}, "fresh-1": {"v": 1}, "fresh-2": {"v": 3}}
    assert await kit.business_count(store) == 1


async def test_a_batch_stores_every_field_the_domain_computed(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    later = clock.now() + timedelta(minutes=5)
    items = [
        NewJob(
            FAST,
            {"big": 1e20, "neg": -0.0, "s": "ü", "n": None},
            code="c-1",
            key="ä",
            version=7,
            dedupe_key="d-1",
            headers={"h": "v"},
            run_at=later,
        ),
        NewJob(LONG, None, dedupe_key="d-2"),
        NewJob(FAST, [1, "two", {"three": 3.5}]),
    ]
    with request_context(trace_id="trace-b", actor=Actor(id="u-1", via="api", role=None)):
        async with engine.transaction() as tx:
            results = await engine.enqueue_many(items, tx=tx)
    log = await store.log.read_log(0, limit=10)
    assert verify_chain(log) == []  # the events' text is the text the hashes covered
    for result, event in zip(results, log, strict=True):
        assert result.job_id is not None
        job = await store.admin.get_job(result.job_id)
        (stored,) = await store.log.read_stream(f"job:{result.job_id}")
        assert stored == event
        assert job is not None and job.last_hash == event.hash
        assert (job.trace_id, job.actor) == ("trace-b", Actor(id="u-1", via="api"))
    first = await store.admin.get_job(results[0].job_id or "")
    assert first is not None
    assert (first.code, first.key, first.version, first.headers) == ("c-1", "ä", 7, {"h": "v"})
    assert first.next_run_at == later and first.created_at == clock.now()
    assert first.payload["s"] == "ü" and first.payload["n"] is None
    second = await store.admin.get_job(results[1].job_id or "")
    assert second is not None and second.payload is None and second.headers is None
