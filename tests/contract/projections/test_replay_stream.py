"""The streamed replay over every adapter: the log read stream by stream, each job
stream merged with its live row by id, reports what the whole in-memory rebuild does."""

from __future__ import annotations

from dataclasses import replace

from jobledger.core.clock import FakeClock
from jobledger.projections.replay import compare_rows, rebuild
from jobledger.projections.replay_stream import FIRST, replay_streams, stream_pages
from jobledger.storage.port import Store
from tests.contract.projections.test_replay_workload import generate, tamper_job_rows
from tests.stores import all_jobs


async def test_the_log_by_stream_is_every_event_in_stream_and_version_order(
    store: Store, clock: FakeClock
) -> None:
    await generate(store, clock, jobs_count=24)
    in_order = [e async for page in stream_pages(store, page=1000) for e in page]
    assert len(in_order) == 24 // 8 * 32
    places = [(e.stream, e.version) for e in in_order]
    assert places == sorted(places) and len(set(places)) == len(places)
    for page in (1, 7):
        paged = [e async for events in stream_pages(store, page=page) for e in events]
        assert paged == in_order
    read = await store.log.read_log_by_stream(FIRST, limit=5)
    if read is not None:  # an adapter with the indexed read: pages start after `after`
        assert read == in_order[:5]
        after = (read[-1].stream, read[-1].version)
        assert await store.log.read_log_by_stream(after, limit=3) == in_order[5:8]


async def test_streamed_differences_are_the_whole_comparisons_for_any_page(
    store: Store, clock: FakeClock
) -> None:
    damage = await tamper_job_rows(store, clock, "08f")

    rebuilt = await rebuild(store)
    whole = compare_rows("jobs", {j.id: j for j in await all_jobs(store)}, rebuilt.jobs.rows)
    assert len(whole) == 2 * 2 + len(damage.dropped) + len(damage.ghosts)
    for page in (1, 3, 1000):
        streamed = await replay_streams(store, page=page)
        assert streamed.differences == whole
        assert streamed.problems == []
        assert streamed.events == rebuilt.events and streamed.position == rebuilt.position
        assert streamed.jobs_rebuilt == len(rebuilt.jobs.rows)


async def test_live_rows_no_stream_explains_are_extra_and_the_dropped_missing(
    store: Store, clock: FakeClock
) -> None:
    await generate(store, clock, jobs_count=8)
    rows = await all_jobs(store)
    fresh = [replace(rows[0], id=c * 32, dedupe_key=f"fresh{c}") for c in "0f"]
    await store.projections.replace_read_models(fresh, await store.admin.list_schedules())
    streamed = await replay_streams(store, page=2)
    assert [(d.kind, d.key) for d in streamed.differences if d.kind == "extra"] == [
        ("extra", "0" * 32),
        ("extra", "f" * 32),
    ]
    assert {d.kind for d in streamed.differences} == {"extra", "missing"}
