"""Three worker processes tick one minutely schedule over 1,000 simulated slots.

Each process opens its own store (SQLite file, PostgreSQL database), declares the same
schedule and ticks with its own `FakeClock`. A barrier lines the three up before every
slot, so all of them try to enqueue the same slot at the same moment: the compare-and-
set on the schedule stream and the slot's dedupe key must leave exactly one job per
slot, and the schedule stream a clean chain of 1,000 ScheduleSlotEnqueued events.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from datetime import UTC, datetime, timedelta
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import pytest

from jobledger.config.settings import Settings
from jobledger.core.clock import FakeClock
from jobledger.domain.chain import verify_chain
from jobledger.domain.events import EventType
from jobledger.domain.schedules.tick import slot_dedupe_key
from jobledger.engine import Engine
from jobledger.reactors.scheduler import Scheduler, SlotRun
from jobledger.storage.port import JobFilter
from jobledger.storage.urls import open_store
from tests.integration.test_multiprocess_lanes import store_url

pytestmark = pytest.mark.slow

PROCESSES = 3
SLOTS = 1_000
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
CODE = "minutely"


async def _slot(run: SlotRun) -> None:  # never runs here: no lane is started
    raise AssertionError("slot handlers do not run in this test")


async def _tick_all(url: str, index: int, barrier: Barrier) -> int:
    store = open_store(url)
    await store.open()
    try:
        clock = FakeClock(START)
        scheduler = Scheduler(
            Engine(store, clock=clock, settings=Settings(partitions=store.partitions))
        )
        scheduler.declare(CODE, "* * * * *", _slot, missed_slot_policy="run_once")
        barrier.wait()
        await scheduler.sync()  # all three race on the first insert too
        won = 0
        for slot in range(1, SLOTS + 1):
            # a few seconds apart, always inside the grace: nobody reports a miss
            clock.set(START + timedelta(minutes=slot, seconds=index * 2))
            barrier.wait()
            won += len(await scheduler.tick())
        return won
    finally:
        await store.close()


def worker(url: str, index: int, barrier: Barrier, results: Any) -> None:
    try:
        results.put((index, asyncio.run(_tick_all(url, index, barrier))))
    except BaseException as exc:
        barrier.abort()
        results.put((index, f"{type(exc).__name__}: {exc}"))


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_three_processes_one_job_per_slot(kind: str, tmp_path: Path) -> None:
    async with store_url(kind, tmp_path) as url:
        store = open_store(url)
        await store.open()  # migrate once before the race
        await store.close()
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(PROCESSES, timeout=120)
        results = ctx.Queue()
        procs = [
            ctx.Process(target=worker, args=(url, i, barrier, results)) for i in range(PROCESSES)
        ]
        for proc in procs:
            proc.start()
        try:
            outcome = dict(
                await asyncio.to_thread(
                    lambda: [results.get(timeout=600) for _ in range(PROCESSES)]
                )
            )
        finally:
            for proc in procs:
                proc.join(timeout=30)
                if proc.is_alive():
                    proc.kill()
        assert all(isinstance(v, int) for v in outcome.values()), outcome
        assert sum(outcome.values()) == SLOTS

        store = open_store(url)
        await store.open()
        try:
            events = await store.log.read_stream(f"schedule:{CODE}")
            types = [e.type for e in events]
            assert types.count(EventType.SCHEDULE_DECLARED) == 1
            assert types.count(EventType.SCHEDULE_SLOT_ENQUEUED) == SLOTS == len(types) - 1
            assert verify_chain(events) == []
            jobs, total = await store.admin.list_jobs(
                JobFilter(code=CODE), offset=0, limit=SLOTS + 10
            )
            assert total == SLOTS
            expected = {
                slot_dedupe_key(CODE, START + timedelta(minutes=m)) for m in range(1, SLOTS + 1)
            }
            assert {j.dedupe_key for j in jobs} == expected
            named = {e.data["job_id"] for e in events if e.type == EventType.SCHEDULE_SLOT_ENQUEUED}
            assert named == {j.id for j in jobs}  # every advance names the job it wrote
        finally:
            await store.close()
