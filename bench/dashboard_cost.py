"""What one dashboard request costs as the queue grows: wall time and
peak Python allocations (tracemalloc) of `jobledger.http.queries.dashboard_numbers.dashboard` on a
SQLite store with n and 10 n jobs (3 of every 8 stay open), after the stats checkpoint
has caught up; the checkpoint's size; and the stats fold with and without the queue
depth samples (`projections.depth`), over the same events. Ratios are same-run.

    .venv/bin/python bench/dashboard_cost.py [--n 2000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.contract.projections.test_replay_workload: the workload

from tests.contract.projections.test_replay_workload import generate  # noqa: E402

from jobledger.core.clock import FakeClock  # noqa: E402
from jobledger.http.queries.dashboard_numbers import RANGES, dashboard  # noqa: E402
from jobledger.projections import depth  # noqa: E402
from jobledger.projections.stats import StatsProjection, catch_up_stats  # noqa: E402
from jobledger.storage.port import JobFilter  # noqa: E402
from jobledger.storage.sqlite import SqliteStore  # noqa: E402


async def request_cost(store: SqliteStore, now: datetime, repeat: int) -> tuple[float, int]:
    """Median seconds and the largest tracemalloc peak (bytes) of one 24h request."""
    times, peaks = [], []
    for _ in range(repeat):
        tracemalloc.start()
        start = time.perf_counter()
        await dashboard(store, now, RANGES["24h"], paused={})
        times.append(time.perf_counter() - start)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    return statistics.median(times), max(peaks)


def fold_seconds(events: list[Any], samples: bool) -> float:
    real = depth.record_depth
    if not samples:
        depth.record_depth = lambda *a, **k: None  # type: ignore[assignment]
    try:
        projection = StatsProjection()
        start = time.perf_counter()
        projection.apply_page(projection.initial(), events, {})
        return time.perf_counter() - start
    finally:
        depth.record_depth = real  # type: ignore[assignment]


async def main(n: int, repeat: int) -> None:
    print(f"load average before: {os.getloadavg()}")
    clock = FakeClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    with tempfile.TemporaryDirectory() as folder:
        store = SqliteStore(str(Path(folder) / "dash.db"))
        await store.open()
        try:
            first = 0
            for jobs in (n, 9 * n):
                await generate(store, clock, jobs_count=jobs, first=first)
                first += jobs
                await catch_up_stats(store)
                _, state = await store.projections.load_checkpoint("stats")
                seconds, peak = await request_cost(store, clock.now(), repeat)
                _, open_jobs = await store.admin.list_jobs(JobFilter(), offset=0, limit=1)
                print(
                    f"{first:>7} jobs ({open_jobs} open): request {seconds * 1000:.1f} ms,"
                    f" peak {peak / 1024:.0f} KiB, checkpoint {len(json.dumps(state))} bytes"
                )
            events = await store.log.read_log(0, limit=10 * first)
            pairs = [(fold_seconds(events, True), fold_seconds(events, False)) for _ in range(3)]
            with_s, without_s = min(p[0] for p in pairs), min(p[1] for p in pairs)
            print(
                f"stats fold of {len(events)} events: {with_s:.2f} s with depth samples,"
                f" {without_s:.2f} s without (ratio {with_s / without_s:.2f})"
            )
        finally:
            await store.close()
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.n, args.repeat))
