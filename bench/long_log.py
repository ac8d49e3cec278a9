"""The hot paths beside a long log: a small queue, and 0, 1M, 10M… events of closed jobs.

    .venv/bin/python bench/long_log.py --store postgres --private --events 1000000,10000000
    .venv/bin/python bench/long_log.py --store sqlite --events 1000000

One store per log size (a schema each on PostgreSQL), all open at once. The log is the
audit workload of the contract tests (every kind of job transition, ~4 events a job,
most jobs closed: tests/contract/projections/test_replay_workload.py). On PostgreSQL
its first slice of 25,000 jobs (≈ 100k events) is written through the store's own
writes and the rest are copies of that slice (`bench/log_copies.py`: new job streams
with their own hash chains, at the store's positions, through its indexes): 10M events
in minutes instead of an hour. `SIZE:writes` fills a log through the store's writes
alone, slice after slice, so a size can be measured both ways in one run (SQLite is
always filled so). After the fill the queue is kept small and the stats checkpoint at
the log's end (see `settle`). `--private` runs on a PostgreSQL cluster of the run's own
with the machine server's settings that change the figures (stopped and removed at the
end), so other work on the machine's server does not load the figures.

`--rounds` rounds then measure every store in turn (a different one first each round),
each op timed one call at a time (median ms, and this process's CPU per call):

* `enqueue`: one business row and one job in a transaction (`engine.enqueue(tx=...)`);
* `dedupe hit`: an enqueue whose dedupe key the log's first job holds (nothing written;
  the holder's id read back);
* `list`: `GET /api/v1/jobs?limit=100` through the app in process (ASGI, no network);
* `stats`: `read_stats` (what `GET /stats` computes: the checkpoint caught up to the
  log's end, the open counts, the oldest PENDING row per target);
* `dashboard`: the dashboard's numbers for the last hour (`http.dashboard.dashboard`).

Prints each figure with the median over the rounds of its ratio to the empty log's in
the same round (goal: within 10 %), their range, and the load average. The auditors'
commands over a long log are `bench/replay_verify.py`'s. Plain script.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
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


async def open_store(kind: str, tmp: Path, dsn: str | None, schema: str) -> Store:
    if kind == "sqlite":
        from jobledger.storage.sqlite import SqliteStore

        tmp.mkdir()
        store: Store = SqliteStore(str(tmp / "long-log.db"))
    else:
        from pg_common import bench_dsn

        from jobledger.storage.postgres import PostgresStore

        store = PostgresStore(dsn or await bench_dsn(), schema=schema)
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

    async def measure(self, calls: int, op: str) -> tuple[float, float]:
        """`calls` calls of `op` (a tenth as many of the stats and the dashboard)."""
        now = self.clock.now()

        async def listing(i: int) -> None:
            (await self.http.get("/api/v1/jobs", params={"limit": "100"})).raise_for_status()

        few = max(calls // 10, 5)
        match op:
            case "enqueue":
                return await timed(calls, self.enqueue)
            case "dedupe hit":
                return await timed(calls, lambda i: self.enqueue(i, dedupe=HELD))
            case "list":
                return await timed(calls, listing)
            case "stats":
                return await timed(few, lambda i: read_stats(self.store, now))
            case _:
                return await timed(few, lambda i: dashboard(self.store, now, RANGES["1h"]))


OPS = ("enqueue", "dedupe hit", "list", "stats", "dashboard")


class Log:
    """One store at one log size: `spec` is a size, `<size>:writes` to fill it through
    the store's own writes alone (else one slice through them, then copies of it)."""

    def __init__(self, spec: str) -> None:
        size, _, how = spec.partition(":")
        self.size = int(size)
        self.by_writes = how == "writes"
        self.label = f"{self.size:,}" + (" (writes)" if self.by_writes else "")
        self.clock = FakeClock()
        self.store: Store | None = None
        self.ops: Ops | None = None
        self.runs: list[dict[str, tuple[float, float]]] = []

    async def open(self, kind: str, tmp: Path, dsn: str | None, n: int) -> None:
        self.store = await open_store(kind, tmp / f"log{n}", dsn, f"longlog_{os.getpid()}_{n}")
        self.ops = Ops(self.store, self.clock)
        await self.ops.setup()
        await self.ops.enqueue(0, dedupe=HELD)
        await generate(self.store, self.clock, jobs_count=10, first=10**8)  # the targets
        await catch_up_stats(self.store)

    async def fill(self) -> None:
        assert self.store is not None
        store, began, jobs = self.store, time.perf_counter(), 0
        copier: Any = None
        copies = 0
        while (have := await events_in(store)) < self.size:
            if copier is None:
                mark = await newest_position(store)
                await generate(store, self.clock, jobs_count=SLICE, first=jobs)
                jobs += SLICE
                if not self.by_writes and store.name == "postgres":
                    copier = await copier_of(store, mark)
                continue
            copies += 1
            await copier.write(copies)
            if copies % 20 == 0:
                print(f"  {self.label}: {have:,} events after {time.perf_counter() - began:.0f} s")
        if copier is not None:  # the clock goes on after the last copy's times
            self.clock.advance(copier.span * copies)
        # every log alike, the empty one too: with autovacuum off (the machine's
        # setting) the planner's row counts of `jobs` are the ones analyzed here
        await settle(store)
        took = time.perf_counter() - began
        print(f"  {self.label}: {have:,} events, {copies} copies, filled in {took:.0f} s")

    async def close(self) -> None:
        if self.ops is not None:
            await self.ops.http.aclose()
        if self.store is not None:
            await drop(self.store)


async def newest_position(store: Store) -> int:
    newest = await store.log.read_log_newest(None, limit=1)
    return int(newest[0].position or 0) if newest else 0


async def copier_of(store: Store, after: int) -> Any:
    """A `log_copies.Copier` of the events after position `after` (the slice just
    written)."""
    from log_copies import Copier

    from jobledger.storage.postgres import PostgresStore

    assert isinstance(store, PostgresStore)
    template = []
    while page := await store.log.read_log(after, limit=10_000):
        template += page
        after = int(page[-1].position or 0)
    return Copier(store, template)


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument(
        "--events",
        default="1000000,10000000",
        help="log sizes besides the empty one; SIZE:writes fills through the store's"
        " writes alone (PostgreSQL copies a first slice otherwise)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument(
        "--private", action="store_true", help="PostgreSQL: a private cluster for the run"
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="PostgreSQL: after the rounds, EXPLAIN (ANALYZE, BUFFERS) of the measured reads",
    )
    args = parser.parse_args(argv)
    logs = [Log("0"), *(Log(spec) for spec in args.events.split(","))]
    print(f"{args.store}: logs {[log.label for log in logs]}; load average {os.getloadavg()}")
    async with AsyncExitStack() as stack:
        dsn = None
        if args.store == "postgres" and args.private:
            dsn = await stack.enter_async_context(private_database())
        tmpdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        for log in logs:
            stack.push_async_callback(log.close)
        for n, log in enumerate(logs):
            await log.open(args.store, tmpdir, dsn, n)
            await log.fill()
        for log in logs:
            assert log.ops is not None
            for op in OPS:  # warm-up: connections, prepared statements, caches
                await log.ops.measure(20, op)
        # each round times every op on every log in turn (a different log first each
        # round), so the same op's blocks on the logs are seconds apart and a change of
        # the machine's load lands on every size alike
        for r in range(args.rounds):
            for log in logs:
                log.runs.append({})
            for op in OPS:
                for log in logs[r % len(logs) :] + logs[: r % len(logs)]:
                    assert log.ops is not None
                    log.runs[-1][op] = await log.ops.measure(args.calls, op)
            print(f"  round {r + 1} done; load {os.getloadavg()[0]:.2f}")
        if args.explain and args.store == "postgres":
            for log in logs:
                await explain(log)
        empty = logs[0]
        for log in logs:
            assert log.store is not None
            line = []
            for op in log.runs[0]:
                wall = statistics.median(run[op][0] for run in log.runs)
                cpu = statistics.median(run[op][1] for run in log.runs)
                # each round's ratio to the empty log's same round, then their median;
                # the CPU's too (this process's: what the machine's load moves least)
                pairs = list(zip(log.runs, empty.runs, strict=True))
                ratios = [run[op][0] / e[op][0] for run, e in pairs]
                cpu_ratios = [run[op][1] / e[op][1] for run, e in pairs]
                line.append(
                    f"{op} {wall:.3f} ms {statistics.median(ratios):.2f}x"
                    f" [{min(ratios):.2f}-{max(ratios):.2f}],"
                    f" CPU {cpu:.3f} ms {statistics.median(cpu_ratios):.2f}x"
                )
            have = await events_in(log.store)
            print(f"{have:>10,} events {log.label}: " + "; ".join(line))
        print(f"load average {os.getloadavg()}")
    return 0


async def explain(log: Log) -> None:
    """The plans of the reads the ops make, on this log, with their buffers."""
    from jobledger.storage.port import JobFilter
    from jobledger.storage.postgres import PostgresStore

    store = log.store
    assert isinstance(store, PostgresStore)
    admin, sql = store.admin, store.sql
    page, count, params = admin.list_sql(JobFilter(), count_limit=1001)
    oldest, _, where = admin.list_sql(JobFilter(status="PENDING", target=TARGET), after="")
    at, _ = await store.projections.load_checkpoint("stats")
    reads = {
        "list page": (page, {**params, "offset": 0, "limit": 101}),
        "list count": (count, params),
        "stats catch-up (read_log)": (
            sql.read_log,
            {"after": await newest_position(store), "below": 2**62, "limit": 1000},
        ),
        "newest event": (sql.read_log_newest, (2**63 - 1, 1)),
        "stats checkpoint": (sql.load_checkpoint, ("stats",)),
        "oldest pending": (oldest, {**where, "offset": 0, "limit": 1}),
        "dedupe holder": (sql.dedupe_holders, {"keys": [HELD]}),
    }
    print(f"plans at {log.label} events (stats checkpoint at {at})")
    async with store.pool.connection() as conn:
        for name, (text, args) in reads.items():
            cur = await conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + text, args)
            print(f"  -- {name}")
            for (line,) in await cur.fetchall():
                print(f"     {line}")


@asynccontextmanager
async def private_database() -> AsyncIterator[str]:
    """A private cluster with the machine server's settings that change the figures
    (`scale.private_server`), stopped and removed at the end; its `postgres` database."""
    from scale import private_server

    async with private_server(None, None, [], statements=False) as server:
        yield server.dsn


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
