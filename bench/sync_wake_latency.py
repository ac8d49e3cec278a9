"""Commit → handler latency of a **sync** enqueue on the caller's own connection
(jobledger.integrations.sync) against the async paths, same run.

    .venv/bin/python bench/sync_wake_latency.py --store sqlite --samples 100

One idle pod; per sample, round robin, one job enqueued in its own transaction by:
`tx` — `engine.transaction()` (the store sees the commit and wakes its lanes in
process); `own` — `await engine.enqueue(tx=conn)` on a connection of the caller's own
(an async psycopg connection, or a sqlite3 one), whose commit the store cannot see; and
`sync` — `sync.enqueue(engine, conn)` in a thread, as a Flask or Django view would.
Measured from the end of the commit to the handler's first line; p50/p99 per path and
the ratios. On SQLite both `own` and `sync` are another connection's commit, noticed
by the `PRAGMA data_version` watch (25 ms ticks); on PostgreSQL all three ride NOTIFY.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobledger.config.settings import Settings
from jobledger.domain.jobs import Job
from jobledger.engine import Engine
from jobledger.integrations import sync
from jobledger.reactors.runtime import Runtime
from jobledger.storage.port import Store

sys.path.insert(0, str(Path(__file__).parent))
from drain import fresh_store
from wake_latency import pct

TARGET = "bench:sync-wake"
PATHS = ("tx", "own", "sync")


def connector(store: Store) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(sync connection factory, async connection factory) to the store's database."""
    if hasattr(store, "path"):
        path = store.path

        async def own_sqlite() -> Any:
            return sqlite3.connect(path)

        return (lambda: sqlite3.connect(path, check_same_thread=False)), own_sqlite
    import psycopg

    dsn = store.dsn  # type: ignore[attr-defined]
    return (lambda: psycopg.connect(dsn)), (lambda: psycopg.AsyncConnection.connect(dsn))


async def enqueue_by(path: str, engine: Engine, conns: dict[str, Any], i: int) -> float:
    """Enqueue one job by `path`; the perf_counter at the end of its commit."""
    if path == "tx":
        async with engine.transaction() as tx:
            await engine.enqueue(TARGET, {"i": i}, tx=tx, key=f"k{i}")
        return time.perf_counter()
    if path == "own":
        conn = conns["own"]
        await engine.enqueue(TARGET, {"i": i}, tx=conn, key=f"k{i}")
        done = conn.commit()
        if done is not None:
            await done
        return time.perf_counter()

    def in_thread() -> float:
        conn = conns["sync"]
        sync.enqueue(engine, conn, TARGET, {"i": i}, key=f"k{i}")
        conn.commit()
        return time.perf_counter()

    return await asyncio.to_thread(in_thread)


async def run(kind: str, samples: int, tmp: Path) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {p: [] for p in PATHS}
    async with fresh_store(kind, tmp) as store:
        # the collector tuned as `jobledger worker` runs (D29)
        engine = Engine(store, settings=Settings(gc_freeze=True))
        arrived = asyncio.Event()
        stamp = [0.0]

        async def handler(job: Job) -> None:
            stamp[0] = time.perf_counter()
            arrived.set()

        engine.targets.register(TARGET, "fast", handler, delivery_mode="at_least_once")
        make_sync, make_own = connector(store)
        conns = {"sync": make_sync(), "own": await make_own()}
        runtime = Runtime(engine, pod_id="bench")
        await runtime.start()
        await asyncio.sleep(0.5)
        try:
            for i in range((samples + 10) * len(PATHS)):
                path = PATHS[i % len(PATHS)]
                arrived.clear()
                committed = await enqueue_by(path, engine, conns, i)
                await asyncio.wait_for(arrived.wait(), 10)
                if i >= 10 * len(PATHS):  # warm-up
                    out[path].append((stamp[0] - committed) * 1000)
                await asyncio.sleep(0.01)
        finally:
            await runtime.stop()
            conns["sync"].close()
            closed = conns["own"].close()
            if closed is not None:
                await closed
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--samples", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = asyncio.run(run(args.store, args.samples, Path(tmp)))
    load = os.getloadavg()
    print(f"store={args.store} samples={args.samples} load avg {load[0]:.2f} {load[1]:.2f}")
    p50 = {p: pct(v, 0.5) for p, v in out.items()}
    for path, values in out.items():
        print(f"  {path:5} p50 {p50[path]:7.2f} ms  p99 {pct(values, 0.99):7.2f} ms")
    print(
        f"  sync/tx p50 {p50['sync'] / p50['tx']:.2f}  sync/own p50 {p50['sync'] / p50['own']:.2f}"
    )


if __name__ == "__main__":
    main()
