"""The event log's archive on every adapter: finished jobs' events older than the
retention go to JSON Lines first, then leave the log; open jobs and recent ones stay,
and what remains still replays and verifies."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from jobledger.core.clock import FakeClock
from jobledger.domain import job_outcomes, jobs
from jobledger.domain.chain import verify_chain
from jobledger.domain.events import SYSTEM, Event
from jobledger.domain.job_outcomes import OutcomePolicy, Result, RunResult
from jobledger.domain.jobs import DeliveryMode, Stamp
from jobledger.engine import Engine
from jobledger.projections.archive import LogArchive
from jobledger.projections.log import pages
from jobledger.projections.replay import replay
from jobledger.storage.port import Store

POLICY = OutcomePolicy(DeliveryMode.AT_LEAST_ONCE, 6, (1, 2, 4, 8, 16))


async def _noop(job: jobs.Job) -> None:
    return None


async def _enqueue(engine: Engine, key: str) -> str:
    async with engine.transaction() as tx:
        result = await engine.enqueue("t", {"k": key}, key=key, dedupe_key=f"d-{key}", tx=tx)
    assert result.job_id is not None
    return result.job_id


async def _finish(store: Store, clock: FakeClock, job_id: str, result: Result) -> None:
    job = await store.admin.get_job(job_id)
    assert job is not None
    outcome = job_outcomes.decide_outcome(
        job, RunResult(result, "boom"), POLICY, Stamp(clock.now(), SYSTEM)
    )
    assert await store.writes.apply([outcome.change]) == [True]


async def _all_events(store: Store) -> list[Event]:
    return [e async for page in pages(store) for e in page]


async def test_archive_moves_only_old_finished_streams(
    store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    engine = Engine(store, clock=clock)
    engine.targets.register("t", "fast", _noop)
    old_done = await _enqueue(engine, "old-done")
    old_dead = await _enqueue(engine, "old-dead")
    old_open = await _enqueue(engine, "old-open")
    await _finish(store, clock, old_done, Result.OK)
    await _finish(store, clock, old_dead, Result.DEAD_NOW)
    clock.advance(days=8)
    recent_done = await _enqueue(engine, "recent-done")
    await _finish(store, clock, recent_done, Result.OK)
    before = await _all_events(store)
    kept_positions = {e.position for e in before if e.stream != f"job:{old_done}"}

    archive = LogArchive(store, tmp_path / "archive", retention_days=5, clock=clock)
    result = await archive.run_once()

    assert (result.streams, result.events) == (1, 2)
    assert result.file is not None
    lines = [json.loads(line) for line in result.file.read_text().splitlines()]
    assert [(line["stream"], line["type"]) for line in lines] == [
        (f"job:{old_done}", "JobEnqueued"),
        (f"job:{old_done}", "JobSucceeded"),
    ]
    assert await store.log.read_stream(f"job:{old_done}") == []
    after = await _all_events(store)
    assert {e.position for e in after} == kept_positions
    assert verify_chain(after) == []
    report = await replay(store)
    assert report.ok, report.lines()
    # DEAD and PENDING rows and the recent stream are untouched
    assert (await store.admin.get_job(old_dead)) is not None
    assert (await store.admin.get_job(old_open)) is not None
    assert len(await store.log.read_stream(f"job:{recent_done}")) == 2
    # the dedupe window is the log's retention: the archived key is free again
    async with engine.transaction() as tx:
        again = await engine.enqueue("t", {}, key="old-done", dedupe_key="d-old-done", tx=tx)
        dup = await engine.enqueue("t", {}, key="recent-done", dedupe_key="d-recent-done", tx=tx)
    assert again.inserted and not dup.inserted
    assert (await archive.run_once()).streams == 0


async def test_no_retention_means_nothing_is_archived(
    store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    engine = Engine(store, clock=clock)
    engine.targets.register("t", "fast", _noop)
    done = await _enqueue(engine, "k")
    await _finish(store, clock, done, Result.OK)
    clock.advance(days=3650)
    archive_dir = tmp_path / "archive"
    result = await LogArchive(store, archive_dir, retention_days=None, clock=clock).run_once()
    assert result.streams == 0 and len(await store.log.read_stream(f"job:{done}")) == 2
    assert not archive_dir.exists()
    assert await store.retention.closed_streams(clock.now() - timedelta(days=1), limit=10) == [
        f"job:{done}"
    ]
