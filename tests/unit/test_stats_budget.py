"""A stats call folds at most `CALL_BUDGET` events before it answers and says whether it
reached the end of the log, so a log that grows faster than it folds cannot keep a call
waiting; calls that arrive during a catch-up wait for it instead of folding again."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jobledger.core.clock import FakeClock
from jobledger.http.queries.dashboard_numbers import RANGES, dashboard
from jobledger.projections import stats
from jobledger.projections.runner import ProjectionRunner
from jobledger.projections.stats import (
    StatsProjection,
    catch_up_stats,
    read_stats,
    shared_stats,
)
from jobledger.storage.memory import MemoryStore
from tests.contract.projections.test_replay_workload import generate


def budget_of_ten(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call may fold 10 events, read in pages of 10."""
    monkeypatch.setattr(stats, "CALL_BUDGET", 10)
    original = ProjectionRunner.__init__

    def small_pages(self: ProjectionRunner, *args: object, **kw: object) -> None:
        original(self, *args, **{**kw, "page": 10})  # type: ignore[arg-type]

    monkeypatch.setattr(ProjectionRunner, "__init__", small_pages)


async def test_the_runner_stops_after_its_budget(clock: FakeClock) -> None:
    store = MemoryStore()
    await generate(store, clock, jobs_count=24)
    runner = ProjectionRunner(store, StatsProjection(), page=10)
    assert await runner.catch_up(max_events=25) == 30  # whole pages: stops after the third
    position, _ = await store.projections.load_checkpoint("stats")
    assert position == store.tables.events[29].position
    assert await runner.catch_up() == len(store.tables.events) - 30


async def test_a_call_answers_within_its_budget_and_says_so(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryStore()
    await generate(store, clock, jobs_count=24)
    budget_of_ten(monkeypatch)
    first = await read_stats(store, clock.now())
    assert first["caught_up"] is False and first["position"] == store.tables.events[9].position
    monkeypatch.setattr(stats, "CALL_BUDGET", 10_000)
    later = await read_stats(store, clock.now())
    assert later["caught_up"] is True and later["position"] == store.tables.events[-1].position


async def test_calls_during_a_catch_up_share_it(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryStore()
    await generate(store, clock, jobs_count=24)
    folds = 0
    original = ProjectionRunner.catch_up

    async def counting(self: ProjectionRunner, **kw: int | None) -> int:
        nonlocal folds
        folds += 1
        await asyncio.sleep(0.01)
        return await original(self, **kw)

    monkeypatch.setattr(ProjectionRunner, "catch_up", counting)
    results = await asyncio.gather(*(catch_up_stats(store) for _ in range(5)))
    assert folds == 1
    assert {position for position, _ in results} == {store.tables.events[-1].position}


async def test_the_dashboard_answers_within_the_same_budget(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It used to catch up without a budget: under a busy drain it never answered."""
    store = MemoryStore()
    await generate(store, clock, jobs_count=24)
    budget_of_ten(monkeypatch)
    first = await dashboard(store, clock.now(), RANGES["1h"])
    assert first["caught_up"] is False and first["position"] == store.tables.events[9].position
    assert any("lag" in note for note in first["notes"])
    monkeypatch.setattr(stats, "CALL_BUDGET", 10_000)
    later = await dashboard(store, clock.now(), RANGES["1h"])
    assert later["caught_up"] is True and later["position"] == store.tables.events[-1].position


async def test_polling_calls_share_one_computation_a_second(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`GET /stats` polled by many clients: one fold and one set of reads per second,
    not one per call; after the age a computation starts afresh and sees new work,
    and the calls during it get the last answer while it is recent."""
    store = MemoryStore()
    await generate(store, clock, jobs_count=6)
    computed = 0
    original = stats.read_stats

    async def counting(*args: Any, **kw: Any) -> dict[str, Any]:
        nonlocal computed
        computed += 1
        await asyncio.sleep(0.01)
        return await original(*args, **kw)

    monkeypatch.setattr(stats, "read_stats", counting)
    together = await asyncio.gather(*(shared_stats(store, clock) for _ in range(5)))
    again = await shared_stats(store, clock)
    assert computed == 1
    assert all(answer is together[0] for answer in [*together, again])
    assert (await shared_stats(store, clock, hours=2))["since"] != again["since"]
    assert computed == 2  # another `hours` is another computation
    await generate(store, clock, jobs_count=3, first=6)
    # past the age: a new computation starts, and while it runs a call gets the last
    # answer (younger than SHARED_STALE_S) instead of waiting for it
    assert await shared_stats(store, clock, max_age_s=0.0) is again
    assert await shared_stats(store, clock) is again  # still running: still the last one
    await asyncio.sleep(0.05)  # the computation ends
    fresh = await shared_stats(store, clock)
    assert computed == 3 and fresh["position"] == store.tables.events[-1].position
    assert fresh["position"] > again["position"]
    # a last answer older than SHARED_STALE_S is not served: the call waits
    monkeypatch.setattr(stats, "SHARED_STALE_S", 0.0)
    await generate(store, clock, jobs_count=3, first=9)
    newest = await shared_stats(store, clock, max_age_s=0.0)
    assert computed == 4 and newest["position"] == store.tables.events[-1].position


async def test_a_failed_computation_is_not_kept_and_a_caller_leaving_stops_none(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryStore()
    await generate(store, clock, jobs_count=3)
    original = stats.read_stats
    failing = True

    async def flaky(*args: Any, **kw: Any) -> dict[str, Any]:
        await asyncio.sleep(0.01)
        if failing:
            raise ConnectionError("the database went away")
        return await original(*args, **kw)

    monkeypatch.setattr(stats, "read_stats", flaky)
    with pytest.raises(ConnectionError):
        await shared_stats(store, clock)
    failing = False
    leaving = asyncio.create_task(shared_stats(store, clock))
    staying = asyncio.create_task(shared_stats(store, clock))
    await asyncio.sleep(0)
    leaving.cancel()
    answer = await staying
    assert answer["position"] == store.tables.events[-1].position
    with pytest.raises(asyncio.CancelledError):
        await leaving
