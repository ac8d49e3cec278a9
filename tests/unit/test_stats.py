"""The stats projection and its checkpointed runner."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from datetime import timedelta
from typing import Any

from jobledger.core.clock import FakeClock
from jobledger.domain.jobs import JobStatus
from jobledger.observability.observe import Observer
from jobledger.projections.runner import ProjectionRunner
from jobledger.projections.stats import (
    StatsProjection,
    hour_of,
    minute_of,
    read_stats,
    stats_reactor,
)
from jobledger.storage.memory import MemoryStore
from jobledger.storage.memory.writes import MemoryWrites
from jobledger.storage.port import Store
from tests.contract.projections.test_replay_workload import FAST, LONG, engine_for, generate
from tests.stores import all_jobs


def fresh(store: MemoryStore, projection: StatsProjection | None = None) -> Any:
    """The whole log folded in one page: no look-ups needed."""
    projection = projection or StatsProjection()
    return projection.apply_page(projection.initial(), list(store.tables.events), {})


async def store_counts(store: Store) -> dict[tuple[str, str, str], int]:
    return dict(Counter((j.target, j.code, j.status.value) for j in await all_jobs(store)))


def state_counts(state: Any) -> dict[tuple[str, str, str], int]:
    return {
        (target, code, status): n
        for target, codes in state["open"].items()
        for code, counts in codes.items()
        for status, n in counts.items()
    }


class Lag(Observer):
    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def projection_lag(self, name: str, events_behind: int) -> None:
        self.seen.append((name, events_behind))


async def test_incremental_catch_up_equals_a_fresh_replay(clock: FakeClock) -> None:
    store = MemoryStore()
    lag = Lag()
    runner = ProjectionRunner(store, StatsProjection(), clock=clock, observer=lag, page=7)

    async def step(_round: int) -> None:
        await runner.catch_up()

    await generate(store, clock, jobs_count=48, after_round=step)
    await generate(store, clock, jobs_count=24, first=48, after_round=step)
    position, state = await store.projections.load_checkpoint("stats")
    assert position == len(store.tables.events)
    assert state == fresh(store)
    # the open counters are the read model's, per target, code and status
    assert state_counts(state) == await store_counts(store)
    assert lag.seen[-1] == ("stats", 0)
    assert max(n for _, n in lag.seen) == 7


async def test_hourly_counts_per_target_and_code(clock: FakeClock) -> None:
    store = MemoryStore()
    start = clock.now()
    await generate(store, clock, jobs_count=24)
    stats = await read_stats(store, clock.now())
    # per 8 jobs (see the workload's scripts): fast 1+1 ok, 2 failed, 1 cancelled,
    # 1+1 dead, 1 skipped; long 1 ok, 1 failed, 1 dead
    assert stats["totals"] == {
        "succeeded": 9,
        "failed": 9,
        "dead": 9,
        "skipped": 3,
        "cancelled": 3,
        "expired": 0,
    }
    rows = stats["hours"]
    assert {r["hour"] for r in rows} == {hour_of(start)}
    by_target: dict[str, dict[str, int]] = {}
    for row in rows:
        totals = by_target.setdefault(row["target"], {})
        for key in ("succeeded", "failed", "dead", "skipped", "cancelled"):
            totals[key] = totals.get(key, 0) + row[key]
    assert by_target == {
        FAST: {"succeeded": 6, "failed": 6, "dead": 6, "skipped": 3, "cancelled": 3},
        LONG: {"succeeded": 3, "failed": 3, "dead": 3, "skipped": 0, "cancelled": 0},
    }
    assert {r["code"] for r in rows} == {"code0", "code1", "code2"}
    assert stats["position"] == len(store.tables.events)


async def test_queue_depth_and_oldest_pending_age(clock: FakeClock) -> None:
    store = MemoryStore()
    enqueued_at = clock.now()
    await generate(store, clock, jobs_count=16)
    clock.advance(minutes=30)
    queue = (await read_stats(store, clock.now()))["queue"]
    live = await all_jobs(store)
    for target in (FAST, LONG):
        mine = [j for j in live if j.target == target]
        assert queue[target]["pending"] == sum(j.status == JobStatus.PENDING for j in mine)
        assert queue[target]["running"] == sum(j.status == JobStatus.RUNNING for j in mine)
        assert queue[target]["dead"] == sum(j.status == JobStatus.DEAD for j in mine)
    assert queue[FAST]["pending"] == 2 and queue[FAST]["dead"] == 2
    assert queue[LONG] == {
        "pending": 0,
        "running": 2,
        "dead": 0,
        "codes": {
            "code0": {"pending": 0, "running": 1, "dead": 0},
            "code2": {"pending": 0, "running": 1, "dead": 0},
        },
        "oldest_pending_age_s": None,
    }
    assert queue[FAST]["oldest_pending_age_s"] == (clock.now() - enqueued_at).total_seconds()


async def test_old_hours_are_dropped_by_event_time_and_the_window_is_served(
    clock: FakeClock,
) -> None:
    store = MemoryStore()
    start = clock.now()
    projection = StatsProjection(keep_hours=4)
    runner = ProjectionRunner(store, projection, clock=clock, page=5)

    async def next_hour(_round: int) -> None:
        clock.advance(hours=1)
        await runner.catch_up()

    await generate(store, clock, jobs_count=16, after_round=next_hour)
    _, state = await store.projections.load_checkpoint("stats")
    assert state == fresh(store, projection)
    # round r writes in hour r; rounds 5 and 6 count nothing (retry, claim), and of
    # hours 0..4 and 7 only those within 4 hours of the newest (7) are kept
    assert sorted(state["hours"]) == [hour_of(start + timedelta(hours=r)) for r in (3, 4, 7)]
    newest = hour_of(start + timedelta(hours=7))

    stats = await read_stats(store, clock.now(), hours=2)
    assert {r["hour"] for r in stats["hours"]} == {newest}


async def test_the_runner_is_woken_by_the_feed(clock: FakeClock) -> None:
    store = MemoryStore()
    engine = engine_for(store, clock)
    lag = Lag()
    engine.observers.add(lag)
    runner = stats_reactor(engine, safety_poll_s=3600)
    await runner.start()
    try:
        await generate(store, clock, jobs_count=8)
        for _ in range(200):
            if (await store.projections.load_checkpoint("stats"))[0] == len(store.tables.events):
                break
            await asyncio.sleep(0)
        assert (await store.projections.load_checkpoint("stats"))[0] == len(store.tables.events)
        assert lag.seen and lag.seen[-1] == ("stats", 0)
    finally:
        await runner.stop()


class QuietWrites(MemoryWrites):
    """Writes whose commits publish no wake-up."""

    def publish(self, applied: Any) -> None:
        return None


class QuietStore(MemoryStore):
    """A store whose change feed loses every notification."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = QuietWrites(self.tables, self.writes.wakes)


async def test_the_safety_poll_covers_lost_notifications(clock: FakeClock) -> None:
    store = QuietStore()
    runner = ProjectionRunner(store, StatsProjection(), clock=clock, safety_poll_s=3600)
    await runner.start()
    try:
        for _ in range(20):
            await asyncio.sleep(0)
        passes = runner.passes
        await generate(store, clock, jobs_count=8)
        for _ in range(20):
            await asyncio.sleep(0)
        assert (await store.projections.load_checkpoint("stats"))[0] == 0  # nothing woke it
        clock.advance(seconds=4400)  # past the jittered poll (3600 s ± 20 %)
        for _ in range(200):
            if (await store.projections.load_checkpoint("stats"))[0] == len(store.tables.events):
                break
            await asyncio.sleep(0)
        assert (await store.projections.load_checkpoint("stats"))[0] == len(store.tables.events)
        assert runner.passes > passes
    finally:
        await runner.stop()


async def test_the_checkpoint_round_trips_on_every_adapter(store: Store, clock: FakeClock) -> None:
    runner = ProjectionRunner(store, StatsProjection(), clock=clock, page=11)

    async def step(_round: int) -> None:
        await runner.catch_up()

    await generate(store, clock, jobs_count=32, after_round=step)
    events = await store.log.read_log(0, limit=100_000)
    position, state = await store.projections.load_checkpoint("stats")
    projection = StatsProjection()
    assert position == events[-1].position
    assert state == projection.apply_page(projection.initial(), events, {})
    assert state_counts(state) == await store_counts(store)
    stats = await read_stats(store, clock.now())
    assert stats["totals"]["succeeded"] == 12 and stats["position"] == position


async def test_the_state_stays_bounded_by_targets_not_jobs(store: Store, clock: FakeClock) -> None:
    """Many open jobs (PENDING, RUNNING, DEAD) over two targets and three codes: the
    checkpoint holds counters, not a map per job, and does not grow with the jobs."""
    runner = ProjectionRunner(store, StatsProjection(), clock=clock, page=97)
    sizes = []
    for first, count in ((0, 400), (400, 2000)):
        await generate(store, clock, jobs_count=count, first=first)
        await runner.catch_up()
        _, state = await store.projections.load_checkpoint("stats")
        sizes.append((set(state_counts(state)), len(json.dumps(state["open"]))))
        # the whole checkpoint: counters and time buckets; 900 job ids alone are 28,800
        assert len(json.dumps(state)) < 4000
        text = json.dumps(state)
        assert not any(job.id in text for job in await all_jobs(store))
        assert state_counts(state) == await store_counts(store)
    assert len(await all_jobs(store)) == 900  # 3 of every 8 jobs stay open
    # 6x the open jobs: the same counters (targets, codes, statuses), a few more digits
    assert sizes[0][0] == sizes[1][0] and len(sizes[0][0]) == 9
    assert sizes[1][1] - sizes[0][1] < 20
    stats = await read_stats(store, clock.now())
    assert set(stats["queue"]) == {FAST, LONG}
    assert stats["by_status"]["DEAD"] == sum(
        j.status == JobStatus.DEAD for j in await all_jobs(store)
    )


async def test_a_checkpoint_of_the_old_layout_is_folded_again(clock: FakeClock) -> None:
    store = MemoryStore()
    await generate(store, clock, jobs_count=16)
    await store.projections.save_checkpoint(
        "stats", len(store.tables.events), {"open": {"x": ["t", "c"]}, "hours": {}}
    )
    position, state = await ProjectionRunner(store, StatsProjection()).state()
    assert (position, state) == (0, StatsProjection().initial())
    stats = await read_stats(store, clock.now())
    assert stats["position"] == len(store.tables.events)
    assert stats["by_status"]["PENDING"] == sum(
        j.status == JobStatus.PENDING for j in await all_jobs(store)
    )


async def test_per_minute_counts_of_the_last_hour(clock: FakeClock) -> None:
    store = MemoryStore()
    start = clock.now()
    await generate(store, clock, jobs_count=8)
    minutes = (await read_stats(store, clock.now()))["minutes"]
    # each round of the workload runs one minute after the last
    first_ok = minute_of(start + timedelta(minutes=2))
    assert {"minute": first_ok, "target": FAST, "succeeded": 1}.items() <= next(
        r for r in minutes if r["minute"] == first_ok and r["target"] == FAST
    ).items()
    assert sum(r["succeeded"] for r in minutes) == 3
    clock.advance(hours=2)
    assert (await read_stats(store, clock.now()))["minutes"] == []
