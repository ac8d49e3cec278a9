"""Admin reads (list_jobs, schedules) and swapping the read models (replay --apply)."""

from __future__ import annotations

from datetime import timedelta

from jobledger.core.clock import FakeClock
from jobledger.domain.jobs import JobStatus
from jobledger.engine import Engine
from jobledger.storage.port import JobFilter, Store
from tests.contract.helpers import (
    FAST,
    FAST_OTHER,
    LONG,
    declared_schedule,
    disable_schedule,
    enqueue,
    kill,
)
from tests.stores import all_jobs


async def test_get_job_of_an_unknown_id_is_none(store: Store) -> None:
    assert await store.admin.get_job("0" * 32) is None


async def test_list_jobs_filters_pages_newest_first_with_total(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    made = []
    for i in range(7):
        clock.advance(seconds=1)
        target = FAST if i % 2 == 0 else FAST_OTHER
        made.append(
            await enqueue(engine, target, code=f"code-{i % 3}", key=f"k{i % 2}", dedupe_key=f"d{i}")
        )
    assert await store.writes.apply([kill(made[0], clock), kill(made[3], clock)]) == [True, True]
    newest_first = [j.id for j in reversed(made)]

    page, total = await store.admin.list_jobs(JobFilter(), offset=0, limit=3)
    assert ([j.id for j in page], total) == (newest_first[:3], 7)
    page, total = await store.admin.list_jobs(JobFilter(), offset=6, limit=3)
    assert ([j.id for j in page], total) == (newest_first[6:], 7)
    page, total = await store.admin.list_jobs(JobFilter(), offset=10, limit=3)
    assert (page, total) == ([], 7)

    def ids(rows: list[int]) -> list[str]:
        return [made[i].id for i in rows]

    cases = {
        JobFilter(status=JobStatus.DEAD): ids([3, 0]),
        JobFilter(status=JobStatus.PENDING): ids([6, 5, 4, 2, 1]),
        JobFilter(target=FAST_OTHER): ids([5, 3, 1]),
        JobFilter(code="code-0"): ids([6, 3, 0]),
        JobFilter(key="k0"): ids([6, 4, 2, 0]),
        JobFilter(status=JobStatus.PENDING, target=FAST, key="k0"): ids([6, 4, 2]),
        JobFilter(target="nobody"): [],
    }
    for flt, expected in cases.items():
        page, total = await store.admin.list_jobs(flt, offset=0, limit=100)
        assert ([j.id for j in page], total) == (expected, len(expected)), flt
    page, total = await store.admin.list_jobs(JobFilter(key="k0"), offset=1, limit=2)
    assert ([j.id for j in page], total) == (ids([4, 2]), 4)


async def test_all_jobs_is_every_open_row_by_id(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    made = []
    for i in range(4):
        clock.advance(seconds=1)
        made.append(await enqueue(engine, LONG if i % 2 else FAST, dedupe_key=f"d{i}"))
    assert await all_jobs(store) == sorted(made, key=lambda j: j.id)


async def test_schedules_are_read_by_code_and_listed_sorted(store: Store, clock: FakeClock) -> None:
    assert await store.admin.get_schedule("nightly") is None
    assert await store.admin.list_schedules() == []
    changes = [declared_schedule(code, clock.now()) for code in ("nightly", "hourly", "b-weekly")]
    assert await store.writes.apply(changes) == [True, True, True]
    nightly = await store.admin.get_schedule("nightly")
    assert nightly == changes[0].row
    assert [s.code for s in await store.admin.list_schedules()] == ["b-weekly", "hourly", "nightly"]

    assert nightly is not None
    clock.advance(minutes=1)
    off = disable_schedule(nightly, clock.now())
    assert await store.writes.apply([off, disable_schedule(nightly, clock.now())]) == [True, False]
    row = await store.admin.get_schedule("nightly")
    assert row == off.row and row is not None and not row.enabled
    # declaring a code twice loses the compare-and-set
    assert await store.writes.apply([declared_schedule("nightly", clock.now())]) == [False]


async def test_replace_read_models_swaps_both_tables(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    a = await enqueue(engine, FAST, dedupe_key="a")
    clock.advance(seconds=1)
    b = await enqueue(engine, LONG, dedupe_key="b")
    schedule = declared_schedule("nightly", clock.now())
    other = declared_schedule("hourly", clock.now())
    assert await store.writes.apply([schedule, other]) == [True, True]
    log_before = await store.log.read_log(0, limit=100)

    await store.projections.replace_read_models([b], [schedule.row])
    assert await all_jobs(store) == [b]
    assert await store.admin.get_job(a.id) is None
    assert await store.admin.list_schedules() == [schedule.row]
    assert await store.log.read_log(0, limit=100) == log_before  # the log is never touched

    await store.projections.replace_read_models([a, b], [])
    assert await all_jobs(store) == sorted([a, b], key=lambda j: j.id)
    assert await store.admin.list_schedules() == []


async def test_times_round_trip_to_the_millisecond(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    clock.advance(timedelta(microseconds=123_456))
    job = await enqueue(engine, FAST, dedupe_key="t")
    assert job.created_at == clock.now() and job.created_at.microsecond == 123_000
    assert job.created_at.utcoffset() == timedelta(0)
