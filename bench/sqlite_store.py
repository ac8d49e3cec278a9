"""SQLite store figures: does offloading to per-connection threads pay, and do lane reads
stay flat as the backlog grows? Ratios are against a baseline of the same run.

    .venv/bin/python bench/sqlite_store.py [--n 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from jobledger.core.clock import FakeClock
from jobledger.core.ids import new_id
from jobledger.domain import job_commands, jobs
from jobledger.domain.jobs import Lane, NewJob, Stamp
from jobledger.domain.policies import partition_of
from jobledger.storage.sqlite import SqliteStore


def change(clock: FakeClock, n: int, key: str | None = None) -> jobs.Change:
    ident = new_id(int(clock.now().timestamp() * 1000))
    dedupe = f"d-{ident}"
    return job_commands.enqueued(
        job_id=ident,
        spec=NewJob("fast:t", {"n": n}, key=key),
        code="fast:t",
        lane=Lane.FAST,
        partition=partition_of(key, dedupe),
        dedupe_key=dedupe,
        stamp=Stamp(clock.now()),
    )


class LagProbe:
    """How late a 1 ms ticker wakes while the store works: the event loop's responsiveness."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            self.lags.append(time.perf_counter() - start - 0.001)

    def __enter__(self) -> LagProbe:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def writes(path: Path, *, offload: bool, n: int, writers: int) -> dict[str, float]:
    store = SqliteStore(str(path), offload=offload)
    await store.open()
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    reads = 0

    async def writer(w: int) -> None:
        for i in range(n // writers):
            await store.writes.apply([change(clock, i, key=f"k{w}-{i % 50}")])
            await asyncio.sleep(0)

    async def reader(stop: asyncio.Event) -> None:
        nonlocal reads
        while not stop.is_set():
            await store.queue.fast_pending(reads % 64, after_key=None, limit=100)
            reads += 1
            await asyncio.sleep(0)  # inline calls never suspend: let the writers run

    try:
        stop = asyncio.Event()
        with LagProbe() as probe:
            read_task = asyncio.create_task(reader(stop))
            start = time.perf_counter()
            await asyncio.gather(*(writer(w) for w in range(writers)))
            elapsed = time.perf_counter() - start
            stop.set()
            await read_task
        lags = sorted(probe.lags) or [0.0]
        return {
            "writes_per_s": n / elapsed,
            "reads_per_s": reads / elapsed,
            "lag_p50_ms": statistics.median(lags) * 1000,
            "lag_max_ms": lags[-1] * 1000,
        }
    finally:
        await store.close()


async def flatness(path: Path, sizes: list[int]) -> dict[int, tuple[float, float]]:
    """Median fast_pending (10 rows) and next_due (64 partitions) ms per PENDING backlog."""
    store = SqliteStore(str(path), offload=False)
    await store.open()
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    out: dict[int, tuple[float, float]] = {}
    try:
        have = 0
        for size in sizes:
            batch = []
            while have < size:
                clock.advance(timedelta(milliseconds=1))
                batch.append(change(clock, have, key=f"k{have % 5000}"))
                have += 1
                if len(batch) == 1000:
                    await store.writes.apply(batch)
                    batch = []
            if batch:
                await store.writes.apply(batch)
            reads, dues = [], []
            for i in range(300):
                start = time.perf_counter()
                await store.queue.fast_pending(i % 64, after_key=None, limit=10)
                middle = time.perf_counter()
                await store.queue.next_due(list(range(64)), Lane.FAST)
                reads.append(middle - start)
                dues.append(time.perf_counter() - middle)
            out[size] = (statistics.median(reads) * 1000, statistics.median(dues) * 1000)
    finally:
        await store.close()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--no-writes", dest="writes", action="store_false")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        for writers in (1, 4) if args.writes else ():
            inline = await writes(
                base / f"inline{writers}.db", offload=False, n=args.n, writers=writers
            )
            threaded = await writes(
                base / f"threaded{writers}.db", offload=True, n=args.n, writers=writers
            )
            print(f"\n{writers} writer(s) + 1 reader, {args.n} single-change commits")
            for name in inline:
                ratio = threaded[name] / inline[name] if inline[name] else float("nan")
                print(
                    f"  {name:14} inline {inline[name]:9.2f}  offload {threaded[name]:9.2f}"
                    f"  offload/inline {ratio:5.2f}"
                )
        sizes = [1_000, 10_000, 100_000]
        flat = await flatness(base / "flat.db", sizes)
        print("\nmedian ms by PENDING backlog (rows spread on 64 partitions)")
        for size in sizes:
            read, due = flat[size]
            print(
                f"  {size:>7} rows  fast_pending(limit 10) {read:.3f} ms"
                f" (x{read / flat[sizes[0]][0]:.2f})  next_due(64) {due:.3f} ms"
                f" (x{due / flat[sizes[0]][1]:.2f})"
            )


if __name__ == "__main__":
    asyncio.run(main())
