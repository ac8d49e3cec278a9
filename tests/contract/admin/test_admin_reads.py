"""The admin's bounded reads on every adapter: keyset pages, capped counts, and events
looked up by (stream, version) for projections that keep no per-job map."""

from __future__ import annotations

from jobledger.core.clock import FakeClock
from jobledger.domain.events import EventType
from jobledger.domain.jobs import JobStatus, job_stream
from jobledger.engine import Engine
from jobledger.storage.port import JobFilter, Store
from tests.contract.helpers import FAST, FAST_OTHER, enqueue, kill


async def test_keyset_pages_and_capped_counts(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    made = []
    for i in range(7):
        clock.advance(seconds=1)
        target = FAST if i % 2 == 0 else FAST_OTHER
        made.append(await enqueue(engine, target, key=f"k{i}", dedupe_key=f"d{i}"))
    assert await store.writes.apply([kill(made[2], clock)]) == [True]
    ids = [j.id for j in made]

    page, total = await store.admin.list_jobs(JobFilter(), offset=0, limit=3, before=ids[5])
    assert ([j.id for j in page], total) == ([ids[4], ids[3], ids[2]], 7)
    page, _ = await store.admin.list_jobs(JobFilter(), offset=0, limit=3, after=ids[1])
    assert [j.id for j in page] == [ids[2], ids[3], ids[4]]  # oldest first
    page, _ = await store.admin.list_jobs(
        JobFilter(status=JobStatus.PENDING), offset=0, limit=1, after=""
    )
    assert [j.id for j in page] == [ids[0]]
    page, total = await store.admin.list_jobs(
        JobFilter(target=FAST), offset=0, limit=10, before=ids[6], count_limit=2
    )
    assert ([j.id for j in page], total) == ([ids[4], ids[2], ids[0]], 2)
    page, total = await store.admin.list_jobs(JobFilter(), offset=0, limit=2, count_limit=0)
    assert ([j.id for j in page], total) == ([ids[6], ids[5]], 0)
    _, total = await store.admin.list_jobs(JobFilter(), offset=0, limit=1, count_limit=100)
    assert total == 7
    page, total = await store.admin.list_jobs(JobFilter(), offset=0, limit=5, before=ids[0])
    assert (page, total) == ([], 7)


async def test_read_events_at_finds_the_places_that_exist(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    first = await enqueue(engine, FAST, key="a", dedupe_key="da")
    second = await enqueue(engine, FAST_OTHER, key="b", dedupe_key="db")
    assert await store.writes.apply([kill(first, clock)]) == [True]
    places = [
        (job_stream(first.id), 1),
        (job_stream(first.id), 2),
        (job_stream(second.id), 1),
        (job_stream(second.id), 2),  # not there
        ("job:" + "0" * 32, 1),  # no such stream
        (job_stream(first.id), 1),  # asked twice
    ]
    found = sorted(
        ((e.stream, e.version, e.type) for e in await store.log.read_events_at(places)),
    )
    assert found == sorted(
        [
            (job_stream(first.id), 1, EventType.JOB_ENQUEUED),
            (job_stream(first.id), 2, EventType.JOB_DEAD),
            (job_stream(second.id), 1, EventType.JOB_ENQUEUED),
        ]
    )
    assert await store.log.read_events_at([]) == []
