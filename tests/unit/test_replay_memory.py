"""Replay's memory does not grow with the log: the streamed replay's peak of
traced allocations is the same for a log five times longer, while the whole in-memory
rebuild's (every open row held at once) grows with it — the measure can fail.

Measured with `tracemalloc` (what Python allocates, the store's reader thread included)
on a real SQLite store; not timed. The traced peak also counts blocks CPython keeps in
its free lists (tuples of keyword names, …), bounded but filling as a run goes on: hence
an allowance, small beside what holding the rows costs.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path

from jobledger.core.clock import FakeClock
from jobledger.projections.replay import rebuild, replay
from jobledger.storage.sqlite import SqliteStore
from tests.contract.projections.test_replay_workload import generate

PAGE = 100
ALLOWANCE = 512 * 1024  # bytes: what the streamed replay's peak may move by


async def _peak(work: Callable[[], Awaitable[object]], *, runs: int = 2) -> int:
    """The peak of traced memory above what was held before `work` ran: the smallest of
    `runs` runs after a warm-up one (the stores' caches of event times and actors
    filled, the collector's timing the least in the way)."""
    await work()
    peaks = []
    for _ in range(runs):
        gc.collect()
        tracemalloc.start()
        try:
            held = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            await work()
            peaks.append(tracemalloc.get_traced_memory()[1] - held)
        finally:
            tracemalloc.stop()
    return min(peaks)


async def test_the_streamed_replay_holds_the_same_for_a_log_five_times_longer(
    tmp_path: Path, clock: FakeClock
) -> None:
    store = SqliteStore(str(tmp_path / "ledger.db"))
    await store.open()
    try:

        async def streamed() -> None:
            report = await replay(store, page=PAGE)
            assert report.ok, report.lines()[-1]

        async def whole() -> None:
            assert not (await rebuild(store, page=PAGE)).problems

        await generate(store, clock, jobs_count=1500)  # 6,000 events, 563 open jobs
        small = (await _peak(streamed), await _peak(whole, runs=1))
        await generate(store, clock, jobs_count=6000, first=1500)  # 30,000 events, 2,813 open
        large = (await _peak(streamed), await _peak(whole, runs=1))
    finally:
        await store.close()
    # 2,250 more open jobs: the whole rebuild holds ~2.5 KiB more per job; the streamed
    # replay's allowance is CPython's free lists (bounded, ~0.2 MiB here), a twelfth of that
    assert large[1] - small[1] > 8 * ALLOWANCE, f"the measure misses the rows: {small} {large}"
    assert large[0] - small[0] < ALLOWANCE, f"streamed replay grew: {small} {large}"
