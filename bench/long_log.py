"""The hot paths beside a long log: a small queue, and 0, 1M, 3M… events of closed jobs.

    .venv/bin/python bench/long_log.py --store postgres --events 1000000,3000000
    .venv/bin/python bench/long_log.py --store sqlite --events 1000000

One store grows: the log is filled with the audit workload of the contract tests (every
kind of job transition, ~4 events a job, most jobs closed: tests/contract/projections/
test_replay_workload.py) through the store's own writes, in slices of 25,000 jobs, and
the queue is kept small and the stats checkpoint at the log's end after each fill (see
`settle`). At the empty log and at each size, `--rounds` rounds measure, each op timed
one call at a time (median ms, and this process's CPU per call):

* `enqueue`: one business row and one job in a transaction (`engine.enqueue(tx=...)`);
* `dedupe hit`: an enqueue whose dedupe key the log's first job holds (nothing written;
  the holder's id read back);
* `list`: `GET /api/v1/jobs?limit=100` through the app in process (ASGI, no network);
* `stats`: `read_stats` (what `GET /stats` computes: the checkpoint caught up to the
  log's end, the open counts, the oldest PENDING row per target);
* `dashboard`: the dashboard's numbers for the last hour (`http.dashboard.dashboard`).

Prints each figure's ratio to the empty log's (goal: within 10 %), and the load average.
The auditors' commands over a long log are `bench/replay_verify.py`'s. Plain script.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg

from jobledger.admin.jobs import JobAdmin
from jobledger.config.api_keys import parse_api_keys
from jobledger.core.clock import FakeClock
from jobledger.engine import Engine
from jobledger.http.app import create_app
from jobledger.http.auth import ApiKeys
from jobledger.http.queries.dashboard_numbers import RANGES, dashboard
from jobledger.http.services import Services
from jobledger.projections.stats import catch_up_stats, read_stats
from jobledger.storage.port import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.contract.projections.test_replay_workload import generate

KEY = "bench-long-log-key-01"
HELD = "held-by-the-oldest-job"  # the dedupe key of the log's first job
SLICE = 25_000
TARGET = "bench:business"


async def open_store(kind: str, tmp: Path) -> Store:
    if kind == "sqlite":
        from jobledger.storage.sqlite import SqliteStore

        store: Store = SqliteStore(str(tmp / "long-log.db"))
    else:
        from pg_common import bench_dsn

        from jobledger.storage.postgres import PostgresStore

        store = PostgresStore(await bench_dsn(), schema=f"longlog_{os.getpid()}")
    await store.open()
    return store


async def drop(store: Store) -> None:
    await store.close()
    if store.name == "postgres":
        from jobledger.storage.postgres import PostgresStore

        assert isinstance(store, PostgresStore)
        async with await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as conn:
            await conn.execute(f"DROP SCHEMA {store.s} CASCADE")


async def events_in(store: Store) -> int:
    newest = await store.log.read_log_newest(None, limit=1)
    if store.name == "sqlite" or not newest:
        return int(newest[0].position or 0) if newest else 0
    from jobledger.storage.postgres import PostgresStore

    assert isinstance(store, PostgresStore)
    async with store.pool.connection() as conn:
        cur = await conn.execute(f"SELECT count(*) FROM {store.s}.events")
        row = await cur.fetchone()
        return int(row[0]) if row else 0


async def settle(store: Store) -> None:
    """After a fill: the rows it left open (DEAD, waiting retries) leave the read model,
    so the queue stays the few rows the ops write, and the tables are vacuumed and
    analyzed (autovacuum's work, which the server may not do); the stats checkpoint moves to the
    log's end with its state as it was. Folding the fill would take longer than the
    fill (its counts are not what is measured: the state holds counters per target and
    code, and the fill adds none)."""
    if store.name == "sqlite":
        from jobledger.storage.sqlite import SqliteStore

        assert isinstance(store, SqliteStore)
        await store.connections.write(
            lambda conn: conn.execute("DELETE FROM jobs WHERE target <> ?", (TARGET,))
        )
        await store.connections.write(lambda conn: conn.execute("ANALYZE"))
    else:
        from jobledger.storage.postgres import PostgresStore

        assert isinstance(store, PostgresStore)
        async with store.pool.connection() as conn:
            await conn.execute(f"DELETE FROM {store.s}.jobs WHERE target <> %s", (TARGET,))
        # what autovacuum would have done meanwhile (the bench server may run without it)
        async with await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as raw:
            await raw.execute(f"VACUUM ANALYZE {store.s}.jobs")
            await raw.execute(f"VACUUM ANALYZE {store.s}.events")
    newest = await store.log.read_log_newest(None, limit=1)
    _, state = await store.projections.load_checkpoint("stats")
    await store.projections.save_checkpoint("stats", newest[0].position or 0, state)


async def timed(calls: int, op: Callable[[int], Awaitable[Any]]) -> tuple[float, float]:
    """(median ms, CPU ms per call) of `op(i)`."""
    wall = []
    cpu = time.process_time()
    for i in range(calls):
        began = time.perf_counter()
        await op(i)
        wall.append(time.perf_counter() - began)
    return statistics.median(wall) * 1000, (time.process_time() - cpu) / calls * 1000


class Ops:
    def __init__(self, store: Store, clock: FakeClock) -> None:
        self.store = store
        self.clock = clock
        self.engine = Engine(store, clock=clock)
        self.engine.targets.register(TARGET, "fast", lambda job: None)
        self.counter = 0
        app = create_app(
            Services(store, clock, JobAdmin(store, clock)),
            ApiKeys(parse_api_keys(f"{KEY}:admin:bench")),
        )
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://bench",
            headers={"Authorization": f"Bearer {KEY}"},
        )

    async def enqueue(self, i: int, dedupe: str | None = None) -> None:
        self.counter += 1
        async with self.engine.transaction() as tx:
            native = tx.native
            if self.store.name == "sqlite":
                native.execute("INSERT INTO business VALUES (?)", (self.counter,))
            else:
                await native.execute(f"INSERT INTO {self.business} VALUES (%s)", (self.counter,))
            await self.engine.enqueue(
                TARGET, {"i": i}, tx=tx, key=f"b{self.counter}", dedupe_key=dedupe
            )

    async def setup(self) -> None:
        async with self.engine.transaction() as tx:
            if self.store.name == "sqlite":
                tx.native.execute("CREATE TABLE IF NOT EXISTS business (id INTEGER)")
                self.business = "business"
            else:
                from jobledger.storage.postgres import PostgresStore

                assert isinstance(self.store, PostgresStore)
                self.business = f"{self.store.s}.business"
                await tx.native.execute(f"CREATE TABLE IF NOT EXISTS {self.business} (id bigint)")

    async def measure(self, calls: int) -> dict[str, tuple[float, float]]:
        now = self.clock.now()
        out = {
            "enqueue": await timed(calls, self.enqueue),
            "dedupe hit": await timed(calls, lambda i: self.enqueue(i, dedupe=HELD)),
        }

        async def listing(i: int) -> None:
            (await self.http.get("/api/v1/jobs", params={"limit": "100"})).raise_for_status()

        out["list"] = await timed(calls, listing)
        out["stats"] = await timed(max(calls // 10, 5), lambda i: read_stats(self.store, now))
        out["dashboard"] = await timed(
            max(calls // 10, 5), lambda i: dashboard(self.store, now, RANGES["1h"])
        )
        return out


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--events", default="1000000,3000000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.events.split(",")]
    print(f"{args.store}: log sizes 0, {sizes}; load average {os.getloadavg()}")
    clock = FakeClock()
    with tempfile.TemporaryDirectory() as tmpdir:
        store = await open_store(args.store, Path(tmpdir))
        try:
            ops = Ops(store, clock)
            await ops.setup()
            await ops.enqueue(0, dedupe=HELD)
            await generate(store, clock, jobs_count=10, first=10**8)  # the workload's targets
            await catch_up_stats(store)
            await settle(store)
            await ops.measure(20)  # warm-up: connections, prepared statements, caches
            base: dict[str, list[tuple[float, float]]] = {}
            jobs = 0
            for size in [0, *sizes]:
                while (have := await events_in(store)) < size:
                    began = time.perf_counter()
                    await generate(store, clock, jobs_count=SLICE, first=jobs)
                    jobs += SLICE
                    print(
                        f"  filled to {have:,} events ({time.perf_counter() - began:.1f} s a slice)"
                    )
                if size:
                    await settle(store)
                runs = [await ops.measure(args.calls) for _ in range(args.rounds)]
                have = await events_in(store)
                line = []
                for op in runs[0]:
                    wall = statistics.median(r[op][0] for r in runs)
                    cpu = statistics.median(r[op][1] for r in runs)
                    if size == 0:
                        base.setdefault(op, []).append((wall, cpu))
                    ratio = wall / base[op][0][0]
                    line.append(f"{op} {wall:.3f} ms ({cpu:.3f} CPU) {ratio:.2f}x")
                print(
                    f"{have:>10,} events: " + "; ".join(line) + f"; load {os.getloadavg()[0]:.2f}"
                )
        finally:
            await ops.http.aclose()
            await drop(store)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
