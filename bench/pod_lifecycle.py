"""Pod start to first delivery, and an idle pod's stop (goals: ≤ 150 ms, ≤ 100 ms).

What users run: `jobledger.app.build(Settings(), store=PostgresStore(dsn, schema=...))`
(what `build(url=postgresql://...)` opens), a fast-lane at-least-once target
registered, `await app.start()`, default settings. Each round uses a schema migrated
beforehand (as a pod joining a deployed database finds it) with one job committed, then
measures on a fresh pod object:

* start → first delivery: from calling `app.start()` (opening the pool, the migration
  check, LISTEN, leases, lanes, reactors) to the handler's first line;
* `app.start()` returned: the same start, until the call returns;
* idle stop: after the delivery and a 1 s idle pause, `app.stop()` (the lanes, leases
  released, reactors and the pool closed) until it returns.

Baseline, same run: opening and closing a bare psycopg pool of the same size
(`AsyncConnectionPool(min_size=1).open(wait=True)`) and one `SELECT 1`.

    .venv/bin/python bench/pod_lifecycle.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid

import psycopg
from pg_common import bench_dsn
from psycopg_pool import AsyncConnectionPool

from jobledger.app import build
from jobledger.config.settings import Settings
from jobledger.domain.jobs import Job
from jobledger.engine import Engine
from jobledger.storage.postgres import PostgresStore


async def _nothing(job: Job) -> None:
    return None


async def one_round(dsn: str) -> tuple[float, float, float]:
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    seed = PostgresStore(dsn, schema=schema)
    await seed.open()  # migrated beforehand, as a deployed database is
    writer = Engine(seed)
    writer.targets.register("bench:first", "fast", _nothing, delivery_mode="at_least_once")
    async with writer.transaction() as tx:
        await writer.enqueue("bench:first", {"n": 1}, key="k", tx=tx)
    await seed.close()
    with tempfile.TemporaryDirectory() as archive:
        app = build(Settings(log_archive_dir=archive), store=PostgresStore(dsn, schema=schema))
        delivered = asyncio.Event()
        first = [0.0]

        async def handler(job: Job) -> None:
            if not delivered.is_set():
                first[0] = time.perf_counter()
                delivered.set()

        app.engine.targets.register("bench:first", "fast", handler, delivery_mode="at_least_once")
        try:
            began = time.perf_counter()
            await app.start()
            returned = time.perf_counter() - began
            await asyncio.wait_for(delivered.wait(), 30)
            to_first = first[0] - began
            await asyncio.sleep(1.0)
        finally:
            stop_began = time.perf_counter()
            await app.stop()
            stopped = time.perf_counter() - stop_began
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    return to_first, returned, stopped


async def bare_pool(dsn: str) -> tuple[float, float]:
    began = time.perf_counter()
    pool: AsyncConnectionPool[psycopg.AsyncConnection[object]] = AsyncConnectionPool(
        dsn, min_size=1, max_size=10, open=False
    )
    await pool.open(wait=True)
    async with pool.connection() as conn:
        await conn.execute("SELECT 1")
    opened = time.perf_counter() - began
    began = time.perf_counter()
    await pool.close()
    return opened, time.perf_counter() - began


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    dsn = await bench_dsn()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    firsts, returns, stops, opens, closes = [], [], [], [], []
    for _ in range(args.rounds):
        to_first, returned, stopped = await one_round(dsn)
        opened, closed = await bare_pool(dsn)
        firsts.append(to_first * 1000)
        returns.append(returned * 1000)
        stops.append(stopped * 1000)
        opens.append(opened * 1000)
        closes.append(closed * 1000)

    def show(label: str, values: list[float]) -> None:
        each = ", ".join(f"{v:.0f}" for v in values)
        print(f"{label:<44} median {statistics.median(values):8.1f} ms  ({each})")

    print(f"{args.rounds} rounds, a fresh pod each (build + app.start, default settings)")
    show("app.start() -> first delivery", firsts)
    show("app.start() returned", returns)
    show("idle pod: app.stop() returned", stops)
    show("baseline: bare pool open + SELECT 1", opens)
    show("baseline: bare pool close", closes)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    asyncio.run(main())
