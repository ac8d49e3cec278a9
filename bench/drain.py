"""Drain throughput of a no-op target, fast lane, one pod, with a same-run raw baseline.

    .venv/bin/python bench/drain.py --store sqlite --jobs 20000
    .venv/bin/python bench/drain.py --store postgres --jobs 50000

For each delivery mode: enqueue N no-op jobs (distinct keys, all partitions; not timed),
start a Runtime, and time until the queue is empty; the engine line also shows this
process's CPU time per job (the rest of the wall time is the database and other load). The baseline is the raw driver draining a
plain table of N rows with `DELETE … RETURNING` in batches of 100 (no events, no
ordering, no leases): the floor of what the database itself can do. Prints jobs/s and
the engine/raw ratio. Performance lives here, never in timed tests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from jobledger.domain.jobs import Job, NewJob
from jobledger.engine import Engine
from jobledger.reactors.runtime import Runtime
from jobledger.settings import Settings
from jobledger.storage.port import Store

PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
BENCH_APP = "jobledger_drain_bench"


@asynccontextmanager
async def fresh_store(kind: str, tmp: Path) -> AsyncIterator[Store]:
    if kind == "sqlite":
        from jobledger.storage.sqlite import SqliteStore

        store: Store = SqliteStore(str(tmp / f"bench-{uuid.uuid4().hex[:6]}.db"))
        await store.open()
        try:
            yield store
        finally:
            await store.close()
        return
    import psycopg

    from jobledger.storage.postgres import PostgresStore

    schema = f"jl_bench_{uuid.uuid4().hex[:8]}"
    store = PostgresStore(f"{PG_DSN}?application_name={BENCH_APP}", schema=schema, pool_max=10)
    await store.open()
    try:
        yield store
    finally:
        await store.close()
        async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def engine_drain(kind: str, tmp: Path, jobs: int, mode: str) -> float:
    async with fresh_store(kind, tmp) as store:
        engine = Engine(store, settings=Settings())
        done = 0

        async def noop(job: Job) -> None:
            nonlocal done
            done += 1

        engine.targets.register("bench:noop", "fast", noop, delivery_mode=mode)
        for start in range(0, jobs, 1000):  # setup, not timed
            async with engine.transaction() as tx:
                await engine.enqueue_many(
                    [NewJob("bench:noop", None, key=f"k{i}")
                     for i in range(start, min(start + 1000, jobs))],
                    tx=tx,
                )
        runtime = Runtime(engine, pod_id="bench")
        lag = asyncio.create_task(loop_lag())
        began = time.perf_counter()
        cpu = time.process_time()
        server_cpu = ServerCpu()
        if kind == "postgres":
            await server_cpu.start()
        await runtime.start()
        while done < jobs:
            await asyncio.sleep(0.005)
        while await store.next_due(list(range(64)), engine.targets.get("bench:noop").lane):
            await asyncio.sleep(0.005)
        elapsed = time.perf_counter() - began
        cpu = time.process_time() - cpu
        server_used = await server_cpu.seconds() if kind == "postgres" else 0.0
        commits = runtime.committer.commits
        lag.cancel()
        stall = max(LAGS, default=0.0) * 1000
        LAGS.clear()
        await runtime.stop()
        server = (f" its PostgreSQL backends {server_used / jobs * 1e6:.0f} µs CPU/job,"
                  if kind == "postgres" else "")
        print(f"  engine {mode:14s} {jobs / elapsed:10,.0f} jobs/s  ({elapsed:.2f} s,"
              f" {commits} commits, this process {cpu / jobs * 1e6:.0f} µs CPU/job,{server}"
              f" longest event-loop stall {stall:.0f} ms)")
        return jobs / elapsed


LAGS: list[float] = []


def backend_ticks(pids: list[int]) -> dict[int, int]:
    """CPU clock ticks used so far by each of these server processes (from /proc)."""
    ticks: dict[int, int] = {}
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2:].split()
        ticks[pid] = int(fields[11]) + int(fields[12])  # utime + stime
    return ticks


async def our_backends() -> list[int]:
    """The server processes of this bench's store (its connections carry BENCH_APP)."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (BENCH_APP,)
        )
        return [int(row[0]) for row in await cur.fetchall()]


class ServerCpu:
    """CPU time of this bench's own PostgreSQL backends over a stretch of time (other
    sessions on the same server are not counted; the WAL writer and checkpointer are not
    either). Backends that appear meanwhile count from their start."""

    async def start(self) -> None:
        self.before = backend_ticks(await our_backends())

    async def seconds(self) -> float:
        now = backend_ticks(await our_backends())
        used = sum(t - self.before.get(pid, 0) for pid, t in now.items())
        return used / os.sysconf("SC_CLK_TCK")


async def loop_lag(every: float = 0.01) -> None:
    """How late a 10 ms timer fires: the longest stall any task (the lease heartbeat
    included) could suffer while the lanes drain."""
    while True:
        start = time.perf_counter()
        await asyncio.sleep(every)
        LAGS.append(time.perf_counter() - start - every)


def raw_sqlite(tmp: Path, jobs: int) -> float:
    conn = sqlite3.connect(tmp / f"raw-{uuid.uuid4().hex[:6]}.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE q (id INTEGER PRIMARY KEY, payload TEXT)")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO q (payload) VALUES (?)", [("x",)] * jobs)
    conn.execute("COMMIT")
    began = time.perf_counter()
    drained = 0
    while True:
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute(
            "DELETE FROM q WHERE id IN (SELECT id FROM q ORDER BY id LIMIT 100) RETURNING id"
        ).fetchall()
        conn.execute("COMMIT")
        if not rows:
            break
        drained += len(rows)
    elapsed = time.perf_counter() - began
    conn.close()
    print(f"  raw sqlite DELETE…RETURNING {drained / elapsed:10,.0f} rows/s")
    return drained / elapsed


async def raw_postgres(jobs: int) -> float:
    import psycopg

    table = f"raw_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
        await conn.execute(f"CREATE UNLOGGED TABLE {table} (id bigserial primary key, p text)")
        await conn.execute(f"INSERT INTO {table} (p) SELECT 'x' FROM generate_series(1, %s)",
                           (jobs,))
        began = time.perf_counter()
        drained = 0
        while True:
            cur = await conn.execute(
                f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} ORDER BY id"
                " LIMIT 100 FOR UPDATE SKIP LOCKED) RETURNING id"
            )
            rows = await cur.fetchall()
            if not rows:
                break
            drained += len(rows)
        elapsed = time.perf_counter() - began
        await conn.execute(f"DROP TABLE {table}")
    print(f"  raw postgres DELETE…RETURNING {drained / elapsed:10,.0f} rows/s")
    return drained / elapsed


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--jobs", type=int, default=20_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        print(f"{args.store}: drain of {args.jobs} no-op jobs")
        raw = raw_sqlite(tmp, args.jobs) if args.store == "sqlite" else await raw_postgres(args.jobs)
        results: dict[str, Any] = {}
        for mode in ("at_least_once", "at_most_once"):
            results[mode] = await engine_drain(args.store, tmp, args.jobs, mode)
        for mode, rate in results.items():
            print(f"  ratio {mode:14s} engine/raw = {rate / raw:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
