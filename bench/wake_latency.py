"""Commit → handler wake latency of an idle fast lane, with a same-run raw baseline.

    .venv/bin/python bench/wake_latency.py --store postgres --samples 300 [--mode at_most_once]

One pod runs idle; the bench enqueues one job (at-least-once unless `--mode`) per sample in its own
transaction and measures from the end of the commit to the handler's first line. The
baseline is the raw round trip the wake path rides on: LISTEN/NOTIFY between two
psycopg connections (PostgreSQL), or an asyncio.Event set → wake (SQLite, whose wake-up
is in-process). Prints p50/p99 and the engine/raw ratio; on PostgreSQL also a raw
one-row commit timed after each sample (the WAL flush an at-most-once mark must wait
for) and the engine's share: the wake minus that flush, p50 and p99 of the per-sample
difference. At-most-once also splits each sample at the mark's statement
(`Writes.mark_first`, timed around the call): the statement (its round trip, the
server's work and the flush) and everything else, the engine's own path (the NOTIFY's
arrival, planning, the mark's event, the handler's task).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from jobledger.config.settings import Settings
from jobledger.domain.jobs import Job
from jobledger.engine import Engine
from jobledger.reactors.runtime import Runtime

sys.path.insert(0, str(Path(__file__).parent))
from drain import fresh_store
from pg_common import SERVER


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def wake_samples(
    engine: Engine,
    samples: int,
    gap: float,
    pod: str,
    mode: str = "at_least_once",
    between: Callable[[], Awaitable[None]] | None = None,
    statements: list[float] | None = None,
) -> list[float]:
    """Milliseconds from each enqueue's commit to its handler's first line: one idle pod,
    one job per sample (20 warm-up samples dropped), `gap` seconds apart; `between` runs
    after each sample (a baseline measured under the same conditions). `statements`
    gets, per sample, how long the store's `mark_first` call took (NaN when the lane
    did not mark the row that way)."""
    arrived = asyncio.Event()
    stamp = [0.0]
    marked = [math.nan]
    if statements is not None:
        store = engine.store
        mark_first = store.writes.mark_first

        async def timed_mark_first(change: Any, guard: Any) -> bool:
            began = time.perf_counter()
            try:
                return await mark_first(change, guard)
            finally:
                marked[0] = (time.perf_counter() - began) * 1000

        store.writes.mark_first = timed_mark_first  # type: ignore[method-assign]

    async def handler(job: Job) -> None:
        stamp[0] = time.perf_counter()
        arrived.set()

    engine.targets.register("bench:wake", "fast", handler, delivery_mode=mode)
    runtime = Runtime(engine, pod_id=pod)
    await runtime.start()
    await asyncio.sleep(0.5)
    out: list[float] = []
    try:
        for i in range(samples + 20):
            arrived.clear()
            marked[0] = math.nan
            async with engine.transaction() as tx:
                await engine.enqueue("bench:wake", {"i": i}, tx=tx, key=f"k{i}")
            committed = time.perf_counter()
            await asyncio.wait_for(arrived.wait(), 10)
            if i >= 20:  # warm-up
                out.append((stamp[0] - committed) * 1000)
                if statements is not None:
                    statements.append(marked[0])
            await asyncio.sleep(gap)  # let the round's outcome commit: lane idle again
            if between is not None:
                await between()
    finally:
        await runtime.stop()
    return out


async def engine_latency(
    kind: str, tmp: Path, samples: int, mode: str
) -> tuple[list[float], list[float], list[float]]:
    """The engine's samples and, on PostgreSQL, a raw one-row commit timed after each
    one on a connection of its own (one WAL flush: what an at-most-once mark must wait
    for before the handler may run), so both see the same disk; and how long each
    sample's mark statement took."""
    async with fresh_store(kind, tmp) as store:
        # the collector tuned as `jobledger worker` runs (D29)
        engine = Engine(store, settings=Settings(gc_freeze=True))
        if kind != "postgres":
            return await wake_samples(engine, samples, 0.01, "bench", mode), [], []
        import psycopg
        from psycopg.conninfo import make_conninfo

        from jobledger.storage.postgres import PostgresStore

        assert isinstance(store, PostgresStore)
        flushes: list[float] = []
        probe = await psycopg.AsyncConnection.connect(make_conninfo(store.dsn), autocommit=True)
        table = f"{store.s}.bench_flush"
        await probe.execute(f"CREATE TABLE {table} (i int)")

        async def flush() -> None:
            began = time.perf_counter()
            await probe.execute(f"INSERT INTO {table} VALUES (1)")
            flushes.append((time.perf_counter() - began) * 1000)

        statements: list[float] = []
        try:
            wakes = await wake_samples(engine, samples, 0.01, "bench", mode, flush, statements)
            return wakes, flushes[20:], statements
        finally:
            await probe.close()


async def raw_notify(samples: int) -> list[float]:
    import psycopg

    listener = await psycopg.AsyncConnection.connect(SERVER, autocommit=True)
    sender = await psycopg.AsyncConnection.connect(SERVER, autocommit=True)
    await listener.execute("LISTEN bench_wake")
    out: list[float] = []
    gen = listener.notifies()
    try:
        for i in range(samples + 20):
            await sender.execute("NOTIFY bench_wake, 'x'")
            sent = time.perf_counter()
            await anext(gen)
            if i >= 20:
                out.append((time.perf_counter() - sent) * 1000)
    finally:
        await listener.close()
        await sender.close()
    return out


async def raw_event(samples: int) -> list[float]:
    event = asyncio.Event()
    got = [0.0]

    async def waiter() -> None:
        while True:
            await event.wait()
            event.clear()
            got[0] = time.perf_counter()

    task = asyncio.create_task(waiter())
    out: list[float] = []
    await asyncio.sleep(0)
    for _ in range(samples):
        sent = time.perf_counter()
        event.set()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        out.append((got[0] - sent) * 1000)
    task.cancel()
    return out


def split_at_statement(wakes: list[float], statements: list[float]) -> None:
    """At-most-once: each sample split at its mark statement (`Writes.mark_first`), the
    one step that waits for the server and its flush; the rest is the engine's own."""
    pairs = [(w, s) for w, s in zip(wakes, statements, strict=False) if not math.isnan(s)]
    if not pairs:
        return
    own = [w - s for w, s in pairs]
    marks = [s for _, s in pairs]
    print(
        f"  the mark statement (mark_first)  p50 {statistics.median(marks):7.3f} ms"
        f"  p99 {pct(marks, 0.99):7.3f} ms  ({len(pairs)} of {len(wakes)} samples)"
    )
    print(
        f"  engine outside that statement    p50 {statistics.median(own):7.3f} ms"
        f"  p99 {pct(own, 0.99):7.3f} ms  max {max(own):7.3f} ms"
    )


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument(
        "--mode", choices=["at_least_once", "at_most_once"], default="at_least_once"
    )
    args = parser.parse_args(argv)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmpdir:
        raw = await (
            raw_notify(args.samples) if args.store == "postgres" else raw_event(args.samples)
        )
        eng, flushes, statements = await engine_latency(
            args.store, Path(tmpdir), args.samples, args.mode
        )
    name = "LISTEN/NOTIFY round trip" if args.store == "postgres" else "asyncio.Event wake"
    print(f"{args.store}, {args.mode}: commit → handler over {args.samples} samples")
    print(f"  raw {name:26s} p50 {statistics.median(raw):7.3f} ms  p99 {pct(raw, 0.99):7.3f} ms")
    print(
        f"  engine                        p50 {statistics.median(eng):7.3f} ms"
        f"  p99 {pct(eng, 0.99):7.3f} ms"
    )
    print(
        f"  ratio engine/raw p50 {statistics.median(eng) / max(statistics.median(raw), 1e-9):.1f}x"
    )
    if flushes:
        print(
            f"  raw one-row commit (a WAL flush) p50 {statistics.median(flushes):7.3f} ms"
            f"  p99 {pct(flushes, 0.99):7.3f} ms  (same run, after each sample)"
        )
        # what the engine adds to the one flush an at-most-once mark must wait for: the
        # difference of the medians, and the median of each sample's difference with
        # the flush timed right after it (less moved by the disk's load drifting)
        paired = [e - f for e, f in zip(eng, flushes, strict=True)]
        print(
            f"  engine share (wake - flush)      p50 "
            f"{statistics.median(eng) - statistics.median(flushes):7.3f} ms"
            f"  paired p50 {statistics.median(paired):7.3f} ms"
            f"  paired p99 {pct(paired, 0.99):7.3f} ms"
        )
    split_at_statement(eng, statements)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
